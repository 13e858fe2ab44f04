"""The durable engine on DBOS, on SQLite and on a real PostgreSQL server.

Workers are real processes (``agentfsm worker``), drained with SIGTERM and
killed with SIGKILL at random points; another worker finishes their runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable engine needs the dbos extra")

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    Approval,
    HumanInTheLoop,
    ResumeError,
    RunExistsError,
    RunNotFoundError,
    ToolContext,
    ToolOutput,
    tool,
)
from agentfsm.durable import Engine, RunResult
from agentfsm.durable._workflow import WAITING_EVENT, WORKER
from agentfsm.providers import ScriptedModel, call_tool
from tests import _durable_agent

ROOT = Path(__file__).resolve().parent.parent
AGENT = "tests._durable_agent:agent"
LOOP = "expanding calling interrupt_check executing propagating until_check deciding"


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    server: str = request.getfixturevalue("pg_server")
    return server.rsplit("/", 1)[0] + f"/t_{uuid.uuid4().hex[:10]}"


def _record_agent(*, gated: bool = False) -> Agent:
    middleware = [HumanInTheLoop({"record": True})] if gated else []
    model = ScriptedModel(_durable_agent.script, model_name="scripted")
    return Agent(model, [_durable_agent.record], middleware=middleware)


@tool
def ask(question: str) -> ToolOutput:
    """Ask the user (the run stops until they answer)."""
    return ToolOutput("asked", interrupt={"type": "ask_user", "question": question})


def _asking_agent() -> Agent:
    return Agent(ScriptedModel([call_tool("ask", question="why?")]), [ask])


def _assert_paths(result: RunResult) -> None:
    for trace in result.traces:
        assert STANDARD.is_path(trace.states), trace.path


# ---------------------------------------------------------------- one process


@contextlib.contextmanager
def launched(db: str, agents: Mapping[str, Agent]) -> Iterator[Engine]:
    """An engine that is this process's worker for ``agents``, by name."""
    engine = Engine(db, polling_interval=0.05)
    for name, agent in agents.items():
        engine.register(name, agent)
    engine.launch(executor_id="in-process")
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def engine(db: str) -> Iterator[Engine]:
    agents = {
        "plain": _record_agent(),
        "gated": _record_agent(gated=True),
        "asking": _asking_agent(),
    }
    with launched(db, agents) as engine:
        yield engine


def test_a_run_is_a_workflow_its_calls_are_steps(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("job"), agent="plain", run_id="job-1")
    result = engine.result(run_id, timeout=30)
    assert result.status == "ok"
    assert [t.path for t in result.traces] == [f"{LOOP} {LOOP} {LOOP} {LOOP} ok"]
    assert [m.role for m in result.state.messages] == [
        "user",
        *["assistant", "tool"] * 3,
        "assistant",
    ]
    steps = [s["function_name"] for s in engine.client.list_workflow_steps(run_id)]
    # each step is named by what it calls, the edge into the state that calls, and its index
    turn = ["model:scripted@expanded>calling", "tool:record@clear>executing"]
    assert steps == [f"{n}#{i}" for i, n in enumerate(turn * 3 + turn[:1], 1)]
    # step outputs are agentfsm documents in JSON, not pickles
    first = engine.client.list_workflow_steps(run_id)[0]["output"]
    assert first["message"]["role"] == "assistant" and first["draining"] is False
    [record] = engine.runs()
    assert (record.run_id, record.status, record.agent) == ("job-1", "ok", "plain")


def test_an_existing_run_id_and_bad_options_are_refused(engine: Engine) -> None:
    engine.submit(AgentState.of("once"), agent="plain", run_id="same")
    with pytest.raises(RunExistsError, match="'same' exists already"):
        engine.submit(AgentState.of("twice"), agent="plain", run_id="same")
    with pytest.raises(ValueError, match="not found"):
        engine.submit(AgentState.of("x"), agent="plain", until_tool="nope")
    assert engine.result("same", timeout=30).state.messages[0].text == "once"


def test_a_run_of_an_agent_no_worker_serves_stays_queued(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("x"), agent="ghost")
    engine.result(engine.submit(AgentState.of("y"), agent="plain"), timeout=30)
    record = engine.status(run_id)
    assert (record.status, record.queue, record.agent) == ("queued", "agentfsm:ghost", "ghost")
    assert engine.result(run_id, wait=False) is None
    assert {r.run_id: r.status for r in engine.runs()}[run_id] == "queued"


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_on_one_shared_queue_an_unknown_agent_ends_the_run_in_a_clear_error(db: str) -> None:
    with Engine(db, queue="shared", polling_interval=0.05) as engine:
        engine.register("plain", _record_agent())
        engine.launch(executor_id="shared")
        result = engine.result(engine.submit(AgentState.of("x"), agent="ghost"), timeout=30)
    assert result.status == "error" and result.state.error is not None
    assert result.state.error.type == "unknown_agent"
    assert "ghost" in result.state.error.message


def test_continuation_ids_are_reserved(engine: Engine) -> None:
    with pytest.raises(ValueError, match=r"'bc/resume-1' ends in /resume-N"):
        engine.submit(AgentState.of("x"), agent="plain", run_id="bc/resume-1")
    engine.submit(AgentState.of("x"), agent="plain", run_id="bc/resume-me")  # not a number


def _wait_for_decisions(engine: Engine, run_id: str, call_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        interrupt = engine.waiting(run_id)
        if interrupt is not None and interrupt["hitl_tool_call_ids"] == [call_id]:
            return dict(interrupt)
        time.sleep(0.02)
    raise AssertionError(f"{run_id} never waited for decisions")


def _own_steps(engine: Engine, workflow_id: str) -> list[str]:
    steps = engine.client.list_workflow_steps(workflow_id)
    return [s["function_name"] for s in steps if not s["function_name"].startswith("DBOS.")]


def test_a_decision_from_anywhere_enters_at_the_state_that_asked_and_runs_at_executing(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``agent.resume`` takes an approval, so does ``decide``, from any process (here a
    client-only engine): the resumed segment enters
    at ``interrupt_check``, whose gate applies the decisions, and the approved call is the
    run's own recorded tool step at ``executing``, not a call made before the segment."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    run_id = engine.submit(AgentState.of("gate"), agent="gated", run_id="gate")
    interrupt = _wait_for_decisions(engine, run_id, "gate-0")
    assert [r["tool_name"] for r in interrupt["action_requests"]] == ["record"]
    [asked] = Approval.of(interrupt).requests
    assert not log.exists()  # nothing runs before the decision
    with pytest.raises(ValueError, match=r"Decision count \(0\) does not match"):
        engine.decide(run_id, [])
    other = Engine(engine.url)  # another process's view: a client only
    try:
        other.decide(run_id, [asked.approve().to_data()])
        [asked] = Approval.of(_wait_for_decisions(engine, run_id, "gate-1")).requests
        other.decide(run_id, [asked.reject().to_data()])
        [asked] = Approval.of(_wait_for_decisions(engine, run_id, "gate-2")).requests
        other.decide(run_id, [asked.edit({"note": "edited"}).to_data()])
        result = other.result(run_id, timeout=30)
    finally:
        other.close()
    assert result.status == "ok"
    with pytest.raises(ResumeError, match="not waiting for decisions"):
        engine.decide(run_id, [{"type": "approve"}], unbound=True)
    answered = "interrupt_check executing propagating until_check deciding"
    assert [t.path for t in result.traces] == [
        "expanding calling interrupt_check interrupted",
        f"{answered} expanding calling interrupt_check interrupted",
        f"{answered} expanding calling interrupt_check interrupted",
        f"{answered} {LOOP} ok",
    ]
    _assert_paths(result)
    # the gate applied each decision; executing ran the approved and the edited call, and
    # gave the rejected one its rejection
    gates = [t.transitions[0] for t in result.traces[1:]]
    assert [(g.source, g.trigger, g.dest) for g in gates] == [
        ("interrupt_check", "clear", "executing")
    ] * 3
    executed = [t.transitions[1] for t in result.traces[1:]]
    assert [(e.source, e.trigger) for e in executed] == [("executing", "executed")] * 3
    ran = {"tools": ["record"], "errors": 0}
    refused = {"tools": [], "errors": 0, "rejected": ["record"]}  # it did not run
    assert [dict(e.detail or {}) for e in executed] == [
        {**(refused if kind == "reject" else ran), "decisions": {f"gate-{i}": kind}}
        for i, kind in enumerate(("approve", "reject", "edit"))
    ]
    texts = [m.tool_results[0].text for m in result.state.messages if m.role == "tool"]
    assert texts[0].startswith("recorded n0 ")
    assert texts[1] == "Tool call 'record' was rejected by a human reviewer."
    assert texts[2].startswith("recorded edited ")
    # the approved calls are the run's tool steps at executing, named by its edge
    model, record = "model:scripted@expanded>calling", "tool:record@clear>executing"
    assert _own_steps(engine, run_id) == [
        f"{model}#1",
        f"{record}#2",
        f"{model}#3",
        f"{model}#4",
        f"{record}#5",
        f"{model}#6",
    ]
    starts = [line for line in log.read_text().splitlines() if line.startswith("start ")]
    assert starts == ["start gate-0", "start gate-2"]


def test_the_same_decisions_sent_again_are_taken_once_and_refused_never(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried ``decide`` (its caller never learnt whether the first got through) is
    the first one's result again: nothing more is sent, and nothing is raised, whether
    the run still waits, went on, waits on its next request, or ended."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    run_id = engine.submit(AgentState.of("again"), agent="gated", run_id="again")
    [asked] = Approval.of(_wait_for_decisions(engine, run_id, "again-0")).requests
    first = [asked.approve().to_data()]
    engine.decide(run_id, first)
    engine.decide(run_id, first)  # still waiting, or running on with them: taken once
    [asked] = Approval.of(_wait_for_decisions(engine, run_id, "again-1")).requests
    engine.decide(run_id, first)  # the first wait's decisions, at the next wait
    segment = engine.client.get_event(run_id, WAITING_EVENT, timeout_seconds=0)["segment"]
    assert engine.ledger.claimed(run_id, segment) is None  # nothing claimed for it, or sent
    assert engine.waiting(run_id)["hitl_tool_call_ids"] == ["again-1"]
    second = [asked.reject().to_data()]
    engine.decide(run_id, second)
    engine.decide(run_id, second)
    [asked] = Approval.of(_wait_for_decisions(engine, run_id, "again-2")).requests
    third = [{"type": "approve"}]  # unbound: a repeat until the run asks again
    engine.decide(run_id, third, unbound=True)
    result = engine.result(run_id, timeout=30)
    for decisions in (first, second, [asked.approve().to_data()]):
        engine.decide(run_id, decisions)  # the run ended: each is a repeat
    engine.decide(run_id, third, unbound=True)  # the newest decisions again
    with pytest.raises(ResumeError, match=r"did not end interrupted \(it is ok\)"):
        engine.decide(run_id, [{"type": "reject"}], unbound=True)  # not what it took
    with pytest.raises(ResumeError, match=r"did not end interrupted \(it is ok\)"):
        engine.decide(run_id, [{"type": "approve", "digest": "sha256:0"}])  # none it took
    assert engine.result(run_id, timeout=30) == result
    assert result.status == "ok"
    assert [t.terminal for t in result.traces] == ["interrupted"] * 3 + ["ok"]
    texts = [m.tool_results[0].text for m in result.state.messages if m.role == "tool"]
    assert texts[1] == "Tool call 'record' was rejected by a human reviewer."
    starts = [line for line in log.read_text().splitlines() if line.startswith("start ")]
    assert starts == ["start again-0", "start again-2"]


def test_the_same_decisions_sent_again_to_a_run_whose_wait_timed_out_resume_it_once(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    run_id = engine.submit(AgentState.of("dup"), agent="gated", decision_timeout=0.3)
    ended = engine.result(run_id, timeout=30)
    assert ended.status == "interrupted"
    [asked] = Approval.of(ended.state.interrupt_data).requests
    decisions = [asked.approve().to_data()]
    engine.decide(run_id, decisions)
    engine.decide(run_id, decisions)  # the continuation is queued, running or waiting
    assert engine.result(run_id, timeout=30).status == "interrupted"  # at the next request
    engine.decide(run_id, decisions)  # and once the continuation's own wait timed out
    continuations = [w.workflow_id for w in engine.client.list_workflows(forked_from=run_id)]
    assert continuations == [f"{run_id}/resume-1"]
    starts = [line for line in log.read_text().splitlines() if line.startswith("start ")]
    assert starts == ["start dup-0"]


def _decide_elsewhere(url: str, run_id: str, decisions: list[dict[str, Any]]) -> None:
    """``decide`` from another process (bound decisions: each carries its digest)."""
    code = "import json, sys; from agentfsm.durable import Engine; "
    code += "Engine(sys.argv[1]).decide(sys.argv[2], json.loads(sys.argv[3]))"
    subprocess.run(
        [sys.executable, "-c", code, url, run_id, json.dumps(decisions)],
        cwd=ROOT,
        check=True,
        timeout=60,
    )


def test_a_run_whose_wait_timed_out_is_resumed_later_from_anywhere(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    run_id = engine.submit(
        AgentState.of("late"), agent="gated", run_id="late", decision_timeout=0.3
    )
    ended = engine.result(run_id, timeout=30)
    assert ended.status == "interrupted" and engine.waiting(run_id) is None
    assert [t.path for t in ended.traces] == ["expanding calling interrupt_check interrupted"]
    other = Engine(engine.url)  # another process's view: a client only
    try:
        for wrong, refusal in [
            ([], r"Decision count \(0\) does not match"),
            ([{"type": "approve", "tool_call_id": "forged"}], "names tool call 'forged'"),
            ([{"type": "grant"}], r"Decision at index 0 has type 'grant'; use one of"),
            ([{"type": "approve"}], "carries no digest of the request it decides"),
        ]:
            with pytest.raises(ValueError, match=refusal):
                other.decide(run_id, wrong)
        assert [w.workflow_id for w in other.client.list_workflows()] == ["late"]  # nothing queued
        [asked] = Approval.of(ended.state.interrupt_data).requests
        _decide_elsewhere(engine.url, run_id, [asked.approve().to_data()])
        # each continuation waits in vain for the next approval, and is resumed in turn
        assert other.result(run_id, timeout=30).status == "interrupted"
        other.decide(
            f"{run_id}/resume-1", [{"type": "reject"}], unbound=True
        )  # a continuation's id: the run's
        assert other.result(run_id, timeout=30).status == "interrupted"
        other.decide(run_id, [{"type": "edit", "arguments": {"note": "edited"}}], unbound=True)
        result = other.result(run_id, timeout=30)
        assert other.result(f"{run_id}/resume-1", timeout=30) == result
        with pytest.raises(ResumeError, match=r"did not end interrupted \(it is ok\)"):
            other.decide(run_id, [{"type": "approve"}], unbound=True)
        with pytest.raises(RunNotFoundError):
            other.decide("nobody", [{"type": "approve"}], unbound=True)
        [record] = other.runs()
    finally:
        other.close()
    assert (record.run_id, record.status, record.agent) == ("late", "ok", "gated")
    assert result.run_id == "late" and result.status == "ok"
    again = "interrupt_check executing propagating until_check deciding"
    assert [t.path for t in result.traces] == [
        "expanding calling interrupt_check interrupted",
        f"{again} expanding calling interrupt_check interrupted",
        f"{again} expanding calling interrupt_check interrupted",
        f"{again} {LOOP} ok",
    ]
    _assert_paths(result)
    texts = [m.tool_results[0].text for m in result.state.messages if m.role == "tool"]
    assert texts[0].startswith("recorded n0 ")
    assert texts[1] == "Tool call 'record' was rejected by a human reviewer."
    assert texts[2].startswith("recorded edited ")
    assert [m.role for m in result.state.messages] == [
        "user",
        *["assistant", "tool"] * 3,
        "assistant",
    ]
    # the approved and the edited call ran once each, the rejected one never
    starts = [line for line in log.read_text().splitlines() if line.startswith("start ")]
    assert starts == ["start late-0", "start late-2"]
    forks = {w.workflow_id: w.forked_from for w in engine.client.list_workflows()}
    assert forks == {
        "late": None,
        "late/resume-1": "late",
        "late/resume-2": "late/resume-1",
        "late/resume-3": "late/resume-2",
    }


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_only_a_run_that_waited_for_approval_is_resumed_by_decide(engine: Engine) -> None:
    asked = engine.result(engine.submit(AgentState.of("x"), agent="asking"), timeout=30)
    assert asked.status == "interrupted" and [t.path for t in asked.traces] == [
        "expanding calling interrupt_check executing propagating interrupted"
    ]
    with pytest.raises(ResumeError, match=r"interrupted by 'ask_user', not waiting for approval"):
        engine.decide(asked.run_id, [{"type": "approve"}], unbound=True)
    gated = engine.submit(AgentState.of("busy"), agent="gated")
    _wait_for_decisions(engine, gated, "busy-0")
    engine.decide(gated, [{"type": "approve"}], unbound=True)
    _wait_for_decisions(engine, gated, "busy-1")
    assert engine.client.list_workflows(forked_from=gated) == []  # a waiting run needs no fork
    assert len(engine.runs()) == 2


def test_two_processes_resuming_at_once_resume_once(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    run_id = engine.submit(AgentState.of("both"), agent="gated", decision_timeout=0.3)
    assert engine.result(run_id, timeout=30).status == "interrupted"
    clients = [Engine(engine.url), Engine(engine.url)]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    [asked] = Approval.of(engine.result(run_id, timeout=30).state.interrupt_data).requests

    def decide(client: Engine) -> None:
        barrier.wait()
        try:
            client.decide(run_id, [asked.approve().to_data()])
            outcomes.append("sent")
        except ResumeError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=decide, args=(c,)) for c in clients]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        result = engine.result(run_id, timeout=30)
    finally:
        for client in clients:
            client.close()
    assert outcomes == ["sent", "sent"]  # the same decisions twice: taken once, both told so
    assert result.status == "interrupted"  # at the next approval, which came in vain
    continuations = [w.workflow_id for w in engine.client.list_workflows(forked_from=run_id)]
    assert continuations == [f"{run_id}/resume-1"]
    starts = [line for line in log.read_text().splitlines() if line.startswith("start ")]
    assert starts == ["start both-0"]


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_decisions_sent_as_the_wait_times_out_go_on_in_a_continuation(engine: Engine) -> None:
    run_id = engine.submit(AgentState.of("race"), agent="gated", decision_timeout=1.5)
    _wait_for_decisions(engine, run_id, "race-0")
    seen = engine.client.get_event(run_id, WAITING_EVENT, timeout_seconds=0)
    assert engine.result(run_id, timeout=30).status == "interrupted"
    # the interleaving of a decide that read the wait just before it timed out
    other = Engine(engine.url)
    try:
        other.client.get_event = lambda *_, **__: seen  # type: ignore[method-assign]
        other.decide(run_id, [{"type": "reject"}], unbound=True)
    finally:
        other.close()
    # the continuation took the rejection and waits on the next call
    _wait_for_decisions(engine, run_id, "race-1")
    assert engine.client.list_workflows(forked_from=run_id)[0].workflow_id == f"{run_id}/resume-1"


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_drained_run_keeps_its_max_runs_budget(db: str) -> None:
    entered, release = threading.Event(), threading.Event()

    @tool
    async def record(note: str, context: ToolContext) -> str:
        """Record a note (the first call waits for the drain)."""
        entered.set()
        await asyncio.to_thread(release.wait, 30)
        return f"recorded {note}"

    agent = Agent(ScriptedModel(_durable_agent.script, model_name="scripted"), [record])
    first = Engine(db, polling_interval=0.05)
    first.register("budget", agent)
    first.launch(executor_id="first")
    handed: list[str] = []
    try:
        run_id = first.submit(AgentState.of("budget"), agent="budget", max_runs=2)
        assert entered.wait(30)
        drainer = threading.Thread(target=lambda: handed.extend(first.drain(timeout=30)))
        drainer.start()
        deadline = time.monotonic() + 30
        while not WORKER.draining:
            assert time.monotonic() < deadline, "the worker never started draining"
            time.sleep(0.005)
        release.set()  # the tool call in flight finishes on the draining worker
        drainer.join(60)
    finally:
        first.close()
    assert handed == [run_id]
    second = Engine(db, polling_interval=0.05)
    second.register("budget", agent)
    second.launch(executor_id="second")
    try:
        result = second.result(run_id, timeout=30)
        steps = [s["function_name"] for s in second.client.list_workflow_steps(run_id)]
    finally:
        second.close()
    # two model calls in all: the second segment had one left, not a fresh two
    turn = ["model:scripted@expanded>calling", "tool:record@clear>executing"]
    assert steps == [f"{n}#{i}" for i, n in enumerate(turn * 2, 1)]
    assert result.ends == ("paused: draining", "error")
    assert [t.path for t in result.traces] == [
        "expanding calling interrupt_check executing propagating paused",
        "propagating until_check deciding expanding calling interrupt_check executing "
        "propagating until_check deciding error",
    ]
    assert result.state.error is not None and result.state.error.type == "exceeded_max_runs"
    _assert_paths(result)


# ---------------------------------------------------------------- worker processes


class _Workers:
    """``agentfsm worker`` processes over one database, logging to one file."""

    def __init__(
        self, url: str, log: Path, *, model_delay: float, tool_delay: float, agent: str = AGENT
    ) -> None:
        self.url = url
        self.log = log
        self.agent = agent
        self.env = {
            **os.environ,
            "AGENTFSM_TEST_LOG": str(log),
            "AGENTFSM_TEST_MODEL_DELAY": str(model_delay),
            "AGENTFSM_TEST_TOOL_DELAY": str(tool_delay),
            "PYTHONPATH": str(ROOT),
        }
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, executor: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentfsm",
                "worker",
                "--db",
                self.url,
                self.agent,
                "--executor-id",
                executor,
                "--drain-timeout",
                "20",
                *args,
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "running" in line, line + (proc.stderr.read() if proc.stderr else "")
        return proc

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_for(self, word: str, after: int, *, moot: Callable[[], bool] | None = None) -> None:
        """Until a worker logs ``word`` past line ``after``, or ``moot()`` says there is
        nothing left to wait for (every run finished); neither within 30 s fails."""
        deadline = time.monotonic() + 30
        checks = 0
        while time.monotonic() < deadline:
            if any(line.split()[0] == word for line in self.lines()[after:]):
                return
            checks += 1
            if moot is not None and checks % 25 == 0 and moot():
                return
            time.sleep(0.002)
        raise AssertionError(f"no worker logged {word!r} after line {after}: {self.lines()}")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def workers(db: str, tmp_path: Path) -> Iterator[_Workers]:
    # worker processes take seconds to start: the drain runs on SQLite, the kills on both
    group = _Workers(db, tmp_path / "calls.log", model_delay=0.05, tool_delay=0.05)
    try:
        yield group
    finally:
        group.close()


def _assert_no_recorded_tool_ran_again(results: list[RunResult], lines: list[str]) -> None:
    """Each run's tool result is one execution's, and no call began after it finished."""
    for result in results:
        for message in (m for m in result.state.messages if m.role == "tool"):
            [kept] = message.tool_results
            nonce = kept.text.rsplit(" ", 1)[1]
            done = lines.index(f"done {kept.tool_call_id} {nonce}")
            assert f"start {kept.tool_call_id}" not in lines[done:], kept.tool_call_id


def _finished(engine: Engine, ids: list[str]) -> list[RunResult]:
    results = [engine.result(run_id, timeout=60) for run_id in ids]
    for result in results:
        assert result.status == "ok", result.state
        prompt = result.state.messages[0].text
        assert [m.role for m in result.state.messages] == [
            "user",
            *["assistant", "tool"] * 3,
            "assistant",
        ]
        calls = [c.call_id for m in result.state.messages for c in m.tool_calls]
        assert calls == [f"{prompt}-{n}" for n in range(3)]
        _assert_paths(result)
    return results


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_sigterm_drains_a_worker_and_another_finishes_its_runs(workers: _Workers) -> None:
    engine = Engine(workers.url)
    try:
        first = workers.start("first")
        workers.start("other", "--name", "other-agent")  # another agent's worker, same database
        ids = [engine.submit(AgentState.of(f"drain{n}"), agent=AGENT) for n in range(3)]
        workers.wait_for("start", 0)
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=30)
        assert first.returncode == 0, err
        assert "drained" in out
        assert any(engine._status(i, output=False).status == "ENQUEUED" for i in ids)
        workers.start("second")
        results = _finished(engine, ids)
        assert {engine.status(i).executor for i in ids} == {"second"}
    finally:
        engine.close()
    lines = workers.lines()
    _assert_no_recorded_tool_ran_again(results, lines)
    assert len([x for x in lines if x.startswith("start ")]) == 9  # nothing ran twice
    ends = [e for r in results for e in r.ends[:-1]]
    assert ends and set(ends) == {"paused: draining"}, ends
    assert all(r.ends[-1] == "ok" for r in results)


def _all_finished(engine: Engine, ids: list[str]) -> bool:
    return all(engine._status(i, output=False).status == "SUCCESS" for i in ids)


def test_workers_killed_at_random_points_lose_nothing_and_rerun_no_recorded_tool(
    workers: _Workers,
) -> None:
    workers.env["AGENTFSM_TEST_MODEL_DELAY"] = workers.env["AGENTFSM_TEST_TOOL_DELAY"] = "0.15"
    rng = random.Random(os.environ.get("AGENTFSM_TEST_SEED", "16"))
    engine = Engine(workers.url)
    try:
        ids: list[str] = []
        dead: list[str] = []
        workers.start("other", "--name", "other-agent")  # another agent's worker, same database
        for round_ in range(3):
            executor = f"w{round_}"
            # half the time a new worker adopts the dead ones, else one restarts under its name
            if dead and rng.random() < 0.5:
                executor = dead.pop()
            proc = workers.start(executor, *(a for d in dead for a in ("--recover", d)))
            if not ids:  # the first worker made the database
                ids = [engine.submit(AgentState.of(f"kill{n}"), agent=AGENT) for n in range(4)]
            mark = len(workers.lines())
            where = rng.choice(["model", "start", "anywhere"])
            if where == "anywhere":
                time.sleep(rng.uniform(0.5, 1.5))
            else:
                # inside a model call, or inside a tool; unless every run has finished
                workers.wait_for(where, mark, moot=functools.partial(_all_finished, engine, ids))
                time.sleep(rng.uniform(0.0, 0.03))
            proc.kill()
            proc.wait()
            dead.append(executor)
        workers.start("last", *(a for d in dead for a in ("--recover", d)))
        results = _finished(engine, ids)
    finally:
        engine.close()
    _assert_no_recorded_tool_ran_again(results, workers.lines())


def test_the_worker_command_needs_an_agent() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfsm", "worker", "--db", "x.db", "nomodule:nothing"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert re.search(r"cannot import 'nomodule'", out.stderr)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_worker_serves_the_version_of_its_agents_machines(db: str) -> None:
    from agentfsm.durable._engine import app_version

    same = app_version({"gated": _record_agent(gated=True)})
    assert same == app_version({"gated": _record_agent()}) and same.startswith("agentfsm-")

    def keep(result: Any, opts: Any = None) -> Any:
        return result

    other = STANDARD.replace("deciding", (*STANDARD.steps["deciding"], keep), name="served_other")
    assert app_version({"gated": Agent(ScriptedModel([]), [], machine=other)}) != same
    assert app_version({"renamed": _record_agent()}) != same


def test_a_changed_machine_meets_a_recorded_step_as_an_error_naming_both(db: str) -> None:
    first = Engine(db, polling_interval=0.05)
    first.register("gated", _record_agent(gated=True))
    first.launch(executor_id="changing")
    try:
        run_id = first.submit(AgentState.of("ask"), agent="gated", run_id="changing")
        _wait_for_decisions(first, run_id, "ask-0")
    finally:
        first.close()
    old_version = first.app_version
    assert old_version is not None

    async def note(result: Any, opts: Any) -> Any:
        """A new state that asks the model first: the recorded first call was calling's."""
        await result.chain.llm.complete(result.chain.messages, ())
        return result

    noting = STANDARD.insert("noting", (note,), after="expanding", name="noting_first")
    changed = _record_agent(gated=True)
    changed_agent = Agent(
        changed.model, changed.tools, middleware=changed.middleware, machine=noting
    )
    second = Engine(db, polling_interval=0.05)
    second.register("gated", changed_agent)
    second.launch(executor_id="changing")  # another machine: the pending run is not its own
    try:
        assert second.app_version not in (None, old_version)
        with pytest.raises(TimeoutError):
            second.result(run_id, timeout=1)
    finally:
        second.close()
    third = Engine(db, polling_interval=0.05)
    third.register("gated", changed_agent)
    third.launch(executor_id="changing", version=old_version)  # taken on purpose
    try:
        result = third.result(run_id, timeout=30)
    finally:
        third.close()
    # the new state's call is refused, not handed the reply recorded for calling's
    assert result.status == "error" and [t.path for t in result.traces] == [
        "expanding noting error"
    ]
    assert result.state.error is not None
    text = result.state.error.message
    assert "DBOSUnexpectedStepError" in text
    assert "model:scripted@expanded>calling#1" in text
    assert "model:scripted@expanded>noting#1" in text
