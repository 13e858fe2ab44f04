"""One durable contract, parametrized over both engines: DBOS (on SQLite and on
PostgreSQL) and Temporal (on its dev server). Workers are real ``agentfsm worker``
processes, killed with SIGKILL; decisions are sent from the test's process, never the
worker's.

What both promise: a worker killed mid-run loses nothing and runs again at most the call
it had in flight; an approval decided from another process runs the tool once; the first
decisions win and the same ones again change nothing; two agents of different machines
on one server or database never take each other's runs; a drained worker hands its run
back, and the run's record has the drain as a segment that ends ``paused: draining``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import AgentState, Approval, DecisionConflictError

ROOT = Path(__file__).resolve().parent.parent
LOOP = "expanding calling interrupt_check executing propagating until_check deciding"
TALLY_LOOP = "expanding calling interrupt_check executing propagating until_check tallying deciding"


class Side:
    """One engine as the suite drives it: its worker command and a client."""

    def __init__(self, engine: str, where: str, log: Path) -> None:
        self.kind = engine
        self.where = where
        self.log = log
        self.env = {
            **os.environ,
            "AGENTFSM_TEST_LOG": str(log),
            "AGENTFSM_TEST_MODEL_DELAY": "0.05",
            "AGENTFSM_TEST_TOOL_DELAY": "0.3",
            "PYTHONPATH": str(ROOT),
        }
        self.procs: list[subprocess.Popen[str]] = []
        self.client: Any = None

    def engine(self) -> Any:
        if self.client is None:
            if self.kind == "temporal":
                from agentfsm.temporal import Engine as TemporalEngine

                self.client = TemporalEngine(self.where)
            else:
                from agentfsm.durable import Engine as DBOSEngine

                self.client = DBOSEngine(self.where)
        return self.client

    def start(self, executor: str, agent: str, name: str) -> subprocess.Popen[str]:
        where = (
            ["--engine", "temporal", "--address", self.where, "--heartbeat", "2"]
            if self.kind == "temporal"
            else ["--db", self.where]
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentfsm",
                "worker",
                *where,
                agent,
                "--name",
                name,
                "--executor-id",
                executor,
                "--drain-timeout",
                "20",
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

    def wait_for(self, prefix: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines()):
            assert time.monotonic() < deadline, f"no {prefix!r} in {self.lines()}"
            time.sleep(0.01)

    def waiting(self, run_id: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            request = self.engine().waiting(run_id)
            if request is not None:
                return request
            assert time.monotonic() < deadline, f"{run_id} never waited"
            time.sleep(0.05)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        if self.client is not None:
            self.client.close()


@pytest.fixture(params=["dbos-sqlite", "dbos-postgres", "temporal"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    if request.param == "temporal":
        where = request.getfixturevalue("temporal_server")
        engine = "temporal"
    else:
        pytest.importorskip("dbos", reason="the DBOS engine needs the dbos extra")
        engine = "dbos"
        if request.param == "dbos-sqlite":
            where = f"sqlite:///{tmp_path / 'runs.db'}"
        else:
            server: str = request.getfixturevalue("pg_server")
            where = server.rsplit("/", 1)[0] + f"/t_{uuid.uuid4().hex[:10]}"
    group = Side(engine, where, tmp_path / f"calls-{tmp_path.name}.log")
    try:
        yield group
    finally:
        group.close()


def _path(result: Any) -> list[str]:
    return [" ".join(trace.states) for trace in result.traces]


def _unique(prefix: str) -> str:
    return f"{prefix}{time.monotonic_ns() % 10**9}"


def test_a_worker_killed_mid_call_loses_nothing_and_reruns_only_that_call(side: Side) -> None:
    killed = side.start("w-killed", "tests._contract_agents:recorder", "rec")
    prompt = _unique("kill")
    run_id = side.engine().submit(AgentState.of(prompt), agent="rec")
    side.wait_for(f"start {prompt}-1")  # the second tool call is in flight
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    # DBOS recovers a killed worker's runs under its id; Temporal, with any worker
    side.start("w-killed", "tests._contract_agents:recorder", "rec")
    result = side.engine().result(run_id, timeout=90)
    assert result.status == "ok"
    starts = Counter(line.split()[1] for line in side.lines() if line.startswith(f"start {prompt}"))
    # the calls done before the kill ran once; the one in flight at most twice
    assert starts[f"{prompt}-0"] == 1
    assert 1 <= starts[f"{prompt}-1"] <= 2
    assert starts[f"{prompt}-2"] == 1
    done = {
        line.split()[1]: line.split()[2]
        for line in side.lines()
        if line.startswith(f"done {prompt}")
    }
    kept = [r.content for m in result.state.messages if m.role == "tool" for r in m.tool_results]
    assert kept == [f"recorded n{n} {done[f'{prompt}-{n}']}" for n in range(3)]
    assert " ".join(s for t in result.traces for s in t.states).endswith("deciding ok")


def _answered(side: Side, run_id: str, after: int) -> Any:
    """Wait until the run asks again past ``after`` decisions, or ends; the request or None."""
    engine = side.engine()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        request = engine.waiting(run_id)
        if request is not None:
            [shown] = request["action_requests"]
            if not shown["tool_call_id"].endswith(f"-{after - 1}"):
                return request
        elif engine.result(run_id, wait=False) is not None:
            return None
        time.sleep(0.05)
    raise AssertionError(f"{run_id} neither asked again nor ended")


def test_an_approval_decided_from_another_process_runs_the_tool_once(side: Side) -> None:
    side.start("w-gated", "tests._contract_agents:gated", "gated")
    prompt = _unique("gate")
    engine = side.engine()
    run_id = engine.submit(AgentState.of(prompt), agent="gated")
    assert engine.result(run_id, wait=False) is None
    request = side.waiting(run_id)
    for turn in range(3):
        [shown] = request["action_requests"]
        assert shown["tool_call_id"] == f"{prompt}-{turn}"
        engine.decide(run_id, Approval.of(request).approve_all())
        request = _answered(side, run_id, turn + 1)
    assert request is None
    result = engine.result(run_id, timeout=60)
    starts = Counter(line for line in side.lines() if line.startswith(f"start {prompt}"))
    assert starts == {f"start {prompt}-{n}": 1 for n in range(3)}
    assert result.status == "ok"
    assert result.ends == ("interrupted", "interrupted", "interrupted", "ok")
    answered = "interrupt_check executing propagating until_check deciding"
    assert _path(result) == [
        "expanding calling interrupt_check interrupted",
        f"{answered} expanding calling interrupt_check interrupted",
        f"{answered} expanding calling interrupt_check interrupted",
        f"{answered} {LOOP} ok",
    ]


def test_the_first_decisions_win_and_the_same_again_change_nothing(side: Side) -> None:
    side.start("w-race", "tests._contract_agents:gated", "gated")
    prompt = _unique("race")
    engine = side.engine()
    run_id = engine.submit(AgentState.of(prompt), agent="gated")
    request = side.waiting(run_id)
    won = [{"type": "reject", "digest": _digest(request)}]
    engine.decide(run_id, won)
    engine.decide(run_id, won)  # the same again: idempotent
    # other decisions for that wait are refused: DecisionConflictError naming the ones taken
    # (a run that asked again meanwhile may refuse them on DBOS as answering nothing asked)
    with pytest.raises((DecisionConflictError, ValueError)) as refused:
        engine.decide(run_id, Approval.of(request).approve_all())
    if isinstance(refused.value, DecisionConflictError) or side.kind == "temporal":
        assert isinstance(refused.value, DecisionConflictError)
        assert [d["type"] for d in refused.value.decisions or []] == ["reject"]
    request = _answered(side, run_id, 1)
    for turn in (1, 2):
        assert request is not None
        engine.decide(run_id, Approval.of(request).approve_all())
        request = _answered(side, run_id, turn + 1)
    result = engine.result(run_id, timeout=60)
    engine.decide(run_id, won)  # after the end too: bound decisions it took
    starts = [line for line in side.lines() if line.startswith(f"start {prompt}")]
    assert starts == [f"start {prompt}-1", f"start {prompt}-2"]  # the rejected call never ran
    texts = [m.tool_results[0].text for m in result.state.messages if m.role == "tool"]
    assert texts[0] == "Tool call 'record' was rejected by a human reviewer."
    assert result.ends == ("interrupted", "interrupted", "interrupted", "ok")


def _digest(request: Any) -> str:
    from agentfsm._middleware import request_digest

    [shown] = request["action_requests"]
    return str(request_digest(shown))


def test_two_agents_of_different_machines_never_take_each_others_runs(side: Side) -> None:
    side.start("w-rec", "tests._contract_agents:recorder", "rec")
    side.start("w-tally", "tests._contract_agents:tallier", "tally")
    engine = side.engine()
    recs = [engine.submit(AgentState.of(_unique(f"r{n}-")), agent="rec") for n in range(3)]
    tallies = [engine.submit(AgentState.of(_unique(f"t{n}-")), agent="tally") for n in range(3)]
    for run_id in recs:
        result = engine.result(run_id, timeout=60)
        assert (result.status, _path(result)) == ("ok", [f"{LOOP} " * 3 + f"{LOOP} ok"])
    for run_id in tallies:
        result = engine.result(run_id, timeout=60)
        assert (result.status, _path(result)) == ("ok", [f"{TALLY_LOOP} " * 3 + f"{TALLY_LOOP} ok"])


def test_a_drained_worker_hands_its_run_back_and_the_record_says_so(side: Side) -> None:
    first = side.start("w-drained", "tests._contract_agents:recorder", "rec")
    prompt = _unique("drain")
    engine = side.engine()
    run_id = engine.submit(AgentState.of(prompt), agent="rec")
    side.wait_for(f"start {prompt}-0")  # a tool call in flight
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=60)
    assert first.returncode == 0
    assert "drained, 1 run(s)" in out
    side.start("w-next", "tests._contract_agents:recorder", "rec")
    result = engine.result(run_id, timeout=90)
    assert result.status == "ok"
    assert result.ends == ("paused: draining", "ok")
    starts = Counter(line for line in side.lines() if line.startswith(f"start {prompt}"))
    assert starts == {f"start {prompt}-{n}": 1 for n in range(3)}  # the call in flight finished
    assert "executing" in result.traces[0].states  # the drained segment ran the first call


def test_a_worker_of_another_machine_never_takes_a_run_recorded_on_the_old_one(
    side: Side,
) -> None:
    v1 = side.start("w-versions", "tests._contract_agents:recorder", "ver")
    prompt = _unique("ver")
    engine = side.engine()
    run_id = engine.submit(AgentState.of(prompt), agent="ver")
    side.wait_for(f"start {prompt}-0")
    v1.send_signal(signal.SIGKILL)
    v1.wait(timeout=30)
    # the next release, on a machine with a state more, under the same name and worker id
    v2 = side.start("w-versions", "tests._contract_agents:tallier", "ver")
    time.sleep(8)  # long enough for either engine to hand the run over, were it to
    assert engine.result(run_id, wait=False) is None
    assert not any(line.startswith(f"start {prompt}-1") for line in side.lines())
    v2.send_signal(signal.SIGKILL)
    v2.wait(timeout=30)
    side.start("w-versions", "tests._contract_agents:recorder", "ver")  # the old machine again
    result = engine.result(run_id, timeout=90)
    assert result.status == "ok"
    assert "tallying" not in [s for t in result.traces for s in t.states]
    done = [line.split()[1] for line in side.lines() if line.startswith(f"done {prompt}")]
    assert sorted(set(done)) == [f"{prompt}-{n}" for n in range(3)]


def test_of_two_processes_deciding_at_once_one_wins_and_the_other_is_told_which(
    side: Side,
) -> None:
    side.start("w-race2", "tests._contract_agents:gated", "gated")
    prompt = _unique("race2")
    run_id = side.engine().submit(AgentState.of(prompt), agent="gated")
    request = side.waiting(run_id)
    [shown] = request["action_requests"]
    digest = _digest(request)
    outcomes: dict[str, Any] = {}
    barrier = threading.Barrier(2)

    def decide(kind: str) -> None:
        client = Side(side.kind, side.where, side.log).engine()  # a process's own client
        try:
            barrier.wait()
            client.decide(run_id, [{"type": kind, "digest": digest}])
            outcomes[kind] = "taken"
        except DecisionConflictError as exc:
            outcomes[kind] = exc
        finally:
            client.close()

    threads = [threading.Thread(target=decide, args=(k,)) for k in ("approve", "reject")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    [won] = [kind for kind, outcome in outcomes.items() if outcome == "taken"]
    [lost] = [o for o in outcomes.values() if isinstance(o, DecisionConflictError)]
    assert [d["type"] for d in lost.decisions or []] == [won]
    assert shown["tool_call_id"] == f"{prompt}-0"
    for turn in (1, 2):  # the rest of the run, approved
        request = _answered(side, run_id, turn)
        assert request is not None
        side.engine().decide(run_id, Approval.of(request).approve_all())
    result = side.engine().result(run_id, timeout=60)
    starts = [line for line in side.lines() if line.startswith(f"start {prompt}-0")]
    assert len(starts) == (1 if won == "approve" else 0)
    assert result.ends == ("interrupted", "interrupted", "interrupted", "ok")
