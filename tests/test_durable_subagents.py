"""Durable runs whose subagent asks for approval: the run waits as for its own request,
``decide`` answers the innermost request, the child goes on where it waited and the
parent after it; a worker killed on the way replays the parent's recorded steps.

The agents here are also what the worker processes run:
``agentfsm worker --db URL tests.test_durable_subagents:coordinator``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable engine needs the dbos extra")

from agentfsm import (
    Agent,
    AgentState,
    Approval,
    HumanInTheLoop,
    Message,
    ResumeError,
    SubAgent,
    tool,
)
from agentfsm._middleware import request_digest
from agentfsm.durable import Engine
from agentfsm.durable._workflow import CHILD_WORKFLOW, WAITING_EVENT, WORKFLOW
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say
from tests.test_durable import _assert_paths, _wait_for_decisions, _Workers, launched
from tests.test_durable import db as db  # a fixture
from tests.test_durable_shared import race_decides

WORKER_AGENT = "tests.test_durable_subagents:coordinator"
LOOP = "expanding calling interrupt_check executing propagating until_check deciding"
#: The parent's recorded steps of a run whose subagent asked once: its reply, the subagent's
#: first call (a child workflow, ``RUN/tool:writer@clear>executing#2``), the decisions
#: handed down, its final reply.
STEPS = [
    "model:coordinator@expanded>calling#1",
    "agentfsm.subagent",
    "subagent:writer@resume#3",
    "model:coordinator@expanded>calling#4",
]
#: The id of the child workflow of the parent's subagent call, after the parent's id.
CHILD = "/tool:writer@clear>executing#2"
REJECTED = "Tool call 'publish' was rejected by a human reviewer."


def _log(line: str) -> None:
    path = os.environ.get("AGENTFSM_TEST_LOG")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")


@tool
async def publish(text: str) -> str:
    """Publish a text (logs ``start TEXT`` and ``done TEXT``)."""
    _log(f"start {text}")
    await asyncio.sleep(float(os.environ.get("AGENTFSM_TEST_TOOL_DELAY", "0")))
    _log(f"done {text}")
    return f"published {text}"


def _task(messages: Sequence[Message]) -> str:
    return next(m.text for m in messages if m.role == "user")


def _writer_reply(messages: Sequence[Message]) -> Message:
    """Publish the task (a task saying "twice": twice), then say how it went; each
    publish call waits for approval."""
    task = _task(messages)
    _log(f"writer {task}")
    results = [r.text for m in messages if m.role == "tool" for r in m.tool_results]
    if not results:
        return call_tool("publish", text=task, call_id=f"{task}-publish")
    if len(results) == 1 and "twice" in task:
        return call_tool("publish", text=f"{task} again", call_id=f"{task}-again")
    return say(f"writer: {'; '.join(results)}")


def _lead_reply(name: str, child: str) -> Any:
    def reply(messages: Sequence[Message]) -> Message:
        prompt = _task(messages)
        _log(f"{name} {prompt}")
        time.sleep(float(os.environ.get("AGENTFSM_TEST_MODEL_DELAY", "0")))
        results = [r.text for m in messages if m.role == "tool" for r in m.tool_results]
        if not results:
            return call_tool(child, task=prompt, call_id=f"{prompt}-{child}")
        return say(f"{name}: {results[-1]}")

    return reply


def writer() -> Agent:
    return Agent(
        ScriptedModel(_writer_reply, model_name="writer"),
        [publish],
        middleware=[HumanInTheLoop({"publish": True})],
    )


def coordinator() -> Agent:
    """Hands every prompt to its gated ``writer`` subagent."""
    return Agent(
        ScriptedModel(_lead_reply("coordinator", "writer"), model_name="coordinator"),
        [SubAgent("writer", "Publishes texts", writer())],
    )


def chief() -> Agent:
    """Hands every prompt to an ``editor`` subagent, which hands it to the ``writer``."""
    editor = Agent(
        ScriptedModel(_lead_reply("editor", "writer"), model_name="editor"),
        [SubAgent("writer", "Publishes texts", writer())],
    )
    return Agent(
        ScriptedModel(_lead_reply("chief", "editor"), model_name="chief"),
        [SubAgent("editor", "Edits texts", editor)],
    )


def _clerk_reply(messages: Sequence[Message]) -> Message:
    """Publish the task without asking anyone, then say how it went."""
    task = _task(messages)
    _log(f"clerk {task}")
    results = [r.text for m in messages if m.role == "tool" for r in m.tool_results]
    if not results:
        return call_tool("publish", text=task, call_id=f"{task}-publish")
    return say(f"clerk: {results[-1]}")


def office() -> Agent:
    """Hands every prompt to its ungated ``clerk`` subagent."""
    clerk = Agent(ScriptedModel(_clerk_reply, model_name="clerk"), [publish])
    return Agent(
        ScriptedModel(_lead_reply("office", "clerk"), model_name="office"),
        [SubAgent("clerk", "Publishes texts", clerk)],
    )


def pair() -> Agent:
    """Hands two tasks to its ``writer`` at once: two subagents wait."""
    return Agent(
        ScriptedModel(
            lambda messages: call_tools(("writer", {"task": "one"}), ("writer", {"task": "two"}))
        ),
        [SubAgent("writer", "Publishes texts", writer())],
    )


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    agents = {"coordinator": coordinator(), "chief": chief(), "pair": pair(), "office": office()}
    with launched(db, agents) as engine:
        yield engine


def _tool_texts(result: Any) -> list[str]:
    return [r.text for m in result.state.messages if m.role == "tool" for r in m.tool_results]


def test_a_subagents_request_waits_and_an_approval_runs_the_child_on(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    run_id = engine.submit(AgentState.of("bees"), agent="coordinator", run_id="bees")
    request = _wait_for_decisions(engine, run_id, "bees-publish")
    assert request["child_path"] == ["writer"]
    [shown] = request["action_requests"]
    assert (shown["tool_name"], shown["arguments"]) == ("publish", {"text": "bees"})
    event = engine.client.get_event(run_id, WAITING_EVENT, timeout_seconds=0)
    assert event["interrupt"]["type"] == "subagent" and event["interrupt"]["subagent"] == "writer"
    assert engine.status(run_id).status == "waiting"
    engine.decide(run_id, [{"type": "approve", "digest": request_digest(shown)}])
    result = engine.result(run_id, timeout=30)
    assert result.status == "ok"
    assert _tool_texts(result) == ["writer: published bees"]  # the child's answer
    assert result.state.messages[-1].text == "coordinator: writer: published bees"
    assert [t.path for t in result.traces] == [
        "expanding calling interrupt_check executing propagating interrupted",
        f"propagating until_check deciding {LOOP} ok",
    ]
    _assert_paths(result)
    # the resumed writer: its approval entered its machine at the state that asked, and the
    # approved publish ran at its executing
    (child,) = result.traces[1].transitions[0].children
    assert child.path == f"interrupt_check executing propagating until_check deciding {LOOP} ok"
    steps = [s["function_name"] for s in engine.client.list_workflow_steps(run_id)]
    assert [s for s in steps if not s.startswith("DBOS.")] == STEPS
    lines = log.read_text().splitlines()
    assert [x for x in lines if x.startswith(("start", "done"))] == ["start bees", "done bees"]
    # the same decision again is taken already; another is refused
    engine.decide(run_id, [{"type": "approve", "digest": request_digest(shown)}])
    with pytest.raises(ResumeError, match="not waiting for decisions"):
        engine.decide(run_id, [{"type": "reject"}], unbound=True)


def test_a_rejection_reaches_the_child_and_its_answer_the_parent(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("wasps"), agent="coordinator")
    _wait_for_decisions(engine, run_id, "wasps-publish")
    engine.decide(run_id, [{"type": "reject"}], unbound=True)
    result = engine.result(run_id, timeout=30)
    assert result.status == "ok"
    assert _tool_texts(result) == [f"writer: {REJECTED}"]


def test_decisions_that_do_not_answer_the_request_are_refused_and_nothing_is_sent(
    engine: Engine,
) -> None:
    run_id = engine.submit(AgentState.of("ants"), agent="coordinator")
    request = _wait_for_decisions(engine, run_id, "ants-publish")
    other = Engine(engine.url)  # a client alone: it checks against the request it reads
    try:
        for client in (engine, other):
            for wrong, refusal in [
                ([], r"Decision count \(0\) does not match"),
                ([{"type": "approve"}] * 2, r"Decision count \(2\) does not match"),
                ([{"type": "grant"}], r"Decision at index 0 has type 'grant'; use one of"),
                ([{"type": "approve"}], "carries no digest of the request it decides"),
                ([{"type": "approve", "digest": "sha256:0"}], "another action request"),
                ([{"type": "approve", "tool_call_id": "forged"}], "names tool call 'forged'"),
            ]:
                with pytest.raises(ValueError, match=refusal):
                    client.decide(run_id, wrong)
        assert engine.ledger.latest(run_id) is None  # nothing claimed
        assert engine.waiting(run_id) == request  # nothing sent: it still waits
        other.decide(run_id, [{"type": "approve"}], unbound=True)
        assert other.result(run_id, timeout=30).status == "ok"
    finally:
        other.close()


def test_of_two_concurrent_decides_one_is_refused_with_a_conflict(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("moths"), agent="coordinator")
    [asked] = Approval.of(_wait_for_decisions(engine, run_id, "moths-publish")).requests
    won, lost = race_decides(engine.url, run_id)
    sent = {"type": won, "tool_call_id": "moths-publish", "digest": asked.digest}
    assert lost.decisions == [sent]
    assert lost.run_id == run_id
    result = engine.result(run_id, timeout=30)
    expected = "writer: published moths" if won == "approve" else f"writer: {REJECTED}"
    assert _tool_texts(result) == [expected]


def test_a_subagent_request_whose_wait_timed_out_is_resumed_by_decide(engine: Engine) -> None:
    run_id = engine.submit(
        AgentState.of("late"), agent="coordinator", run_id="late", decision_timeout=0.3
    )
    ended = engine.result(run_id, timeout=30)
    assert ended.status == "interrupted" and engine.waiting(run_id) is None
    other = Engine(engine.url)  # a client alone
    try:
        with pytest.raises(ValueError, match=r"Decision count \(0\) does not match"):
            other.decide(run_id, [])
        assert [w.workflow_id for w in other.client.list_workflows(name=WORKFLOW)] == [
            "late"
        ]  # none queued
        other.decide(run_id, [{"type": "approve"}], unbound=True)
        result = other.result(run_id, timeout=30)
    finally:
        other.close()
    assert result.status == "ok" and _tool_texts(result) == ["writer: published late"]
    assert [w.forked_from for w in engine.client.list_workflows(name=WORKFLOW)] == [None, "late"]
    assert [t.path for t in result.traces] == [
        "expanding calling interrupt_check executing propagating interrupted",
        f"propagating until_check deciding {LOOP} ok",
    ]
    _assert_children(result)


def _assert_children(result: Any) -> None:
    """The writer's two runs nest where they ran, however often the run was replayed:
    its first under the parent's call, its resumed one under the answer's transition."""
    first, resumed = result.traces[:2]
    (asked,) = first.where("executing")[0].children
    assert asked.path == "expanding calling interrupt_check interrupted"
    (answered,) = resumed.transitions[0].children
    assert answered.path == f"interrupt_check executing propagating until_check deciding {LOOP} ok"


def test_a_child_that_asks_again_makes_the_run_wait_again(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("twice"), agent="coordinator")
    _wait_for_decisions(engine, run_id, "twice-publish")
    engine.decide(run_id, [{"type": "approve"}], unbound=True)
    request = _wait_for_decisions(engine, run_id, "twice-again")
    assert request["action_requests"][0]["arguments"] == {"text": "twice again"}
    engine.decide(run_id, [{"type": "reject"}], unbound=True)
    result = engine.result(run_id, timeout=30)
    assert result.status == "ok"
    assert _tool_texts(result) == [f"writer: published twice; {REJECTED}"]
    assert [t.terminal for t in result.traces] == ["interrupted", "interrupted", "ok"]
    _assert_paths(result)


def test_a_nested_subagents_request_is_answered_innermost(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("owls"), agent="chief")
    request = _wait_for_decisions(engine, run_id, "owls-publish")
    assert request["child_path"] == ["editor", "writer"]
    engine.decide(run_id, [{"type": "approve"}], unbound=True)
    result = engine.result(run_id, timeout=30)
    assert result.status == "ok"
    assert result.state.messages[-1].text == "chief: editor: writer: published owls"


def test_two_subagents_waiting_at_once_end_the_run_interrupted(engine: Engine) -> None:
    result = engine.result(engine.submit(AgentState.of("both"), agent="pair"), timeout=30)
    assert result.status == "interrupted" and result.state.interrupt_data is not None
    assert result.state.interrupt_data["type"] == "multiple_interrupts"
    with pytest.raises(ResumeError, match="'multiple_interrupts', not waiting for approval"):
        engine.decide(result.run_id, [{"type": "approve"}], unbound=True)


# ---------------------------------------------------------------- a subagent's child workflow


def _names(engine: Engine, workflow_id: str) -> list[str]:
    steps = engine.client.list_workflow_steps(workflow_id)
    return [s["function_name"] for s in steps if not s["function_name"].startswith("DBOS.")]


#: The recorded steps of the office's run, and of its clerk's child workflow.
OFFICE_STEPS = [
    "model:office@expanded>calling#1",
    "agentfsm.subagent",
    "model:office@expanded>calling#3",
]
CLERK = "/tool:clerk@clear>executing#2"
CLERK_STEPS = [
    "model:clerk@expanded>calling#1",
    "tool:publish@clear>executing#2",
    "model:clerk@expanded>calling#3",
]


def test_a_subagents_calls_are_steps_of_its_own_child_workflow(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("figs"), agent="office", run_id="figs")
    result = engine.result(run_id, timeout=30)
    assert result.status == "ok"
    assert result.state.messages[-1].text == "office: clerk: published figs"
    assert _names(engine, run_id) == OFFICE_STEPS
    [child] = engine.client.list_workflows(name=CHILD_WORKFLOW)
    assert (child.workflow_id, child.parent_workflow_id) == (run_id + CLERK, run_id)
    assert child.status == "SUCCESS"
    assert _names(engine, child.workflow_id) == CLERK_STEPS
    assert [r.run_id for r in engine.runs()] == [run_id]  # the child is no run of its own
    assert engine.status(run_id).status == "ok"
    (clerk,) = result.traces[0].where("executing")[0].children  # nested from the record
    assert clerk.path == f"{LOOP} {LOOP} ok"


@pytest.mark.parametrize("max_runs", [2, 3])
def test_a_child_workflow_runs_on_what_its_parent_has_left_of_max_runs(
    engine: Engine, max_runs: int
) -> None:
    """As in one process: the clerk gets what the office has left (two calls: one left,
    so it fails; three: two left, enough) and its calls count in the office's."""
    run = office().start(AgentState.of("cap"), max_runs=max_runs)
    asyncio.run(run.run())
    here = run.agent_state
    run_id = engine.submit(AgentState.of("cap"), agent="office", max_runs=max_runs)
    result = engine.result(run_id, timeout=30)
    assert result.status == here.status == "error"
    assert result.state.error is not None and here.error is not None
    assert result.state.error.type == here.error.type == "exceeded_max_runs"
    texts = [r.text for m in here.messages for r in m.tool_results]
    assert _tool_texts(result) == texts
    assert ("failed" in texts[0]) == (max_runs == 2)


def test_a_nested_subagent_is_a_child_of_its_parents_child_workflow(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("elms"), agent="chief", run_id="elms")
    _wait_for_decisions(engine, run_id, "elms-publish")
    editor = run_id + "/tool:editor@clear>executing#2"
    writer = editor + CHILD
    found = {w.workflow_id: w.parent_workflow_id for w in engine.client.list_workflows()}
    assert found == {run_id: None, editor: run_id, writer: editor}
    assert _names(engine, editor) == ["model:editor@expanded>calling#1", "agentfsm.subagent"]
    assert _names(engine, writer) == ["model:writer@expanded>calling#1"]
    assert [r.run_id for r in engine.runs()] == [run_id]
    engine.decide(run_id, [{"type": "approve"}], unbound=True)
    assert engine.result(run_id, timeout=30).status == "ok"


# ---------------------------------------------------------------- a worker killed on the way


def _take_over(group: _Workers, first: Any, stop: str, agent: str) -> None:
    """Stop the ``first`` worker (``killed`` or ``drained``) and start a second that takes
    its runs over (a killed worker's by ``--recover``)."""
    if stop == "drained":
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0 and "drained" in out, err
        group.start("second", "--name", agent)
    else:
        first.kill()
        first.wait()
        group.start("second", "--name", agent, "--recover", "first")


@pytest.mark.parametrize("how", ["killed in publish", "killed in model", "drained in publish"])
def test_a_worker_stopped_after_the_decision_runs_no_recorded_step_of_the_parent_again(
    db: str, tmp_path: Path, how: str
) -> None:
    """Killed inside the child's approved call, the answer's step runs again (the
    child's calls in it are at least once); killed after it (in the parent's next
    model call), nothing of the child runs again. Drained inside the child's call, the
    step finishes and is recorded, the run pauses at its next boundary and another
    worker goes on from there. No recorded step of the parent runs twice."""
    stop, where = how.split(" in ")
    group = _Workers(
        db,
        tmp_path / "calls.log",
        agent=WORKER_AGENT,
        model_delay=0.5 if where == "model" else 0.0,
        tool_delay=0.5 if where == "publish" else 0.0,
    )
    client = Engine(db)
    try:
        first = group.start("first", "--name", "coordinator")
        run_id = client.submit(AgentState.of("kill"), agent="coordinator", run_id="kill")
        _wait_for_decisions(client, run_id, "kill-publish")
        mark = len(group.lines())
        client.decide(run_id, [{"type": "approve"}], unbound=True)
        # inside the child's approved call, or inside the parent's call for its final reply
        group.wait_for("start" if where == "publish" else "coordinator", mark)
        _take_over(group, first, stop, "coordinator")
        result = client.result(run_id, timeout=60)
        steps = [s["function_name"] for s in client.client.list_workflow_steps(run_id)]
    finally:
        client.close()
        group.close()
    assert result.status == "ok" and _tool_texts(result) == ["writer: published kill"]
    drained = ("paused: draining",) if stop == "drained" else ()
    assert result.ends == ("interrupted", *drained, "ok")
    _assert_children(result)
    _assert_paths(result)
    assert [s for s in steps if not s.startswith("DBOS.")] == STEPS
    lines = group.lines()
    before, after = lines[:mark], lines[mark:]
    # before the decision: the parent's first reply and the writer's request, once each
    assert before == ["coordinator kill", "writer kill"]
    publishing = [x for x in after if x.startswith(("start", "done", "writer"))]
    if how == "killed in publish":  # the answer's step ran again: the child resumed twice
        assert publishing == ["start kill", "start kill", "done kill", "writer kill"]
    else:  # recorded: nothing of the child ran again
        assert publishing == ["start kill", "done kill", "writer kill"]
    if how == "killed in model":  # the parent's unrecorded last call did run again
        assert after.count("coordinator kill") == 2


@pytest.mark.parametrize("stop", ["killed", "drained"])
def test_a_worker_stopped_inside_a_subagents_tool_call_runs_no_completed_child_step_again(
    db: str, tmp_path: Path, stop: str
) -> None:
    """The clerk's first reply is a completed step of its child workflow: the worker that
    takes the runs over replays it, never calls the model again. The publish call it was
    inside is no completed step when killed (it runs again: DBOS runs a step at least
    once) and is completed when drained (the draining worker finishes it, once)."""
    group = _Workers(
        db,
        tmp_path / "calls.log",
        agent="tests.test_durable_subagents:office",
        model_delay=0.0,
        tool_delay=0.5,
    )
    client = Engine(db)
    try:
        first = group.start("first", "--name", "office")
        run_id = client.submit(AgentState.of("kill"), agent="office", run_id="kill")
        group.wait_for("start", 0)
        _take_over(group, first, stop, "office")
        result = client.result(run_id, timeout=60)
        parent = _names(client, run_id)
        child = _names(client, run_id + CLERK)
        runs = [r.run_id for r in client.runs()]
    finally:
        client.close()
        group.close()
    assert result.status == "ok" and result.ends == ("ok",)
    assert result.state.messages[-1].text == "office: clerk: published kill"
    assert parent == OFFICE_STEPS and runs == [run_id]
    again = ["start kill"] if stop == "killed" else []
    assert group.lines() == [
        "office kill",
        "clerk kill",  # its first reply: recorded in the child workflow, never asked again
        "start kill",
        *again,
        "done kill",
        "clerk kill",
        "office kill",
    ]
    assert child == CLERK_STEPS
    clerks = result.traces[0].where("executing")[0].children
    # drained, the child paused after its call (its recorded step says so) and went on
    assert [c.terminal for c in clerks] == (["ok"] if stop == "killed" else ["paused", "ok"])
    _assert_paths(result)
