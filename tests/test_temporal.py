"""agentfsm.temporal on its own: runs as workflows whose model and tool calls are
activities (named, in agentfsm's own payloads), status and results read from the
server, decisions refused before they reach a history, subagents as child workflows,
spans through Temporal's tracing interceptor, and machines kept apart by version."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="agentfsm.temporal needs the temporal extra")

from agentfsm import (
    Agent,
    AgentState,
    Approval,
    DecisionConflictError,
    HumanInTheLoop,
    ResumeError,
    RunExistsError,
    RunNotFoundError,
    SubAgent,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.temporal import Engine
from agentfsm.temporal._convert import ENCODING, data_converter
from agentfsm.temporal._engine import task_queue
from tests import _durable_agent

ROOT = Path(__file__).resolve().parent.parent
LOOP = "expanding calling interrupt_check executing propagating until_check deciding"
ANSWERED = "interrupt_check executing propagating until_check deciding"


def _recorder(*, gated: bool = False) -> Agent:
    middleware = [HumanInTheLoop({"record": True})] if gated else []
    model = ScriptedModel(_durable_agent.script, model_name="scripted")
    return Agent(model, [_durable_agent.record], middleware=middleware)


@pytest.fixture
def engine(temporal_server: str) -> Iterator[Engine]:
    worker = Engine(temporal_server, heartbeat=2, sticky_timeout=2, drain_timeout=5)
    try:
        yield worker
    finally:
        worker.close()


def _name(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns() % 10**9}"


def test_a_run_is_a_workflow_and_each_call_an_activity_named_for_its_edge(
    engine: Engine,
) -> None:
    name = _name("rec")
    engine.register(name, _recorder())
    engine.launch()
    run_id = engine.submit(AgentState.of("walk"), agent=name, run_id=_name("walk"))
    result = engine.result(run_id, timeout=60)
    assert (result.status, result.ends) == ("ok", ("ok",))
    assert [t.path for t in result.traces] == [f"{LOOP} {LOOP} {LOOP} {LOOP} ok"]

    async def scheduled() -> list[Any]:
        history = await engine.client.get_workflow_handle(run_id).fetch_history()
        return [
            e.activity_task_scheduled_event_attributes
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]

    events = engine.run(scheduled())
    assert [e.activity_id for e in events] == [
        "model:scripted@expanded>calling#1",
        "tool:record@clear>executing#2",
        "model:scripted@expanded>calling#3",
        "tool:record@clear>executing#4",
        "model:scripted@expanded>calling#5",
        "tool:record@clear>executing#6",
        "model:scripted@expanded>calling#7",
    ]
    assert [e.activity_type.name for e in events[:2]] == ["agentfsm.model", "agentfsm.tool"]
    # the calls cross Temporal as agentfsm documents, not as Temporal's own JSON
    [payload] = events[1].input.payloads
    assert payload.metadata["encoding"].decode() == ENCODING
    document = json.loads(payload.data)
    assert (document["format"], document["value"]["call"]["name"]) == ("agentfsm/1", "record")
    assert engine.status(run_id).status == "ok"
    assert engine.status(run_id).queue == task_queue(name)
    _replays(engine, run_id)


def test_the_data_converter_writes_agentfsm_documents_and_reads_them_back() -> None:
    from agentfsm import ChainError, Message
    from agentfsm.temporal._activities import ModelReply

    reply = ModelReply(message=Message.assistant("hi"))
    failed = ModelReply(error=ChainError("model_error", "down", retryable=False))
    converter = data_converter.payload_converter
    payloads = converter.to_payloads([reply, failed, {"plain": 1}])
    assert [p.metadata["encoding"].decode() for p in payloads] == [
        ENCODING,
        ENCODING,
        "json/plain",
    ]
    back = converter.from_payloads(payloads, [ModelReply, ModelReply, dict])
    assert back[0] == reply
    assert (back[1].error.type, back[1].error.message) == ("model_error", "down")
    assert back[2] == {"plain": 1}


def test_a_run_is_queued_until_a_worker_of_its_agent_serves_it(engine: Engine) -> None:
    name = _name("late")
    run_id = engine.submit(AgentState.of("late"), agent=name, run_id=_name("late"))
    assert engine.status(run_id).status == "queued"
    assert engine.result(run_id, wait=False) is None
    with pytest.raises(RunExistsError, match="exists already"):
        engine.submit(AgentState.of("again"), agent=name, run_id=run_id)
    with pytest.raises(RunNotFoundError):
        engine.status("no-such-run")
    engine.register(name, _recorder())
    engine.launch()
    assert engine.result(run_id, timeout=60).status == "ok"
    assert run_id in [r.run_id for r in engine.runs()]


def test_decisions_that_do_not_answer_are_refused_and_a_finished_run_takes_none(
    engine: Engine,
) -> None:
    name = _name("gate")
    engine.register(name, _recorder(gated=True))
    engine.launch()
    run_id = engine.submit(AgentState.of("gate"), agent=name, run_id=_name("gate"))
    deadline = time.monotonic() + 30
    while (request := engine.waiting(run_id)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert engine.status(run_id).status == "waiting"
    with pytest.raises(ValueError, match=r"Decision count \(0\) does not match"):
        engine.decide(run_id, [])
    for turn in range(3):
        engine.decide(run_id, Approval.of(request).approve_all())
        while turn < 2 and (
            (request := engine.waiting(run_id)) is None
            or request["action_requests"][0]["tool_call_id"] != f"gate-{turn + 1}"
        ):
            assert time.monotonic() < deadline + 30
            time.sleep(0.05)
    result = engine.result(run_id, timeout=60)
    assert [t.path for t in result.traces] == [
        "expanding calling interrupt_check interrupted",
        f"{ANSWERED} expanding calling interrupt_check interrupted",
        f"{ANSWERED} expanding calling interrupt_check interrupted",
        f"{ANSWERED} {LOOP} ok",
    ]
    with pytest.raises(ResumeError, match="not waiting for decisions"):
        engine.decide(run_id, [{"type": "approve"}], unbound=True)


@tool
def publish(text: str) -> str:
    """Publish a text."""
    return f"published {text!r}"


def test_decisions_for_a_wait_answered_otherwise_conflict_even_once_the_run_asks_again(
    engine: Engine,
) -> None:
    name = _name("stale")
    engine.register(name, _recorder(gated=True))
    engine.launch()
    run_id = engine.submit(AgentState.of("stale"), agent=name, run_id=_name("stale"))
    deadline = time.monotonic() + 30
    while (first := engine.waiting(run_id)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    [shown] = first["action_requests"]
    rejected = [{"type": "reject", "digest": _digest(shown)}]
    engine.decide(run_id, rejected)
    while (second := engine.waiting(run_id)) is None or second == first:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert second["action_requests"][0]["tool_call_id"] == "stale-1"
    with pytest.raises(DecisionConflictError) as refused:  # the first wait's, answered
        engine.decide(run_id, Approval.of(first).approve_all())
    assert refused.value.decisions == [
        {"type": "reject", "tool_call_id": "stale-0", "digest": _digest(shown)}
    ]
    engine.decide(run_id, rejected)  # the first wait's own decisions again: a repeat


def test_a_wait_that_timed_out_is_resumed_by_a_later_decide_in_a_continuation(
    engine: Engine,
) -> None:
    gated = Agent(
        ScriptedModel([call_tool("publish", text="late", call_id="late-1"), say("Done.")]),
        [publish],
        middleware=[HumanInTheLoop({"publish": True})],
    )
    name = _name("timeout")
    engine.register(name, gated)
    engine.launch()
    run_id = engine.submit(
        AgentState.of("late"), agent=name, run_id=_name("late"), decision_timeout=0.5
    )
    ended = engine.result(run_id, timeout=60)
    assert ended.ends == ("interrupted",)
    assert [t.path for t in ended.traces] == ["expanding calling interrupt_check interrupted"]
    assert engine.status(run_id).status == "interrupted"
    assert engine.waiting(run_id) is None  # it waits no more: decide resumes it
    with pytest.raises(ValueError, match="does not match"):
        engine.decide(run_id, [])
    approve = Approval.of(ended.state.interrupt_data).approve_all()
    engine.decide(run_id, approve)
    engine.decide(run_id, approve)  # the same again: a repeat, nothing more
    result = engine.result(run_id, timeout=60)
    assert result.ends == ("interrupted", "ok")
    assert [t.path for t in result.traces] == [
        "expanding calling interrupt_check interrupted",
        f"{ANSWERED} {LOOP} ok",
    ]
    assert result.state.messages[-2].tool_results[0].text == "published 'late'"
    assert engine.status(run_id).status == "ok"
    assert [r.run_id for r in engine.runs() if r.run_id.startswith(run_id)] == [run_id]
    [shown] = ended.state.interrupt_data["action_requests"]
    with pytest.raises(ResumeError):  # other decisions, after the run took some
        engine.decide(run_id, [{"type": "reject", "digest": _digest(shown)}])
    with pytest.raises(ValueError, match="names a resumed run's continuation"):
        engine.submit(AgentState.of("x"), agent=name, run_id=f"{run_id}/resume-1")


def _digest(shown: Any) -> str:
    from agentfsm._middleware import request_digest

    return str(request_digest(shown))


def test_a_subagent_runs_as_a_child_workflow_of_its_parents_run(engine: Engine) -> None:
    writer = Agent(
        ScriptedModel([call_tool("publish", text="Bees dance."), say("Published.")]), [publish]
    )
    lead = Agent(
        ScriptedModel([call_tool("writer", task="Publish: Bees dance."), say("Out.")]),
        [SubAgent("writer", "Publishes texts", writer)],
    )
    name = _name("lead")
    engine.register(name, lead)
    engine.launch()
    run_id = engine.submit(AgentState.of("Bees"), agent=name, run_id=_name("bees"))
    result = engine.result(run_id, timeout=60)
    assert result.status == "ok"
    assert result.state.messages[-2].tool_results[0].text == "Published."
    [trace] = result.traces
    assert trace.path == f"{LOOP} {LOOP} ok"

    async def children() -> list[str]:
        history = await engine.client.get_workflow_handle(run_id).fetch_history()
        return [
            e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for e in history.events
            if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        ]

    assert engine.run(children()) == [f"{run_id}/tool:writer@clear>executing#2"]
    child = engine.run(
        engine.client.get_workflow_handle(f"{run_id}/tool:writer@clear>executing#2").result()
    )
    assert [t["end"] for t in child["traces"]] == ["ok"]


def test_a_subagent_asking_for_approval_waits_in_its_child_workflow_for_decide(
    engine: Engine,
) -> None:
    published: list[str] = []

    @tool
    def publish_once(text: str) -> str:
        """Publish a text."""
        published.append(text)
        return f"published {text!r}"

    writer = Agent(
        ScriptedModel([call_tool("publish_once", text="Bees dance."), say("Published.")]),
        [publish_once],
        middleware=[HumanInTheLoop({"publish_once": True})],
    )
    lead = Agent(
        ScriptedModel([call_tool("writer", task="Publish: Bees dance."), say("Out.")]),
        [SubAgent("writer", "Publishes texts", writer)],
    )
    name = _name("lead")
    engine.register(name, lead)
    engine.launch()
    run_id = engine.submit(AgentState.of("Bees"), agent=name, run_id=_name("bees"))
    deadline = time.monotonic() + 30
    while (request := engine.waiting(run_id)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert request["child_path"] == ["writer"]
    assert engine.status(run_id).status == "waiting"
    [shown] = request["action_requests"]
    assert (shown["tool_name"], published) == ("publish_once", [])
    decisions = [{"type": "approve", "digest": _digest(shown)}]
    engine.decide(run_id, decisions)
    engine.decide(run_id, decisions)  # the same again: a repeat
    result = engine.result(run_id, timeout=60)
    assert result.state.messages[-2].tool_results[0].text == "Published."
    assert published == ["Bees dance."]
    assert [t.path for t in result.traces] == [f"{LOOP} {LOOP} ok"]
    child = engine.run(
        engine.client.get_workflow_handle(f"{run_id}/tool:writer@clear>executing#2").result()
    )
    assert [t["end"] for t in child["traces"]] == ["interrupted", "ok"]
    engine.decide(run_id, decisions)  # after the end too
    _replays(engine, run_id, f"{run_id}/tool:writer@clear>executing#2")


def _replays(engine: Engine, *run_ids: str) -> None:
    """Each run's history replays through the workflow code in Temporal's Replayer (its
    sandbox on): the workflow makes the same calls from the recorded results, with no
    nondeterminism, decisions, signals and child workflows included."""
    from temporalio.worker import Replayer

    from agentfsm.temporal._engine import WORKFLOWS, workflow_runner

    replayer = Replayer(
        workflows=list(WORKFLOWS), data_converter=data_converter, workflow_runner=workflow_runner()
    )

    async def replay() -> None:
        for run_id in run_ids:
            history = await engine.client.get_workflow_handle(run_id).fetch_history()
            await replayer.replay_workflow(history)

    engine.run(replay())


def test_spans_come_through_temporals_tracing_interceptor(temporal_server: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    engine = Engine(temporal_server, otel=True, drain_timeout=1)
    try:
        name = _name("otel")
        engine.register(name, _recorder())
        engine.launch()
        run_id = engine.submit(AgentState.of("otel"), agent=name, run_id=_name("otel"))
        assert engine.result(run_id, timeout=60).status == "ok"
    finally:
        engine.close()
    names = [s.name for s in exporter.get_finished_spans()]
    assert "StartWorkflow:agentfsm.run" in names
    assert names.count("RunActivity:agentfsm.model") == 4
    assert names.count("RunActivity:agentfsm.tool") == 3


def _worker(address: str, spec: str, name: str, log: Path, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "AGENTFSM_TEST_LOG": str(log),
        "AGENTFSM_TEST_MODEL_DELAY": "0.05",
        "AGENTFSM_TEST_TOOL_DELAY": "0.3",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "worker", "--engine", "temporal", "--address",
         address, "--heartbeat", "1", spec, "--name", name, *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "running" in line, line + (proc.stderr.read() if proc.stderr else "")
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)


@pytest.mark.parametrize("policy", ["pinned", "compatible"])
def test_a_worker_of_another_machine_replays_a_run_only_under_a_compatible_policy(
    temporal_server: str, tmp_path: Path, policy: str
) -> None:
    log = tmp_path / "calls.log"
    name = _name("versioned")
    prompt = _name("v")
    v1 = _worker(temporal_server, "tests._contract_agents:recorder", name, log)
    procs = [v1]
    client = Engine(temporal_server)
    try:
        run_id = client.submit(AgentState.of(prompt), agent=name)
        deadline = time.monotonic() + 30
        while f"start {prompt}-0" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        v1.send_signal(signal.SIGKILL)
        v1.wait(30)
        procs.append(
            _worker(
                temporal_server, "tests._contract_agents:tallier", name, log, "--policy", policy
            )
        )
        if policy == "compatible":
            result = client.result(run_id, timeout=60)
            # replayed on the tallying machine, which makes the same calls: every turn,
            # the replayed ones too, passes its new state
            tally = LOOP.replace("until_check", "until_check tallying")
            assert [t.path for t in result.traces] == [f"{tally} {tally} {tally} {tally} ok"]
            return
        time.sleep(6)  # the v2 worker is handed the run and refuses to replay it
        assert client.status(run_id).status == "running"
        assert f"start {prompt}-1" not in log.read_text()
        procs.append(_worker(temporal_server, "tests._contract_agents:recorder", name, log))
        result = client.result(run_id, timeout=60)
        assert result.status == "ok"
        assert "tallying" not in result.traces[0].states
        assert [t.path for t in result.traces] == [f"{LOOP} {LOOP} {LOOP} {LOOP} ok"]
    finally:
        client.close()
        for proc in procs:
            _stop(proc)


def test_the_engine_is_one_face_with_the_dbos_engines() -> None:
    import agentfsm.temporal as face

    durable = pytest.importorskip("agentfsm.durable")
    assert "Engine" in face.__all__ and "Engine" in durable.__all__
    for method in ("register", "launch", "drain", "close", "submit", "status", "result",
                   "waiting", "decide", "runs"):  # fmt: skip
        assert callable(getattr(face.Engine, method)), method
    assert asyncio.iscoroutinefunction(face.Engine.submit) is False


def test_the_worker_logs_each_runs_start_and_end_and_drains_on_sigterm(
    temporal_server: str, tmp_path: Path
) -> None:
    name = _name("logged")
    proc = _worker(
        temporal_server, "tests._contract_agents:recorder", name, tmp_path / "calls.log",
        "--log-format", "json",
    )  # fmt: skip
    client = Engine(temporal_server)
    try:
        run_id = client.submit(AgentState.of(_name("log")), agent=name, run_id=_name("log"))
        assert client.result(run_id, timeout=60).status == "ok"
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "drained, 0 run(s)" in out
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [(e["event"], e["run"], e.get("status")) for e in lines] == [
        ("run start", run_id, None),
        ("run end", run_id, "ok"),
    ]
    assert lines[1]["seconds"] >= 0
