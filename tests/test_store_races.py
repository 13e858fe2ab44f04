"""One writer at a time: racing resumers, late resumers and holders that lost their lease
never run a tool twice."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentfsm import (
    AgentState,
    Approval,
    RunFinishedError,
    RunInUseError,
    StoreError,
    restore_run,
    start_run,
)
from agentfsm.store import SQLiteStore, checkpoint, load_run
from tests import _race_worker as race
from tests._crash_worker import PROMPT, make_agent

ROOT = Path(__file__).resolve().parent.parent
resume_module = importlib.import_module("agentfsm._resume")
APPROVE = [{"type": "approve"}]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


def launched(ledger: Path) -> Counter[str]:
    return Counter(ledger.read_text().splitlines()) if ledger.exists() else Counter()


def ended_ok(db: Path) -> None:
    with SQLiteStore(db) as store:
        saved = load_run(store, "r", strict=False)
    assert saved.status == "ok"
    assert saved.chain.last_message is not None and saved.chain.last_message.text == "done"


# ---------------------------------------------------------------- racing approvals


def test_resumers_racing_in_threads_run_the_approved_tool_once(db: Path, ledger: Path) -> None:
    race.interrupted(db, ledger)
    start = threading.Barrier(4)
    outcomes: list[str] = []

    def resumer() -> None:
        start.wait()
        outcomes.append(race.resume(db, ledger, "r"))

    threads = [threading.Thread(target=resumer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert launched(ledger) == {"moon": 1, "mars": 1}
    assert outcomes.count("ok") == 1, outcomes
    assert len(outcomes) == 4
    assert set(outcomes) <= {"ok", "RunInUseError", "RunFinishedError", "ResumeError"}
    ended_ok(db)


def test_resumers_racing_in_processes_run_the_approved_tool_once(
    db: Path, ledger: Path, tmp_path: Path
) -> None:
    race.interrupted(db, ledger)
    go = tmp_path / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests._race_worker", str(db), str(ledger), "r", str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    time.sleep(1.5)  # every racer imported and waits at the line
    go.touch()
    outcomes = []
    for racer in racers:
        out, err = racer.communicate(timeout=60)
        assert racer.returncode == 0, err
        outcomes.append(json.loads(out)["outcome"])
    assert launched(ledger) == {"moon": 1, "mars": 1}
    assert outcomes.count("ok") == 1, outcomes
    ended_ok(db)


# ---------------------------------------------------------------- late resumers


def test_a_resumer_that_loaded_before_the_winner_finished_runs_nothing(
    db: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser loads the interrupted run, then waits; the winner approves and finishes;
    the loser's claim is refused (the run is over) before any approved call runs."""
    race.interrupted(db, ledger)
    loaded, go = threading.Event(), threading.Event()
    claim = resume_module._claim
    calls: list[object] = []

    def slow_claim(*args: Any) -> None:
        calls.append(args)
        if len(calls) == 1:  # the late resumer's: it loaded the run, then stalls
            loaded.set()
            go.wait(30)
        claim(*args)

    monkeypatch.setattr(resume_module, "_claim", slow_claim)

    def winner() -> None:
        loaded.wait(30)
        assert race.resume(db, ledger, "r") == "ok"
        go.set()

    thread = threading.Thread(target=winner)
    thread.start()
    with SQLiteStore(db) as store, pytest.raises(RunFinishedError, match="ended ok"):
        race.make_agent(ledger).resume_run_sync("r", store, APPROVE)
    thread.join(30)
    assert launched(ledger) == {"moon": 1, "mars": 1}
    ended_ok(db)


def test_a_late_claim_of_a_run_that_went_on_is_refused(db: Path, ledger: Path) -> None:
    """A resumer that read the run before another process wrote more is refused,
    its first write never skipping that check."""
    store = SQLiteStore(db)
    run = start_run(make_agent(ledger), AgentState.of(PROMPT), store, run_id="r")
    run.request_pause("stop")
    run.run_sync()
    stale = load_run(store, "r", strict=False)
    make_agent(ledger).resume_run_sync("r", SQLiteStore(db))  # the winner, to the end
    again = make_agent(ledger).start(AgentState.of(PROMPT))
    with pytest.raises(RunFinishedError):
        checkpoint(again, store, saved=stale)
    assert load_run(store, "r", strict=False).status == "ok"


def test_a_finished_run_is_never_written_again(db: Path, ledger: Path) -> None:
    store = SQLiteStore(db)
    start_run(make_agent(ledger), AgentState.of(PROMPT), store, run_id="r").run_sync()
    with pytest.raises(RunFinishedError):
        store.claim("r", "someone", None)
    assert issubclass(RunFinishedError, RunInUseError)


def test_a_stale_interrupted_copy_is_refused_before_its_approved_call_runs(
    db: Path, ledger: Path
) -> None:
    race.interrupted(db, ledger)
    with SQLiteStore(db) as store:
        stale = load_run(store, "r", strict=False)
        assert race.resume(db, ledger, "r") == "ok"
        with pytest.raises(RunFinishedError):
            store.claim("r", "late", stale.head)
    assert launched(ledger) == {"moon": 1, "mars": 1}


def test_decisions_that_do_not_fit_give_the_claim_back(db: Path, ledger: Path) -> None:
    race.interrupted(db, ledger)
    with SQLiteStore(db) as store:
        with pytest.raises(ValueError, match="has type 'nope'"):
            race.make_agent(ledger).resume_run_sync("r", store, [{"type": "nope"}], unbound=True)
        with pytest.raises(ValueError, match="carries no digest"):
            race.make_agent(ledger).resume_run_sync("r", store, APPROVE)
        with pytest.raises(ValueError, match=r"Decision count \(2\) does not match"):
            race.make_agent(ledger).resume_run_sync("r", store, APPROVE * 2, unbound=True)
        assert race.resume(db, ledger, "r") == "ok"  # not refused as in use
    assert launched(ledger) == {"moon": 1, "mars": 1}


class _ReleaseFails(SQLiteStore):
    """A store that goes down as a claim is given back."""

    def release(self, run_id: str, owner: str, *, running: bool = False) -> None:
        raise OSError("the store went away")


def test_a_claim_that_cannot_be_given_back_leaves_the_refusal_as_it_is(
    db: Path, ledger: Path
) -> None:
    """The lease lapses by itself: the caller reads why the decisions were refused."""
    race.interrupted(db, ledger)
    with _ReleaseFails(db) as store, pytest.raises(ValueError, match="has type 'nope'"):
        race.make_agent(ledger).resume_run_sync("r", store, [{"type": "nope"}], unbound=True)
    assert not launched(ledger)  # nothing ran


# ---------------------------------------------------------------- lost leases


def test_a_holder_whose_lease_was_taken_stops_before_its_next_tool_batch(
    db: Path, ledger: Path
) -> None:
    """Frozen past its lease after the model's reply, the holder's next boundary (into
    the tool batch) writes nothing: it checks its lease there and pauses, its tools unrun."""
    store = SQLiteStore(db, lease=0.2)
    run = start_run(make_agent(ledger), AgentState.of(PROMPT), store, run_id="r")
    while run.state != "interrupt_check":
        run.step_sync()
    time.sleep(0.3)  # frozen past the lease; another process takes the run over
    taker = asyncio.run(restore_run(make_agent(ledger), "r", SQLiteStore(db, lease=5)))
    assert run.step_sync().dest == "executing"  # no checkpoint here: a lease check
    run.run_sync()
    assert run.trace.path.endswith("interrupt_check executing paused")
    assert str(run.agent_state.pause_reason).startswith("checkpoint_failed: RunInUseError")
    assert launched(ledger) == Counter()  # the holder ran no tool
    taker.run_sync()
    assert launched(ledger) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}


def test_a_failed_renewal_stops_the_holder_at_its_next_boundary(db: Path, ledger: Path) -> None:
    store = SQLiteStore(db, lease=0.2)
    run = start_run(make_agent(ledger), AgentState.of(PROMPT), store, run_id="r")
    run.step_sync()
    time.sleep(0.3)
    SQLiteStore(db).claim("r", "another-host:1:x", None)  # another host took it over
    run.step_sync()  # the model call: its reply's checkpoint is refused
    run.run_sync()
    assert run.agent_state.status == "paused"
    assert launched(ledger) == Counter()  # no tool ran


def test_a_directory_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        SQLiteStore(tmp_path)


def test_runs_resume_racing_on_the_command_line_runs_the_approved_tool_once(
    db: Path, ledger: Path
) -> None:
    race.interrupted(db, ledger)
    with SQLiteStore(db) as store:
        state = load_run(store, "r", strict=False).agent_state
    assert state is not None
    # The command line's decisions are bound: each approves the request it was made on.
    approve = [d.to_data() for d in Approval.of(state.interrupt_data).approve_all()]
    command = [
        sys.executable,
        "-c",
        "import sys; from agentfsm._cli._main import main; sys.exit(main(sys.argv[1:]))",
        "runs",
        "resume",
        "r",
        "--db",
        str(db),
        "--agent",
        "tests._race_worker:agent",
        "--decisions",
        json.dumps(approve),
    ]
    env = {**os.environ, "AGENTFSM_TEST_LEDGER": str(ledger)}
    racers = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    codes = []
    for racer in racers:
        _, err = racer.communicate(timeout=60)
        assert racer.returncode in (0, 2), err
        assert err.count(b"\n") <= 1 and b"Traceback" not in err, err
        codes.append(racer.returncode)
    # One racer approves moon and the run asks anew, for mars; a racer that comes later
    # holds a decision on moon's request, which decides nothing about mars.
    assert sorted(codes) == [0, 2, 2]
    assert launched(ledger) == {"moon": 1}
    with SQLiteStore(db) as store:
        saved = load_run(store, "r", strict=False)
    assert saved.status == "interrupted"
    assert saved.trace.path == (
        "interrupt_check executing propagating until_check deciding expanding calling "
        "interrupt_check interrupted"
    )


# ---------------------------------------------------------------- a resume's claim


def _gated(db: Path, published: list[str], script: list[Any]) -> Any:
    """An agent whose one tool, gated, tries to take the run from another process as it runs."""
    from agentfsm import Agent, HumanInTheLoop, tool
    from agentfsm.providers import ScriptedModel

    @tool
    def publish(text: str) -> str:
        """Publish."""
        try:
            with SQLiteStore(db) as other:
                other.claim("r", "intruder", None)
            published.append(f"{text}: taken by another")
        except RunInUseError:
            published.append(f"{text}: held")
        return f"published {text}"

    return Agent(ScriptedModel(script), [publish], middleware=[HumanInTheLoop({"publish": True})])


def test_a_resumed_approval_holds_the_run_while_its_calls_run(tmp_path: Path) -> None:
    from agentfsm.providers import call_tool, say

    db, published = tmp_path / "runs.db", list[str]()
    with SQLiteStore(db) as store:
        run = start_run(
            _gated(db, published, [call_tool("publish", text="one")]),
            AgentState.of("go"),
            store,
            run_id="r",
        )
        run.run_sync()
        assert run.agent_state.status == "interrupted"
        agent = _gated(db, published, [say("done")])
        state = agent.resume_run_sync("r", store, APPROVE, unbound=True)
    assert (state.status, published) == ("ok", ["one: held"])


def test_a_resume_whose_run_went_on_since_it_was_read_is_refused(tmp_path: Path) -> None:
    """Read, then another process answers the same approval (and the run asks again):
    the claim compares the head it read, and the stale copy runs nothing."""
    from agentfsm.providers import call_tool, say

    db, published = tmp_path / "runs.db", list[str]()

    class _Overtaken(SQLiteStore):
        def claim(self, run_id: str, owner: str, head: str | None) -> None:
            def other() -> None:
                agent = _gated(db, published, [call_tool("publish", text="two")])
                with SQLiteStore(db) as store:
                    assert agent.resume_run_sync(run_id, store, APPROVE, unbound=True).status == (
                        "interrupted"
                    )

            thread = threading.Thread(target=other)  # its own event loop
            thread.start()
            thread.join()
            super().claim(run_id, owner, head)

    with SQLiteStore(db) as store:
        first = _gated(db, published, [call_tool("publish", text="one")])
        start_run(first, AgentState.of("go"), store, run_id="r").run_sync()
    with _Overtaken(db) as store, pytest.raises(RunInUseError) as info:
        _gated(db, published, [say("x")]).resume_run_sync("r", store, APPROVE, unbound=True)
    assert str(info.value) == (
        "Run 'r' went on in another process after it was read here; this copy stops so the "
        "two do not splice. Load it again to see where it is."
    )
    assert published == ["one: held"]  # the other process's call only
    # The stale copy took nothing: the run goes on at once, answered anew.
    with SQLiteStore(db) as store:
        agent = _gated(db, published, [say("done")])
        assert agent.resume_run_sync("r", store, APPROVE, unbound=True).status == "ok"
    assert published == ["one: held", "two: held"]


def test_from_its_claim_on_a_resume_holds_the_run(tmp_path: Path) -> None:
    """Before the answer enters the machine (its middleware's hooks run), the run is
    this process's: another's claim is refused."""
    from agentfsm import Agent, HumanInTheLoop, tool
    from agentfsm.providers import ScriptedModel, call_tool, say

    db, tried = tmp_path / "runs.db", list[str]()

    class Intruder:
        def before_model(self, state: AgentState) -> AgentState:
            try:
                with SQLiteStore(db) as other:
                    other.claim("r", "intruder", None)
                tried.append("taken by another")
            except RunInUseError:
                tried.append("held")
            return state

    @tool
    def publish(text: str) -> str:
        """Publish."""
        return f"published {text}"

    def agent(script: list[Any], *middleware: Any) -> Agent:
        gate = HumanInTheLoop({"publish": True})
        return Agent(ScriptedModel(script), [publish], middleware=[gate, *middleware])

    with SQLiteStore(db) as store:
        start_run(
            agent([call_tool("publish", text="one")]), AgentState.of("go"), store, run_id="r"
        ).run_sync()
        state = agent([say("done")], Intruder()).resume_run_sync("r", store, APPROVE, unbound=True)
    assert (state.status, tried) == ("ok", ["held"])
