"""agentfsm.serve over A2A, driven by the a2a-sdk's own client over real HTTP.

The served agent's card is read as the SDK reads it; a task is a run saved in the
store; an approval is ``input-required``, answered by the client's next message on
the task with decisions bound by the requests' digests.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("a2a", reason="agentfsm[serve] is not installed")
pytest.importorskip("uvicorn", reason="agentfsm[serve] is not installed")

import httpx
import uvicorn
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers import get_data_parts, get_message_text, new_data_part, new_text_part
from a2a.types import Message, Role, SendMessageRequest, TaskState

from agentfsm import STANDARD, Agent, AgentState, HumanInTheLoop, start_run, tool
from agentfsm.diagrams import run_mermaid
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.serve import create_app
from agentfsm.store import SQLiteStore, load_run
from agentfsm.testing import assert_path


@contextlib.contextmanager
def serving_at(make: Callable[[str], Any]) -> Iterator[str]:
    """The app ``make(base)`` builds for its own address, served on a free loopback port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(make(base), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the app did not start"
        time.sleep(0.02)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def user(parts: list[Any], task_id: str = "", context_id: str = "") -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=parts,
        task_id=task_id or None,
        context_id=context_id or None,
    )
    return SendMessageRequest(message=message)


async def send(base: str, request: SendMessageRequest) -> list[Any]:
    client = await create_client(base, ClientConfig(streaming=True))
    try:
        return [event async for event in client.send_message(request)]
    finally:
        await client.close()


def statuses(events: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    found = []
    for event in events:
        if event.HasField("status_update"):
            update = event.status_update
            found.append((update.status.state, dict(update.metadata)))
    return found


def transitions(events: list[Any]) -> list[str]:
    return [
        f"{m['source']} {m['trigger']} {m['dest']}"
        for state, m in statuses(events)
        if state == TaskState.TASK_STATE_WORKING and m
    ]


def test_the_card_says_what_the_agent_does(tmp_path: pathlib.Path) -> None:
    agent = Agent(
        ScriptedModel([say("hi")]),
        [add, delete_file],
        name="clerk",
        middleware=[HumanInTheLoop({"delete_file": True})],
    )

    async def read(base: str) -> Any:

        async with httpx.AsyncClient() as http:
            return await A2ACardResolver(http, base).get_agent_card()

    with serving_at(
        lambda base: create_app(agent, str(tmp_path / "runs.db"), a2a_url=base)
    ) as base:
        card = asyncio.run(read(base))
    assert card.name == "clerk"
    assert (
        card.description
        == "An agentfsm agent on the standard machine with tools: add, delete_file."
    )
    assert [(s.id, list(s.tags)) for s in card.skills] == [
        ("add", ["tool"]),
        ("delete_file", ["tool", "needs-approval"]),
    ]
    assert card.supported_interfaces[0].url == base + "/a2a"
    assert card.capabilities.streaming


def test_an_a2a_client_drives_a_task_through_an_approval(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "runs.db")
    model = ScriptedModel([call_tool("delete_file", path="old.txt"), say("Done.")])
    agent = Agent(model, [delete_file], middleware=[HumanInTheLoop({"delete_file": True})])

    async def drive(base: str) -> tuple[list[Any], list[Any]]:
        first = await send(base, user([new_text_part("Clean up")]))
        task = next(e.task for e in first if e.HasField("task"))
        return first, [task]

    with serving_at(lambda base: create_app(agent, db, a2a_url=base)) as base:
        first, (task,) = asyncio.run(drive(base))
        assert transitions(first) == [
            "expanding expanded calling",
            "calling called interrupt_check",
            "interrupt_check interrupted interrupted",
        ]
        state, _ = statuses(first)[-1]
        assert state == TaskState.TASK_STATE_INPUT_REQUIRED
        asking = first[-1].status_update.status.message
        assert get_message_text(asking).startswith("Approval needed: delete_file(")
        (asked,) = get_data_parts(asking.parts)
        (request,) = asked["requests"]
        assert request["tool_name"] == "delete_file"

        forged = {"decisions": [{"type": "approve", "digest": "sha256:" + "0" * 64}]}
        refused = asyncio.run(send(base, user([new_data_part(forged)], task.id, task.context_id)))
        assert statuses(refused)[-1][0] == TaskState.TASK_STATE_INPUT_REQUIRED
        said = get_message_text(refused[-1].status_update.status.message)
        assert said.startswith("The answer was refused:")

        decided = {"decisions": [{"type": "approve", "digest": request["digest"]}]}
        second = asyncio.run(send(base, user([new_data_part(decided)], task.id, task.context_id)))
        assert transitions(second) == [
            "interrupt_check clear executing",
            "executing executed propagating",
            "propagating propagated until_check",
            "until_check unsatisfied deciding",
            "deciding loop expanding",
            "expanding expanded calling",
            "calling called interrupt_check",
            "interrupt_check clear executing",
            "executing executed propagating",
            "propagating propagated until_check",
            "until_check unsatisfied deciding",
            "deciding done ok",
        ]
        assert statuses(second)[-1][0] == TaskState.TASK_STATE_COMPLETED
        assert get_message_text(second[-1].status_update.status.message) == "Done."
    with SQLiteStore(db) as store:  # the task is the run, saved as any other
        saved = load_run(store, task.id, strict=False)
    assert saved.status == "ok"
    assert len(saved.traces) == 2
    assert (saved.traces[1].transitions[1].detail or {})["decisions"] == {
        request["tool_call_id"]: "approve"
    }


# ---------------------------------------------------------------- a remote agent as a child


def test_a_remote_agent_is_a_tool_whose_machine_is_traced_as_the_calls_child(
    tmp_path: pathlib.Path,
) -> None:
    from agentfsm.serve import RemoteAgent

    remote_model = ScriptedModel([call_tool("add", a=1, b=2), say("It is 3.")])
    remote = Agent(remote_model, [add], name="adder")
    with serving_at(lambda base: create_app(remote, str(tmp_path / "r.db"), a2a_url=base)) as base:
        helper = RemoteAgent("adder", "Adds numbers", base)
        lead_model = ScriptedModel([call_tool("adder", task="What is 1+2?"), say("3, it says.")])
        lead = Agent(lead_model, [helper])
        with SQLiteStore(tmp_path / "lead.db") as store:
            run = start_run(lead, AgentState.of("Ask the adder"), store, run_id="lead")
            run.run_sync()
            saved = load_run(store, "lead", strict=False)
    assert run.agent_state.status == "ok"
    child_path = (
        "expanding calling interrupt_check executing propagating until_check deciding "
        "expanding calling interrupt_check executing propagating until_check deciding ok"
    )
    path = "expanding calling interrupt_check executing propagating until_check deciding "
    assert_path(run, path * 2 + "ok", children={"executing": [child_path]})
    assert_path(saved.trace, path * 2 + "ok", children={"executing": [child_path]})
    drawn = run_mermaid(run.trace, STANDARD)  # the remote machine inside executing
    assert 'state "Deciding x2" as Executing_Standard_Deciding' in drawn
    executing = next(t for t in run.trace.transitions if t.source == "executing")
    (child,) = executing.children
    assert child.machine == "standard"
    assert [f"{t.source} {t.trigger} {t.dest}" for t in child.transitions] == [
        "expanding expanded calling",
        "calling called interrupt_check",
        "interrupt_check clear executing",
        "executing executed propagating",
        "propagating propagated until_check",
        "until_check unsatisfied deciding",
        "deciding loop expanding",
        "expanding expanded calling",
        "calling called interrupt_check",
        "interrupt_check clear executing",
        "executing executed propagating",
        "propagating propagated until_check",
        "until_check unsatisfied deciding",
        "deciding done ok",
    ]
    assert lead_model.requests[1].messages[-1].tool_results[0].text == "It is 3."


def test_a_remote_approval_interrupts_the_parent_and_is_answered_there(
    tmp_path: pathlib.Path,
) -> None:
    from agentfsm.serve import RemoteAgent

    model = ScriptedModel([call_tool("delete_file", path="old.txt"), say("Deleted.")])
    remote = Agent(model, [delete_file], middleware=[HumanInTheLoop({"delete_file": True})])
    with serving_at(lambda base: create_app(remote, str(tmp_path / "r.db"), a2a_url=base)) as base:
        janitor = RemoteAgent("janitor", "Deletes files", base)
        lead_model = ScriptedModel([call_tool("janitor", task="Delete old.txt"), say("Done.")])
        lead = Agent(lead_model, [janitor])
        state = lead.execute_sync("Clean up")
        assert state.status == "interrupted"
        assert state.interrupted_at == "propagating"
        data = state.interrupt_data or {}
        assert data["type"] == "remote_agent"
        (request,) = data["requests"]
        assert request["tool_name"] == "delete_file"
        decision = {"type": "approve", "digest": request["digest"]}
        answered = asyncio.run(janitor.answer(state, [decision]))
        state = lead.execute_sync(answered)
    assert state.status == "ok"
    assert state.messages[-1].text == "Done."
    assert lead_model.requests[1].messages[-1].tool_results[0].text == "Deleted."


def test_a_remote_agent_behind_a_token_is_reached_with_it_and_refused_without(
    tmp_path: pathlib.Path,
) -> None:
    from agentfsm.serve import RemoteAgent

    remote = Agent(ScriptedModel([say("Hello."), say("Hello again.")]), name="greeter")

    def make(base: str) -> Any:
        return create_app(remote, str(tmp_path / "r.db"), token="s3cret", a2a_url=base)

    with serving_at(make) as base:
        lead_model = ScriptedModel(
            [
                call_tool("greeter", task="Greet"),
                say("ok"),
                call_tool("greeter", task="Greet"),
                say("ok"),
            ]
        )
        with_token = Agent(lead_model, [RemoteAgent("greeter", "Greets", base, token="s3cret")])
        assert with_token.execute_sync("Say hi").status == "ok"
        assert lead_model.requests[1].messages[-1].tool_results[0].text == "Hello."
        without = Agent(lead_model, [RemoteAgent("greeter", "Greets", base)])
        assert without.execute_sync("Say hi").status == "ok"
    refused = lead_model.requests[3].messages[-1].tool_results[0]
    assert refused.is_error
    assert refused.text.startswith("The greeter agent was not reached:")
    assert remote.model.calls == 1  # type: ignore[attr-defined]


def test_a_reply_streams_as_artifact_chunks_before_its_step(tmp_path: pathlib.Path) -> None:
    model = ScriptedModel([say("One two three.")], stream=True)
    agent = Agent(model)
    with serving_at(lambda base: create_app(agent, str(tmp_path / "r.db"), a2a_url=base)) as base:
        events = asyncio.run(send(base, user([new_text_part("Count")])))
    seen = []
    for event in events:
        if event.HasField("artifact_update"):
            update = event.artifact_update
            text = get_message_text(Message(parts=update.artifact.parts))
            seen.append((update.artifact.artifact_id, update.append, text))
        elif event.HasField("status_update") and event.status_update.metadata:
            meta = dict(event.status_update.metadata)
            seen.append(("step", False, f"{meta['source']} {meta['trigger']} {meta['dest']}"))
    assert seen == [
        ("step", False, "expanding expanded calling"),
        ("reply-1", False, "One "),
        ("reply-1", True, "two "),
        ("reply-1", True, "three. "),
        ("step", False, "calling called interrupt_check"),
        ("step", False, "interrupt_check clear executing"),
        ("step", False, "executing executed propagating"),
        ("step", False, "propagating propagated until_check"),
        ("step", False, "until_check unsatisfied deciding"),
        ("step", False, "deciding done ok"),
        ("answer", False, "One two three."),
    ]


def test_a_cancelled_task_leaves_its_run_paused_in_the_store(tmp_path: pathlib.Path) -> None:
    from a2a.types import CancelTaskRequest

    db = str(tmp_path / "r.db")
    gate = threading.Event()

    @tool
    async def slow() -> str:
        """Take a long time."""
        await asyncio.to_thread(gate.wait, 30)
        return "slow done"

    agent = Agent(ScriptedModel([call_tool("slow"), say("Done.")]), [slow])

    async def drive(base: str) -> tuple[str, Any]:
        client = await create_client(base, ClientConfig(streaming=True))
        try:
            async for event in client.send_message(user([new_text_part("Go")])):
                if event.HasField("status_update"):
                    meta = dict(event.status_update.metadata)
                    if meta.get("dest") == "executing":
                        task_id = event.status_update.task_id
                        break
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            return task_id, cancelled
        finally:
            gate.set()
            await client.close()

    with serving_at(lambda base: create_app(agent, db, a2a_url=base)) as base:
        task_id, cancelled = asyncio.run(drive(base))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        deadline = time.monotonic() + 10
        while True:
            with SQLiteStore(db) as store:
                saved = load_run(store, task_id, strict=False)
            if saved.status != "running" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert saved.status == "paused"
    assert [f"{t.source} {t.trigger} {t.dest}" for t in saved.trace.transitions] == [
        "expanding expanded calling",
        "calling called interrupt_check",
        "interrupt_check clear executing",
        "executing paused paused",
    ]


def test_a_paused_task_goes_on_with_the_next_message(tmp_path: pathlib.Path) -> None:
    from agentfsm._run import current_run

    @tool
    def breather() -> str:
        """Ask the host to pause the run after this step."""
        run = current_run()
        assert run is not None
        run.request_pause("a breather")
        return "paused after this"

    db = str(tmp_path / "r.db")
    agent = Agent(ScriptedModel([call_tool("breather"), say("Rested.")]), [breather])
    with serving_at(lambda base: create_app(agent, db, a2a_url=base)) as base:
        first = asyncio.run(send(base, user([new_text_part("Go")])))
        task = next(e.task for e in first if e.HasField("task"))
        assert transitions(first)[-1] == "propagating paused paused"
        assert statuses(first)[-1][0] == TaskState.TASK_STATE_INPUT_REQUIRED
        said = get_message_text(first[-1].status_update.status.message)
        assert said == "The run paused (a breather); send a message to go on."
        second = asyncio.run(send(base, user([new_text_part("Go on")], task.id, task.context_id)))
    assert transitions(second)[0] == "propagating propagated until_check"
    assert transitions(second)[-1] == "deciding done ok"
    assert get_message_text(second[-1].status_update.status.message) == "Rested."


def test_an_a2a_approval_asked_before_a_restart_is_answered_after_it(
    tmp_path: pathlib.Path,
) -> None:
    from a2a.server.tasks import InMemoryTaskStore

    db = str(tmp_path / "r.db")
    tasks = InMemoryTaskStore()  # the SDK's task store, kept by the host across restarts

    def agent(resumed: bool) -> Agent:
        script = [call_tool("delete_file", path="old.txt"), say("Done.")]
        model = ScriptedModel(script[1:] if resumed else script)
        return Agent(model, [delete_file], middleware=[HumanInTheLoop({"delete_file": True})])

    def make(resumed: bool) -> Callable[[str], Any]:
        return lambda base: create_app(agent(resumed), db, a2a_url=base, a2a_tasks=tasks)

    with serving_at(make(False)) as base:
        first = asyncio.run(send(base, user([new_text_part("Clean up")])))
    task = next(e.task for e in first if e.HasField("task"))
    (asked,) = get_data_parts(first[-1].status_update.status.message.parts)
    decided = {"decisions": [{"type": "approve", "digest": asked["requests"][0]["digest"]}]}
    with serving_at(make(True)) as base:
        second = asyncio.run(send(base, user([new_data_part(decided)], task.id, task.context_id)))
    assert statuses(second)[-1][0] == TaskState.TASK_STATE_COMPLETED
    assert transitions(second)[0] == "interrupt_check clear executing"
    with SQLiteStore(db) as store:
        assert load_run(store, task.id, strict=False).status == "ok"
