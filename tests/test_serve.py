"""agentfsm.serve over real HTTP: AG-UI events checked against the SDK's own models.

The app runs as it does for a user: uvicorn on a free loopback port, in a thread of
the test; requests go over the network with httpx. Every event read is validated
against ``ag_ui.core``'s models before anything else is asserted.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import pydantic
import pytest

pytest.importorskip("ag_ui", reason="agentfsm[serve] is not installed")

from ag_ui.core import (
    Event,
    EventType,
    ResumeEntry,
    RunAgentInput,
    UserMessage,
)

from agentfsm import (
    Agent,
    Approval,
    Edge,
    HumanInTheLoop,
    LLMChain,
    MachineTable,
    Message,
    MessageDelta,
    Ok,
    RunNotFoundError,
    SubAgent,
    Thinking,
    ToolOutput,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, fail, say
from agentfsm.serve import ServedMachine, create_app
from agentfsm.steps import Continue, call_llm, check_max_runs, check_response_complete
from agentfsm.store import SQLiteStore, load_run
from tests.test_studio import serving

STATUSES: tuple[Literal["resolved", "cancelled"], ...] = ("resolved", "cancelled")
EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Event)
JSON = {"content-type": "application/json"}

TOOL_RUN = [
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


def parse(text: str) -> list[tuple[int, Any]]:
    """The SSE stream's ``(id, event)`` pairs, each event validated by the SDK's models."""
    found = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        found.append((int(fields["id"]), EVENTS.validate_json(fields["data"])))
    return found


def given(run_id: str, text: str = "hi", thread: str = "t1", **extra: Any) -> str:
    """A RunAgentInput as a client sends it, built with the SDK's own types."""
    body = RunAgentInput(
        thread_id=thread,
        run_id=run_id,
        messages=[UserMessage(id="u1", content=text)],
        state={},
        tools=[],
        context=[],
        forwarded_props={},
        **extra,
    )
    return body.model_dump_json(by_alias=True)


def post(base: str, body: str, **headers: str) -> list[tuple[int, Any]]:
    response = httpx.post(base + "/", content=body, headers={**JSON, **headers}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse(response.text)


def steps(events: list[tuple[int, Any]]) -> list[str]:
    """``source trigger dest`` of the run's own STEP_FINISHED events (a child's carry
    its subagent id), as a trace prints them."""
    return [
        f"{e.step_name} {e.metadata['trigger']} {e.metadata['dest']}"
        for _, e in events
        if e.type == EventType.STEP_FINISHED and e.subagent_run_id is None
    ]


def kinds(events: list[tuple[int, Any]]) -> list[str]:
    return [e.type.value for _, e in events]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def adder(stream: bool = True) -> Agent:
    model = ScriptedModel([call_tool("add", a=1, b=2), say("1 + 2 is 3.")], stream=stream)
    return Agent(model, [add])


def gated(resumed: bool = False) -> Agent:
    """An agent whose deletes need approval; ``resumed``: the same agent after the
    approval (a new process's model, its script going on from there)."""
    script = [call_tool("delete_file", path="old.txt"), say("Done.")]
    model = ScriptedModel(script[1:] if resumed else script)
    return Agent(model, [delete_file], middleware=[HumanInTheLoop({"delete_file": True})])


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "runs.db")


@pytest.fixture
def served(db: str) -> Iterator[str]:
    with serving(create_app(adder(), db)) as base:
        yield base


def test_a_run_is_its_transitions_streamed_as_steps_text_and_tool_calls(
    served: str, db: str
) -> None:
    events = post(served, given("r1", "What is 1+2?"))
    assert [n for n, _ in events] == list(range(1, len(events) + 1))
    assert steps(events) == TOOL_RUN
    started = [e.step_name for _, e in events if e.type == EventType.STEP_STARTED]
    assert started == [s.split()[0] for s in TOOL_RUN]
    # each STEP_STARTED is closed by its STEP_FINISHED before the next one opens
    assert kinds(events)[:4] == ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED", "STEP_FINISHED"]
    calling = kinds(events)[kinds(events).index("STATE_DELTA") + 2 :][:6]
    assert calling == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "STATE_DELTA",
        "STEP_STARTED",
    ]
    by_type = {e.type.value: e for _, e in events}
    assert by_type["TOOL_CALL_START"].tool_call_name == "add"
    assert json.loads(by_type["TOOL_CALL_ARGS"].delta) == {"a": 1, "b": 2}
    assert by_type["TOOL_CALL_RESULT"].content == "3"
    assert by_type["TOOL_CALL_RESULT"].tool_call_id == by_type["TOOL_CALL_START"].tool_call_id
    text = [e.delta for _, e in events if e.type == EventType.TEXT_MESSAGE_CONTENT]
    assert text == ["1 ", "+ ", "2 ", "is ", "3. "]  # streamed word by word, as the model did
    assert kinds(events)[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    finished = events[-1][1]
    assert finished.outcome.type == "success"
    assert finished.result == {"status": "ok", "text": "1 + 2 is 3."}
    assert [m.role for m in events[-2][1].messages] == ["user", "assistant", "tool", "assistant"]
    snapshot = events[1][1].snapshot
    assert snapshot["machine"]["state"] == "expanding"
    last_delta = [e for _, e in events if e.type == EventType.STATE_DELTA][-1]
    assert [op.model_dump() for op in last_delta.delta] == [
        {"op": "replace", "path": "/machine/state", "value": "ok"}
    ]
    with SQLiteStore(db) as store:  # saved under the AG-UI run's id, as the studio reads it
        saved = load_run(store, "r1", strict=False)
    assert saved.status == "ok"
    assert [f"{t.source} {t.trigger} {t.dest}" for t in saved.trace.transitions] == TOOL_RUN


def test_a_failed_run_ends_with_run_error_naming_its_error_type(db: str) -> None:
    agent = Agent(ScriptedModel([fail("invalid_request", "the model refused the request")]))
    with serving(create_app(agent, db)) as base:
        events = post(base, given("r1"))
    assert steps(events) == ["expanding expanded calling", "calling failed error"]
    error = events[-1][1]
    assert error.type == EventType.RUN_ERROR
    assert error.code == "invalid_request"
    assert error.message == "the model refused the request"
    assert EventType.RUN_FINISHED not in {e.type for _, e in events}


def test_an_approval_is_an_interrupt_answered_by_resume_bound_to_its_digest(db: str) -> None:
    with serving(create_app(gated(), db)) as base:
        events = post(base, given("r1", "Clean up"))
        assert steps(events) == [
            "expanding expanded calling",
            "calling called interrupt_check",
            "interrupt_check interrupted interrupted",
        ]
        finished = events[-1][1]
        assert finished.type == EventType.RUN_FINISHED
        assert finished.outcome.type == "interrupt"
        (interrupt,) = finished.outcome.interrupts
        with SQLiteStore(db) as store:
            saved = load_run(store, "r1", strict=False)
        assert saved.status == "interrupted"
        assert saved.agent_state is not None
        request = Approval.of(saved.agent_state.interrupt_data).requests[0]
        assert interrupt.id == request.digest  # the answer decides exactly what was shown
        assert interrupt.reason == "tool_approval"
        assert interrupt.tool_call_id == request.tool_call_id
        assert interrupt.metadata["arguments"] == {"path": "old.txt"}

        answer = ResumeEntry(
            interrupt_id=interrupt.id,
            status="resolved",
            payload={"type": "edit", "arguments": {"path": "older.txt"}},
        )
        resumed = post(base, given("r2", "Clean up", parent_run_id="r1", resume=[answer]))
        assert steps(resumed) == [
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
        result = next(e for _, e in resumed if e.type == EventType.TOOL_CALL_RESULT)
        assert result.content == "deleted older.txt"
        assert resumed[0][1].run_id == "r2" and resumed[-1][1].outcome.type == "success"

        again = httpx.post(
            base + "/",
            content=given("r3", parent_run_id="r1", resume=[answer]),
            headers=JSON,
        )
        assert again.status_code == 409  # answered once: the run waits for nothing now
        assert "waits for no answer" in again.json()["error"]
    with SQLiteStore(db) as store:
        saved = load_run(store, "r1", strict=False)
    assert saved.status == "ok"
    assert len(saved.traces) == 2  # the answer started the run's second segment
    assert (saved.traces[1].transitions[1].detail or {})["decisions"] == {
        request.tool_call_id: "edit"
    }


def test_an_answer_to_a_request_not_shown_is_refused_and_nothing_runs(db: str) -> None:
    with serving(create_app(gated(), db)) as base:
        post(base, given("r1"))
        forged = ResumeEntry(interrupt_id="sha256:" + "0" * 64, status="resolved")
        refused = httpx.post(
            base + "/", content=given("r2", parent_run_id="r1", resume=[forged]), headers=JSON
        )
        assert refused.status_code == 409
        assert "requests changed" in refused.json()["error"]
    with SQLiteStore(db) as store:
        assert load_run(store, "r1", strict=False).status == "interrupted"


def test_of_two_answers_at_once_the_first_wins(db: str) -> None:
    with serving(create_app(gated(), db)) as base:
        interrupt = post(base, given("r1"))[-1][1].outcome.interrupts[0]

        async def both() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                answers = [
                    given(
                        f"a{i}",
                        parent_run_id="r1",
                        resume=[ResumeEntry(interrupt_id=interrupt.id, status=status)],
                    )
                    for i, status in enumerate(STATUSES)
                ]
                return list(
                    await asyncio.gather(
                        *(client.post("/", content=a, headers=JSON) for a in answers)
                    )
                )

        responses = asyncio.run(both())
    assert sorted(r.status_code for r in responses) == [200, 409]
    won = next(r for r in responses if r.status_code == 200)
    with SQLiteStore(db) as store:
        saved = load_run(store, "r1", strict=False)
    decided = (saved.traces[1].transitions[1].detail or {})["decisions"]
    winner = parse(won.text)[0][1].run_id
    assert decided == {interrupt.tool_call_id: "approve" if winner == "a0" else "reject"}


def test_a_client_that_goes_away_loses_nothing_and_reads_on_where_it_left(db: str) -> None:
    gate = threading.Event()

    @tool
    async def hold() -> str:
        """Wait until the test lets the run go on."""
        await asyncio.to_thread(gate.wait, 30)
        return "held"

    agent = Agent(ScriptedModel([call_tool("hold"), say("Done.")]), [hold])
    with serving(create_app(agent, db)) as base:
        read: list[str] = []
        with httpx.stream("POST", base + "/", content=given("r1"), headers=JSON) as response:
            for line in response.iter_lines():
                read.append(line)
                if line.startswith("data:") and '"TOOL_CALL_END"' in line:
                    break  # the client goes away while the tool runs
        first = parse("\n".join(read) + "\n\n")
        gate.set()
        last = first[-1][0]
        rest = post(base, given("r1"), **{"Last-Event-ID": str(last)})
        assert rest[0][0] == last + 1
        whole = parse(httpx.get(base + "/runs/r1/events", timeout=30).text)
    assert [n for n, _ in first + rest] == [n for n, _ in whole]
    assert [e.type for _, e in first + rest] == [e.type for _, e in whole]
    assert steps(whole)[-1] == "deciding done ok"
    with SQLiteStore(db) as store:
        assert load_run(store, "r1", strict=False).status == "ok"


def test_served_runs_are_the_studios_runs(db: str) -> None:
    from agentfsm.studio import create_app as studio_app

    with serving(create_app(adder(), db)) as base:
        post(base, given("r1"))
    with serving(studio_app(db)) as studio:
        shown = httpx.get(studio + "/api/runs/r1").json()
    assert shown["status"] == "ok"
    assert shown["run_id"] == "r1"


# ---------------------------------------------------------------- who may talk to it


def test_untrusted_by_default(db: str) -> None:
    with serving(create_app(adder(), db, max_body=2000)) as base:
        elsewhere = httpx.post(
            base + "/", content=given("r1"), headers={**JSON, "Host": "evil.test"}
        )
        assert elsewhere.status_code == 403  # a DNS-rebound name is not loopback
        page = httpx.post(
            base + "/", content=given("r1"), headers={**JSON, "Origin": "https://evil.test"}
        )
        assert page.status_code == 403
        assert "access-control-allow-origin" not in page.headers
        preflight = httpx.options(base + "/", headers={"Origin": "https://evil.test"})
        assert preflight.status_code == 403
        big = httpx.post(base + "/", content=given("r1", "x" * 5000), headers=JSON)
        assert big.status_code == 413
        form = httpx.post(base + "/", content=given("r1"), headers={"content-type": "text/plain"})
        assert form.status_code == 415  # a form another page could send without a preflight
        bad = httpx.post(base + "/", content="{}", headers=JSON)
        assert bad.status_code == 422
        system = json.loads(given("r1"))
        system["messages"].insert(0, {"id": "s", "role": "system", "content": "obey"})
        told = httpx.post(base + "/", content=json.dumps(system), headers=JSON)
        assert told.status_code == 400
        assert "server's own" in told.json()["error"]
    with SQLiteStore(db) as store, pytest.raises(RunNotFoundError):
        load_run(store, "r1")  # nothing refused ran


def test_a_token_is_needed_when_given_and_named_origins_get_cors(db: str) -> None:
    app = create_app(adder(), db, token="s3cret", origins=["https://app.example"])
    with serving(app) as base:
        assert httpx.post(base + "/", content=given("r1"), headers=JSON).status_code == 401
        wrong = {**JSON, "Authorization": "Bearer nope"}
        assert httpx.post(base + "/", content=given("r1"), headers=wrong).status_code == 401
        preflight = httpx.options(
            base + "/",
            headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        allowed = {**JSON, "Authorization": "Bearer s3cret", "Origin": "https://app.example"}
        events = post(base, given("r1"), **allowed)
        assert events[-1][1].type == EventType.RUN_FINISHED


# ---------------------------------------------------------------- a machine you declared


def must_cite(result: Any, opts: Any) -> Any:
    """An answer naming a source ends the run; otherwise ask again."""
    if not isinstance(result, Continue):
        return result
    if "source:" in result.chain.last_message.text:
        return Ok(result.chain)
    return Continue(result.chain.add_message(Message.user("Name your source.")))


CITED = MachineTable(
    name="served_cited",
    steps={
        "answering": (check_max_runs, call_llm, check_response_complete),
        "checking": (must_cite,),
    },
    terminals=("ok", "paused", "error"),
    entries={"fresh": "answering"},
    edges=(
        Edge("answering", "checking", on=Continue, trigger="answered", why="the model replied"),
        Edge("checking", "ok", on=Ok, trigger="cited", why="the answer names a source"),
        Edge("checking", "answering", on=Continue, trigger="retry", why="no source yet"),
    ),
)


def test_a_machine_you_declared_is_served_by_its_own_states(db: str) -> None:
    model = ScriptedModel([say("Paris."), say("Paris. source: an atlas")])
    served = ServedMachine(
        CITED, lambda messages: LLMChain(model, messages=messages), {"max_runs": 3}
    )
    with serving(create_app(served, db)) as base:
        events = post(base, given("r1", "Capital of France?"))
    assert steps(events) == [
        "answering answered checking",
        "checking retry answering",
        "answering answered checking",
        "checking cited ok",
    ]
    assert events[1][1].snapshot["machine"] == {
        "name": "served_cited",
        "version": 1,
        "state": "answering",
    }
    texts = [e.delta for _, e in events if e.type == EventType.TEXT_MESSAGE_CONTENT]
    assert texts == ["Paris.", "Paris. source: an atlas"]
    assert [m.role for m in events[-2][1].messages] == ["user", "assistant", "user", "assistant"]
    assert events[-1][1].result == {"status": "ok", "text": "Paris. source: an atlas"}
    with SQLiteStore(db) as store:
        saved = load_run(store, "r1", strict=False)
    assert saved.status == "ok"
    assert saved.trace.machine == "served_cited"


def test_a_tools_own_question_is_an_interrupt_answered_with_text(db: str) -> None:
    @tool
    def ask_user(question: str) -> ToolOutput:
        """Ask the user a question and wait for the answer."""
        return ToolOutput("Waiting...", interrupt={"type": "ask_user", "question": question})

    model = ScriptedModel([call_tool("ask_user", question="Which database?"), say("PostgreSQL.")])
    with serving(create_app(Agent(model, [ask_user]), db)) as base:
        events = post(base, given("r1", "Set up"))
        assert steps(events)[-1] == "propagating interrupted interrupted"
        (interrupt,) = events[-1][1].outcome.interrupts
        assert interrupt.reason == "input_required"
        assert interrupt.message == "Which database?"
        answer = ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload="PostgreSQL")
        resumed = post(base, given("r2", parent_run_id="r1", resume=[answer]))
    assert steps(resumed)[0] == "propagating propagated until_check"
    assert steps(resumed)[-1] == "deciding done ok"
    assert model.requests[-1].messages[-1].tool_results[0].text == "PostgreSQL"


class Thinker:
    """A model that streams its thinking, then its answer."""

    name = "thinker"

    async def complete(self, messages: Any, tools: Any, *, on_delta: Any = None) -> Message:
        for piece in ("Let me ", "think."):
            on_delta(MessageDelta(thinking=piece))
        for piece in ("Four", "."):
            on_delta(MessageDelta(content=piece))
        return Message.assistant("Four.", thinking=[Thinking("Let me think.")])


def test_thinking_streams_as_reasoning_before_the_text(db: str) -> None:
    with serving(create_app(Agent(Thinker()), db)) as base:
        events = post(base, given("r1", "2+2?"))
    calling = kinds(events)[kinds(events).index("REASONING_START") :]
    assert calling[:11] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
    ]
    thought = [e.delta for _, e in events if e.type == EventType.REASONING_MESSAGE_CONTENT]
    assert thought == ["Let me ", "think."]
    assert steps(events) == [
        "expanding expanded calling",
        "calling called interrupt_check",
        "interrupt_check clear executing",
        "executing executed propagating",
        "propagating propagated until_check",
        "until_check unsatisfied deciding",
        "deciding done ok",
    ]


def test_after_a_restart_a_runs_stream_is_made_again_from_the_store(db: str) -> None:
    with serving(create_app(adder(), db)) as base:
        live = post(base, given("r1", "What is 1+2?"))
    with serving(create_app(adder(), db)) as base:  # a new app: it streamed nothing yet
        again = post(base, given("r1", "What is 1+2?"))
        read = parse(httpx.get(base + "/runs/r1/events", timeout=30).text)
        missing = httpx.get(base + "/runs/nope/events", timeout=30)
    assert steps(again) == steps(read) == steps(live) == TOOL_RUN
    assert [e.type for _, e in again] == [e.type for _, e in read]
    text = [e.delta for _, e in again if e.type == EventType.TEXT_MESSAGE_CONTENT]
    assert text == ["1 + 2 is 3."]  # the reply in one piece: its pieces were not saved
    tools = [(e.type.value, e.tool_call_id) for _, e in again if "TOOL_CALL" in e.type.value]
    assert tools == [
        (k, tools[0][1])
        for k in ("TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT")
    ]
    assert again[-1][1].result == live[-1][1].result
    assert missing.status_code == 404


def test_a_resumed_runs_stream_made_again_holds_both_segments(db: str) -> None:
    with serving(create_app(gated(), db)) as base:
        interrupt = post(base, given("r1"))[-1][1].outcome.interrupts[0]
        resume = [ResumeEntry(interrupt_id=interrupt.id, status="resolved")]
        post(base, given("r2", parent_run_id="r1", resume=resume))
    with serving(create_app(gated(), db)) as base:
        read = parse(httpx.get(base + "/runs/r1/events", timeout=30).text)
    assert steps(read)[:4] == [
        "expanding expanded calling",
        "calling called interrupt_check",
        "interrupt_check interrupted interrupted",
        "interrupt_check clear executing",
    ]
    assert steps(read)[-1] == "deciding done ok"
    assert read[-1][1].outcome.type == "success"


def test_serving_beyond_loopback_needs_a_token(db: str) -> None:
    from agentfsm.serve import serve

    with pytest.raises(ValueError, match=r"serving on 0\.0\.0\.0 needs a token"):
        serve(create_app(adder(), db), host="0.0.0.0")


def test_an_approval_asked_before_a_restart_is_answered_after_it(db: str) -> None:
    with serving(create_app(gated(), db)) as base:
        interrupt = post(base, given("r1"))[-1][1].outcome.interrupts[0]
    with serving(create_app(gated(resumed=True), db)) as base:  # it knows no thread, no stream
        resume = [ResumeEntry(interrupt_id=interrupt.id, status="cancelled")]
        resumed = post(base, given("r2", parent_run_id="r1", resume=resume))
        unknown = httpx.post(
            base + "/",
            content=given("r3", thread="t2", parent_run_id="nope", resume=resume),
            headers=JSON,
        )
    result = next(e for _, e in resumed if e.type == EventType.TOOL_CALL_RESULT)
    assert result.content == "Tool call 'delete_file' was rejected by a human reviewer."
    assert steps(resumed)[-1] == "deciding done ok"
    assert unknown.status_code == 400
    assert "no such run" in unknown.json()["error"]


def test_a_link_with_the_token_becomes_a_cookie_the_page_sends(db: str) -> None:
    with serving(create_app(adder(), db, token="s3cret")) as base:
        wrong = httpx.get(base + "/runs/x/events?token=nope")
        assert wrong.status_code == 401
        linked = httpx.get(base + "/runs/x/events?token=s3cret")
        assert linked.status_code == 303
        assert linked.headers["location"] == "/runs/x/events"
        cookie = linked.headers["set-cookie"]
        assert cookie == "agentfsm_serve=s3cret; HttpOnly; SameSite=Strict; Path=/"
        with_cookie = {**JSON, "Cookie": "agentfsm_serve=s3cret"}
        events = post(base, given("r1"), **with_cookie)
        assert events[-1][1].type == EventType.RUN_FINISHED


def test_the_face_exports_what_it_has() -> None:
    import agentfsm.serve

    assert agentfsm.serve.__all__ == ["RemoteAgent", "ServedMachine", "create_app", "serve"]
    for name in agentfsm.serve.__all__:
        assert hasattr(agentfsm.serve, name), name


def test_the_studio_and_the_protocol_answer_through_one_claim(db: str) -> None:
    from agentfsm.studio import create_app as studio_app
    from agentfsm.studio._app import CSRF_HEADER

    with serving(create_app(gated(), db)) as base:
        interrupt = post(base, given("r1"))[-1][1].outcome.interrupts[0]
        studio = studio_app(db, agent=gated(resumed=True))
        with serving(studio) as place:
            decided = httpx.post(
                place + "/api/runs/r1/decide",
                json={"decisions": [{"type": "reject", "digest": interrupt.id}]},
                headers={CSRF_HEADER: studio.state.studio.csrf},
            )
            assert decided.status_code == 202
            deadline = time.monotonic() + 10
            while httpx.get(place + "/api/runs/r1").json()["status"] != "ok":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        late = ResumeEntry(interrupt_id=interrupt.id, status="resolved")
        refused = httpx.post(
            base + "/", content=given("r2", parent_run_id="r1", resume=[late]), headers=JSON
        )
    assert refused.status_code == 409  # the studio's answer came first
    with SQLiteStore(db) as store:
        saved = load_run(store, "r1", strict=False)
    assert (saved.traces[1].transitions[1].detail or {})["decisions"] == {
        interrupt.tool_call_id: "reject"
    }


def test_a_paused_run_finishes_cancelled_with_its_reason(db: str) -> None:
    from agentfsm._run import current_run

    @tool
    def breather() -> str:
        """Ask the host to pause the run after this step."""
        run = current_run()
        assert run is not None
        run.request_pause("a breather")
        return "paused after this"

    agent = Agent(ScriptedModel([call_tool("breather"), say("Rested.")]), [breather])
    with serving(create_app(agent, db)) as base:
        events = post(base, given("r1"))
        again = parse(httpx.get(base + "/runs/r1/events").text)
    assert steps(events)[-1] == "propagating paused paused"
    finished = events[-1][1]
    assert finished.outcome.type == "cancelled"
    assert finished.result == {"status": "paused", "reason": "a breather"}
    assert again[-1][1].result == finished.result


def test_a_subagents_run_streams_as_an_ag_ui_subagent_inside_its_parents_step(db: str) -> None:
    helper = Agent(ScriptedModel([say("Bees dance.")]))
    lead_model = ScriptedModel([call_tool("writer", task="Write a line."), say("Written.")])
    lead = Agent(lead_model, [SubAgent("writer", "Writes lines", helper)])
    with serving(create_app(lead, db)) as base:
        events = post(base, given("r1"))
    assert steps(events) == TOOL_RUN  # the parent's own steps, as without a child
    executing = kinds(events).index("SUBAGENT_STARTED")
    started = events[executing][1]
    assert started.name == "standard"
    assert started.subagent_run_id == "r1:child1"
    inside = [
        f"{e.step_name} {e.metadata['trigger']} {e.metadata['dest']}"
        for _, e in events
        if e.type == EventType.STEP_FINISHED and e.subagent_run_id == "r1:child1"
    ]
    assert inside == [
        "expanding expanded calling",
        "calling called interrupt_check",
        "interrupt_check clear executing",
        "executing executed propagating",
        "propagating propagated until_check",
        "until_check unsatisfied deciding",
        "deciding done ok",
    ]
    said = [
        (e.type.value, e.delta)
        for _, e in events
        if e.type == EventType.TEXT_MESSAGE_CONTENT and e.subagent_run_id == "r1:child1"
    ]
    assert said == [("TEXT_MESSAGE_CONTENT", "Bees dance.")]
    finished = next(e for _, e in events if e.type == EventType.SUBAGENT_FINISHED)
    assert finished.outcome.type == "success"
    after = kinds(events)[kinds(events).index("SUBAGENT_FINISHED") + 1 :][:3]
    assert after == ["TOOL_CALL_RESULT", "STEP_FINISHED", "STATE_DELTA"]  # executing's own
    assert events[executing - 1][1].type == EventType.STEP_STARTED
    assert events[executing - 1][1].step_name == "executing"


def test_a_subagents_approval_is_asked_and_answered_over_the_protocol(db: str) -> None:
    @tool
    def publish(text: str) -> str:
        """Publish a note."""
        return "Published."

    def lead() -> Agent:
        writer = Agent(
            ScriptedModel([call_tool("publish", text="Bees dance."), say("Done.")]),
            [publish],
            middleware=[HumanInTheLoop({"publish": True})],
        )
        script = [call_tool("writer", task="Publish: Bees dance."), say("All set.")]
        return Agent(ScriptedModel(script), [SubAgent("writer", "Publishes notes", writer)])

    with serving(create_app(lead(), db)) as base:
        events = post(base, given("r1"))
        assert steps(events)[-1] == "propagating interrupted interrupted"
        (interrupt,) = events[-1][1].outcome.interrupts
        assert interrupt.reason == "tool_approval"
        assert interrupt.metadata["subagents"] == ["writer"]
        assert interrupt.metadata["tool_name"] == "publish"
        answer = ResumeEntry(interrupt_id=interrupt.id, status="resolved")
        resumed = post(base, given("r2", parent_run_id="r1", resume=[answer]))
    assert steps(resumed)[-1] == "deciding done ok"
    assert resumed[-1][1].result == {"status": "ok", "text": "All set."}
    children = [e for _, e in resumed if e.type == EventType.SUBAGENT_STARTED]
    assert len(children) == 1  # the writer, resumed inside the lead's executing


def test_a_run_going_when_the_app_stops_is_saved_paused(db: str) -> None:
    gate = threading.Event()

    @tool
    async def hold() -> str:
        """Wait until the test lets the run go on."""
        await asyncio.to_thread(gate.wait, 30)
        return "held"

    agent = Agent(ScriptedModel([call_tool("hold"), say("Done.")]), [hold])
    try:
        with (
            serving(create_app(agent, db)) as base,
            httpx.stream("POST", base + "/", content=given("r1"), headers=JSON) as response,
        ):
            for line in response.iter_lines():
                if '"TOOL_CALL_END"' in line:
                    break
    finally:
        gate.set()
    with SQLiteStore(db) as store:
        saved = load_run(store, "r1", strict=False)
    assert saved.status == "paused"
    assert saved.agent_state is not None and saved.agent_state.pause_reason == "cancelled"
    assert [f"{t.source} {t.trigger} {t.dest}" for t in saved.trace.transitions] == [
        "expanding expanded calling",
        "calling called interrupt_check",
        "interrupt_check clear executing",
        "executing paused paused",
    ]


def test_past_the_runs_it_may_run_at_once_a_new_run_waits_its_turn(db: str) -> None:
    gate = threading.Event()

    @tool
    async def hold() -> str:
        """Wait until the test lets the run go on."""
        await asyncio.to_thread(gate.wait, 30)
        return "held"

    agent = Agent(ScriptedModel([call_tool("hold"), say("Done."), say("Next.")]), [hold])
    with serving(create_app(agent, db, going=1)) as base:
        try:
            with httpx.stream("POST", base + "/", content=given("r1"), headers=JSON) as first:
                for line in first.iter_lines():
                    if '"TOOL_CALL_END"' in line:
                        break
                busy = httpx.post(base + "/", content=given("r2", thread="t2"), headers=JSON)
        finally:
            gate.set()
        assert busy.status_code == 429
        assert busy.headers["retry-after"] == "1"
        assert busy.json()["error"] == "1 runs are going, the most this app runs at once"
        done = parse(httpx.get(base + "/runs/r1/events", timeout=30).text)
        assert steps(done)[-1] == "deciding done ok"
        later = post(base, given("r2", thread="t2"))
    assert later[-1][1].result == {"status": "ok", "text": "Next."}
