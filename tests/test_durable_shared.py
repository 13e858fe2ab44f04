"""Durable runs of several agents on one database: each worker its own queue, decisions
compare-and-set, and every run visible (status, orphans, the runs command, worker logs)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable engine needs the dbos extra")

from agentfsm import (
    AgentState,
    Approval,
    DecisionConflictError,
    ResumeError,
    RunNotFoundError,
    StoreError,
)
from agentfsm.durable import Engine
from agentfsm.durable._workflow import WAITING_EVENT
from tests.test_durable import (
    AGENT,
    ROOT,
    _finished,
    _record_agent,
    _wait_for_decisions,
    _Workers,
)
from tests.test_durable import db as db  # a fixture


@pytest.fixture
def workers(db: str, tmp_path: Path) -> Iterator[_Workers]:
    group = _Workers(db, tmp_path / "calls.log", model_delay=0.05, tool_delay=0.05)
    try:
        yield group
    finally:
        group.close()


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_every_durable_error_is_a_store_error_from_agentfsm() -> None:
    assert issubclass(DecisionConflictError, ResumeError)
    assert issubclass(ResumeError, StoreError) and issubclass(RunNotFoundError, StoreError)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_two_agents_workers_on_one_database_each_take_only_their_own_runs(
    workers: _Workers,
) -> None:
    engine = Engine(workers.url)
    try:
        workers.start("alpha-worker", "--name", "alpha")
        workers.start("beta-worker", "--name", "beta")
        alpha = [engine.submit(AgentState.of(f"alpha{n}"), agent="alpha") for n in range(3)]
        beta = [engine.submit(AgentState.of(f"beta{n}"), agent="beta") for n in range(3)]
        ghost = engine.submit(AgentState.of("ghost0"), agent="ghost")
        _finished(engine, alpha + beta)
        records = {r.run_id: r for r in engine.runs()}
    finally:
        engine.close()
    assert {records[i].executor for i in alpha} == {"alpha-worker"}
    assert {records[i].executor for i in beta} == {"beta-worker"}
    assert {records[i].queue for i in alpha} == {"agentfsm:alpha"}
    assert (records[ghost].status, records[ghost].executor) == ("queued", None)


def race_decides(url: str, run_id: str) -> tuple[str, DecisionConflictError]:
    """Two clients that both saw the run wait decide at once, one ``approve`` and one
    ``reject``: the decision sent, and the other's refusal."""
    clients = [Engine(url), Engine(url)]
    barrier = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def decide(client: Engine, decision: str) -> None:
        # both have seen the wait before either decides: the interleaving of a race
        seen = client.client.get_event(run_id, WAITING_EVENT, timeout_seconds=0)
        client.client.get_event = lambda *_, **__: seen  # type: ignore[method-assign]
        barrier.wait()
        try:
            client.decide(run_id, [{"type": decision}], unbound=True)
            outcomes[decision] = "sent"
        except DecisionConflictError as exc:
            outcomes[decision] = exc

    threads = [
        threading.Thread(target=decide, args=(c, d))
        for c, d in zip(clients, ["approve", "reject"], strict=True)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for client in clients:
            client.close()
    [won] = [d for d, o in outcomes.items() if o == "sent"]
    [lost] = [o for o in outcomes.values() if isinstance(o, DecisionConflictError)]
    return won, lost


def test_of_two_concurrent_decides_the_loser_is_told_which_won(db: str) -> None:
    with Engine(db, polling_interval=0.05) as engine:
        engine.register("gated", _record_agent(gated=True))
        engine.launch(executor_id="in-process")
        run_id = engine.submit(AgentState.of("pick"), agent="gated")
        [asked] = Approval.of(_wait_for_decisions(engine, run_id, "pick-0")).requests
        assert engine.status(run_id).status == "waiting"
        assert engine.result(run_id, wait=False) is None
        won, lost = race_decides(engine.url, run_id)
        # the decisions that won, as they were sent: bound to the request they decided
        assert lost.decisions == [{"type": won, "tool_call_id": "pick-0", "digest": asked.digest}]
        assert lost.run_id == run_id
        assert won in str(lost)
        _wait_for_decisions(engine, run_id, "pick-1")  # the winner's decision was taken
        engine.decide(run_id, [{"type": "approve"}], unbound=True)
        _wait_for_decisions(engine, run_id, "pick-2")
        engine.decide(run_id, [{"type": "approve"}], unbound=True)
        result = engine.result(run_id, timeout=30)
        texts = [m.tool_results[0].text for m in result.state.messages if m.role == "tool"]
    rejected = texts[0] == "Tool call 'record' was rejected by a human reviewer."
    assert rejected == (won == "reject"), texts


def test_a_decide_that_claimed_but_never_sent_is_retried_and_others_still_lose(db: str) -> None:
    with Engine(db, polling_interval=0.05) as engine:
        engine.register("gated", _record_agent(gated=True))
        engine.launch(executor_id="in-process")
        run_id = engine.submit(AgentState.of("retry"), agent="gated")
        [asked] = Approval.of(_wait_for_decisions(engine, run_id, "retry-0")).requests
        # a decide that died between its claim and its message (it claimed them bound)
        segment = engine.client.get_event(run_id, WAITING_EVENT, timeout_seconds=0)["segment"]
        claimed = [asked.approve().to_data()]
        assert engine.ledger.claim(run_id, segment, claimed) is None
        with pytest.raises(DecisionConflictError) as lost:
            engine.decide(run_id, [{"type": "reject"}], unbound=True)
        assert lost.value.decisions == claimed
        # the same decisions, again (bound here as the claim bound them): sent
        engine.decide(run_id, [{"type": "approve"}], unbound=True)
        _wait_for_decisions(engine, run_id, "retry-1")
        engine.decide(run_id, [{"type": "approve"}], unbound=True)
        _wait_for_decisions(engine, run_id, "retry-2")
        engine.decide(run_id, [{"type": "approve"}], unbound=True)
        result = engine.result(run_id, timeout=30)
    assert result.status == "ok"
    texts = [m.tool_results[0].text for m in result.state.messages if m.role == "tool"]
    assert len(texts) == 3 and not any("rejected" in t for t in texts), texts


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_killed_workers_run_shows_orphaned_until_taken_over(workers: _Workers) -> None:
    workers.env["AGENTFSM_TEST_TOOL_DELAY"] = "0.5"
    engine = Engine(workers.url)
    try:
        proc = workers.start("mortal")
        run_id = engine.submit(AgentState.of("orphan"), agent=AGENT)
        workers.wait_for("start", 0)
        assert engine.status(run_id).status == "running"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 20
        while engine.status(run_id).status != "orphaned" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert engine.status(run_id).status == "orphaned"
        workers.start("heir", "--recover", "mortal")
        _finished(engine, [run_id])
        record = engine.status(run_id)
    finally:
        engine.close()
    assert (record.status, record.executor) == ("ok", "heir")


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_the_worker_logs_each_run_writes_a_ready_file_and_the_runs_command_reads_it(
    workers: _Workers, tmp_path: Path
) -> None:
    ready = tmp_path / "ready.json"
    engine = Engine(workers.url)
    try:
        proc = workers.start("logged", "--log-format", "json", "--ready-file", str(ready))
        assert json.loads(ready.read_text())["queues"] == [f"agentfsm:{AGENT}"]
        run_id = engine.submit(AgentState.of("logged0"), agent=AGENT, run_id="logged-run")
        _finished(engine, [run_id])
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        engine.close()
    assert proc.returncode == 0, err
    said = [json.loads(line) for line in out.splitlines()]  # stdout: after "running"
    assert [e["event"] for e in said] == ["drained"] and not ready.exists()
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    runs = [(e["event"], e.get("status")) for e in logged if e.get("run_id") == run_id]
    assert runs == [("run start", None), ("run end", "ok")]
    path = workers.url.removeprefix("sqlite:///")
    for given in (path, workers.url):  # one --db syntax: a path or a URL
        listed = _cli("runs", "list", "--db", given)
        assert listed.returncode == 0, listed.stderr
        assert "logged-run" in listed.stdout and " ok " in listed.stdout
    shown = _cli("runs", "show", "logged-run", "--db", path)
    assert shown.returncode == 0 and "run logged-run: ok" in shown.stdout
    missing = _cli("runs", "show", "nobody", "--db", path)
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1


def test_an_unreachable_database_is_one_line_and_exit_2() -> None:
    url = "postgresql://nobody:nothing@127.0.0.1:9/none"
    worker = _cli("worker", "--db", url, AGENT, timeout=120)
    assert worker.returncode == 2, worker.stderr
    assert len(worker.stderr.strip().splitlines()) == 1, worker.stderr
    assert worker.stderr.startswith("agentfsm worker: cannot start on")
    listed = _cli("runs", "list", "--db", url, timeout=120)
    assert listed.returncode == 2
    assert len(listed.stderr.strip().splitlines()) == 1, listed.stderr


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_run_drained_between_two_steps_has_the_drain_in_its_record(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.durable import _workflow

    entered, release = threading.Event(), threading.Event()
    original = _workflow._Execution.drained_here

    async def held(self: Any) -> bool:  # the run stops between its reply and its tool
        if not entered.is_set():
            entered.set()
            await asyncio.to_thread(release.wait, 30)
        return await original(self)

    monkeypatch.setattr(_workflow._Execution, "drained_here", held)
    first = Engine(db, polling_interval=0.05)
    first.register("plain", _record_agent())
    first.launch(executor_id="first")
    handed: list[str] = []
    try:
        run_id = first.submit(AgentState.of("between"), agent="plain")
        assert entered.wait(30)
        drainer = threading.Thread(target=lambda: handed.extend(first.drain(timeout=30)))
        drainer.start()
        while not _workflow.WORKER.draining:
            time.sleep(0.005)
        release.set()
        drainer.join(60)
    finally:
        first.close()
    assert handed == [run_id]
    with Engine(db, polling_interval=0.05) as second:
        second.register("plain", _record_agent())
        second.launch(executor_id="second")
        result = second.result(run_id, timeout=30)
        steps = [s["function_name"] for s in second.client.list_workflow_steps(run_id)]
    assert result.ends == ("paused: draining", "ok")
    assert [s.partition("@")[0] for s in steps[:3]] == [
        "model:scripted",
        "agentfsm.drain",
        "tool:record",
    ]
    assert result.traces[0].path == "expanding calling interrupt_check paused"
    assert result.traces[1].entry == "interrupt_check"


def test_a_run_queued_while_no_worker_of_its_agent_lives_is_taken_by_the_next_one(
    db: str,
) -> None:
    """DBOS hands a version-less run only to the newest version launched; here that is
    another agent's worker, so the agent's own worker must take the run itself."""
    plain = Engine(db, polling_interval=0.05)
    plain.register("plain", _record_agent())
    plain.launch(executor_id="plain-1")  # its version is registered first...
    plain.drain(timeout=5)
    with Engine(db, polling_interval=0.05) as other:
        other.register("other", _record_agent())
        other.launch(executor_id="other")  # ...and another agent's is the newest
        other.drain(timeout=5)
    with Engine(db, polling_interval=0.05) as engine:
        run_id = engine.submit(AgentState.of("queued"), agent="plain")
        again = Engine(db, polling_interval=0.05)
        again.register("plain", _record_agent())
        again.launch(executor_id="plain-2")
        try:
            result = again.result(run_id, timeout=30)
            executor = engine.status(run_id).executor
        finally:
            again.close()
    assert result.status == "ok"
    assert executor == "plain-2"
