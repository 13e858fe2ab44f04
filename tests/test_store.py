"""Saved runs: checkpoints at every boundary, crashes, resumes elsewhere, failing stores."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    Approval,
    FormatError,
    HumanInTheLoop,
    LLMChain,
    Message,
    Ok,
    Paused,
    ResumeError,
    RunExistsError,
    RunInUseError,
    RunNotFoundError,
    Trace,
    restore_run,
    start_run,
    tool,
)
from agentfsm._cli import _runs as runs_cli
from agentfsm._modes import StandardMode
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import (
    Checkpointer,
    Deletes,
    Leases,
    SavedRun,
    SQLiteStore,
    Store,
    StoreWrite,
    checkpoint,
    load_run,
)
from tests._crash_worker import PROMPT, make_agent
from tests.support import add, as_format, edit_store, saved_rows

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "tools.log"


def worker(mode: str, db: Path, log: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    """The crash worker in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "tests._crash_worker", mode, str(db), str(log), run_id],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def executions(log: Path) -> Counter[str]:
    """How often each ``start NOTE`` / ``done NOTE`` line was written."""
    return Counter(log.read_text().splitlines()) if log.exists() else Counter()


def whole_path(saved: SavedRun) -> None:
    """Each segment is a path of the machine, and the conversation lost and doubled nothing."""
    for trace in saved.traces:
        assert STANDARD.is_path(trace.states, trace.triggers), trace.path
    roles = [m.role for m in saved.chain.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    ids = [r.tool_call_id for m in saved.chain.messages for r in m.tool_results]
    assert ids == ["c1", "c2"]
    assert saved.chain.last_message is not None
    assert saved.chain.last_message.text == "done"


# ---------------------------------------------------------------- crash and resume


def test_killed_right_after_a_checkpointed_tool_the_tool_never_runs_again(
    db: Path, log: Path
) -> None:
    crashed = worker("kill-after-executed", db, log, "r1")
    assert crashed.returncode == -signal.SIGKILL
    with SQLiteStore(db) as store:
        before = load_run(store, "r1", strict=False)
    assert (before.status, before.state) == ("running", "propagating")
    assert before.trace.transitions[-1].trigger == "executed"
    assert executions(log) == {"start one": 1, "done one": 1}

    resumed = worker("resume", db, log, "r1")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "ok"
    # exactly once: the checkpointed result of "one" was not produced again
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}
    with SQLiteStore(db) as store:
        after = load_run(store, "r1", strict=False)
    assert after.status == "ok" and len(after.traces) == 1
    assert after.trace.edges[: len(before.trace)] == before.trace.edges
    assert STANDARD.is_path(after.trace.states, after.trace.triggers)
    whole_path(after)


def test_killed_inside_a_tool_the_tool_runs_again_on_resume(db: Path, log: Path) -> None:
    crashed = worker("kill-in-tool", db, log, "r2")
    assert crashed.returncode == -signal.SIGKILL
    with SQLiteStore(db) as store:
        before = load_run(store, "r2", strict=False)
    # the last boundary written is the reply's: its calls pending, no result saved
    assert before.state == "interrupt_check"
    assert executions(log) == {"start one": 1}

    resumed = worker("resume", db, log, "r2")
    assert resumed.returncode == 0, resumed.stderr
    # at least once: the call in flight ran again; it finished once
    assert executions(log) == {"start one": 2, "done one": 1, "start two": 1, "done two": 1}
    with SQLiteStore(db) as store:
        after = load_run(store, "r2", strict=False)
    assert after.status == "ok"
    assert after.trace.edges[: len(before.trace)] == before.trace.edges
    whole_path(after)


def test_a_draining_pause_resumed_by_another_process_ends_ok(db: Path, log: Path) -> None:
    drained = worker("drain", db, log, "r3")
    assert drained.returncode == 0, drained.stderr
    with SQLiteStore(db) as store:
        paused = load_run(store, "r3", strict=False)
        assert [r.summary for r in store.runs()] == ["draining"]
    assert paused.status == "paused"
    assert paused.agent_state is not None
    assert paused.agent_state.pause_reason == "draining"

    resumed = worker("resume", db, log, "r3")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"status": "ok", "pause_reason": None}
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}
    with SQLiteStore(db) as store:
        after = load_run(store, "r3", strict=False)
    assert after.status == "ok"
    assert len(after.traces) == 2  # the pause ended segment 1; the resume entered afresh
    assert after.traces[0].edges == paused.trace.edges
    assert after.traces[1].entry == "propagating"
    assert "pause_reason" not in after.chain.custom_context
    whole_path(after)


# ---------------------------------------------------------------- in one process


def test_every_boundary_is_saved_with_its_options(db: Path, log: Path) -> None:
    store = SQLiteStore(db)
    agent = make_agent(log)
    run = start_run(agent, AgentState.of(PROMPT), store, until_tool_success="record", max_runs=7)
    checkpointer = Checkpointer.of(run)
    seen, written = [], []
    while not run.done:
        before = len(run.chain.messages)
        run.step_sync()
        seen.append(load_run(store, checkpointer.run_id, tools=agent.tools).state)
        if run.done or len(run.chain.messages) != before:
            written.append(run.state)
    # only the boundaries a resume needs: a reply, tool results, the end
    assert set(seen) <= {run.trace.entry, *written} and seen[-1] == "ok"
    assert written == ["interrupt_check", "propagating", "ok"]  # of 7 transitions
    saved = load_run(store, checkpointer.run_id, models=[agent.model], tools=agent.tools)
    assert saved.options == {"until_tool": ["record"], "require_tool_success": True, "max_runs": 7}
    assert saved.result == run.result and isinstance(saved.result, Ok)
    assert saved.agent_state == run.agent_state
    assert saved.trace == run.trace
    assert [t.chain for t in saved.trace] == [t.chain for t in run.trace]
    assert checkpointer.writes == len(written) + 1  # and the first, at the entry


def test_restore_rebuilds_the_run_at_its_state_and_goes_on(db: Path, log: Path) -> None:
    store = SQLiteStore(db, lease=0)  # the abandoned run stands for a dead process
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="mid")
    for _ in range(8):  # into the second loop: calling
        run.step_sync()
    restored = asyncio.run(restore_run(make_agent(log), "mid", SQLiteStore(db)))
    # the last boundary written is the tool results'; the pure states after it are redone
    assert (restored.state, run.state) == ("propagating", "calling")
    assert restored.trace.transitions == run.trace.transitions[:4]
    assert restored.chain.custom_context == run.chain.custom_context  # the run count goes on
    restored.run_sync()
    assert restored.agent_state.status == "ok"
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}


def test_an_interrupted_run_resumes_with_decisions(db: Path, log: Path) -> None:
    def gated() -> Agent:
        agent = make_agent(log)
        return Agent(agent.model, agent.tools, middleware=[HumanInTheLoop({"record": True})])

    store = SQLiteStore(db)
    run = start_run(gated(), AgentState.of(PROMPT), store, run_id="hitl")
    run.run_sync()
    assert run.agent_state.status == "interrupted"
    with pytest.raises(ResumeError, match="resume it with an answer"):
        asyncio.run(restore_run(gated(), "hitl", store))
    state = gated().resume_run_sync("hitl", store, [{"type": "approve"}], unbound=True)
    assert state.status == "interrupted"  # the second call needs approval too
    state = gated().resume_run_sync("hitl", store, [{"type": "approve"}], unbound=True)
    assert state.status == "ok"
    saved = load_run(store, "hitl", strict=False)
    # Each answer enters the machine at the state that asked; the approved call runs
    # at executing, a transition of the resumed segment that names the decisions.
    assert [t.path for t in saved.traces] == [
        "expanding calling interrupt_check interrupted",
        "interrupt_check executing propagating until_check deciding expanding calling "
        "interrupt_check interrupted",
        "interrupt_check executing propagating until_check deciding expanding calling "
        "interrupt_check executing propagating until_check deciding ok",
    ]
    assert [t.transitions[1].detail for t in saved.traces[1:]] == [
        {"tools": ["record"], "errors": 0, "decisions": {"c1": "approve"}},
        {"tools": ["record"], "errors": 0, "decisions": {"c2": "approve"}},
    ]
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}
    assert saved.steps == sum(len(t) for t in saved.traces)
    assert store.runs()[0].steps == saved.steps
    whole_path(saved)
    rows = [index for kind, _, index, _ in saved_rows(db, "hitl") if kind == "messages"]
    assert rows == list(range(len(saved.chain.messages)))  # each message saved once


def test_runs_that_are_over_or_missing_are_not_resumed(db: Path, log: Path) -> None:
    store = SQLiteStore(db)
    start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="done").run_sync()
    with pytest.raises(ResumeError, match="ended ok: there is nothing to resume"):
        asyncio.run(restore_run(make_agent(log), "done", store))
    with pytest.raises(RunNotFoundError):
        asyncio.run(restore_run(make_agent(log), "nope", store))


def test_a_store_from_a_newer_format_is_refused(db: Path) -> None:
    SQLiteStore(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value = 'agentfsm/4' WHERE key = 'format'")
    con.commit()
    con.close()
    with pytest.raises(FormatError, match="newer agentfsm"):
        SQLiteStore(db)


async def test_resume_run_is_async_too(db: Path, log: Path) -> None:
    store = SQLiteStore(db)
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="a")
    run.request_pause("draining")
    await run.run()
    state = await make_agent(log).resume_run("a", store)
    assert state.status == "ok"


def test_a_run_paused_after_a_reply_runs_that_replys_tools_on_resume(db: Path, log: Path) -> None:
    store = SQLiteStore(db)
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, should_pause=lambda: True)
    run.run_sync()
    assert run.trace.path == "expanding calling paused"
    run_id = Checkpointer.of(run).run_id
    assert make_agent(log).resume_run_sync(run_id, store).status == "ok"
    saved = load_run(store, run_id, strict=False)
    assert saved.traces[1].entry == "interrupt_check"
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}
    whole_path(saved)


def test_a_bare_mode_run_checkpoints_and_restores(db: Path) -> None:
    model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    store = SQLiteStore(db, lease=0)  # the abandoned run stands for a dead process
    mode = StandardMode()
    run = mode.start(LLMChain(model, tools=[add]).add_message(Message.user("1+2?")), max_runs=5)
    checkpoint(run, store, run_id="bare", options={"max_runs": 5, "should_pause": None})
    for _ in range(4):
        run.step_sync()
    saved = load_run(store, "bare", models=[model], tools=[add])
    assert saved.options == {"max_runs": 5}
    restored = mode.restore(saved.chain, saved.state, saved.trace, saved.options)
    checkpoint(restored, store, saved=saved)
    result = restored.run_sync()
    assert isinstance(result, Ok) and result.chain.last_message is not None
    assert result.chain.last_message.text == "3"
    assert model.calls == 2
    assert load_run(store, "bare", models=[model], tools=[add]).trace == restored.trace


# ---------------------------------------------------------------- failing stores


class FlakyStore:
    """A store whose writes fail while ``down`` (or once, at the write numbered ``fail_at``)."""

    def __init__(self, inner: SQLiteStore, fail_at: int | None = None) -> None:
        self.inner = inner
        self.down = False
        self.fail_at = fail_at
        self.calls = 0

    def write(self, run_id: str, write: StoreWrite) -> None:
        self.calls += 1
        if self.down or self.calls == self.fail_at:
            raise sqlite3.OperationalError("disk I/O error")
        self.inner.write(run_id, write)

    def read(self, run_id: str) -> Any:
        return self.inner.read(run_id)

    def runs(self) -> Any:
        return self.inner.runs()


def test_a_failed_write_pauses_the_run_and_loses_nothing(db: Path, log: Path) -> None:
    # writes: 1 at start, then one per transition; the fifth saves `executed`
    store = FlakyStore(SQLiteStore(db), fail_at=5)
    assert isinstance(store, Store)
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="f")
    result = run.run_sync()
    assert isinstance(result, Paused)
    assert run.agent_state.pause_reason == "checkpoint_failed: OperationalError: disk I/O error"
    assert run.trace.path.endswith("executing propagating paused")
    saved = load_run(store, "f", tools=run.chain.tools)
    assert saved.trace == run.trace  # the next write carried the transition the failed one had
    assert make_agent(log).resume_run_sync("f", store).status == "ok"
    assert executions(log)["done one"] == 1


def test_a_store_keeps_leases_by_its_protocol(db: Path) -> None:
    with SQLiteStore(db) as store:
        assert isinstance(store, Leases) and isinstance(store, Deletes)
        flaky = FlakyStore(store)
        assert isinstance(flaky, Store)
        assert not isinstance(flaky, Leases) and not isinstance(flaky, Deletes)


def test_a_store_that_stays_down_keeps_the_run_in_memory_until_flushed(db: Path, log: Path) -> None:
    store = FlakyStore(SQLiteStore(db))
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="down")
    for _ in range(3):
        run.step_sync()  # to executing
    store.down = True
    run.run_sync()
    checkpointer = Checkpointer.of(run)
    assert checkpointer.error is not None
    assert run.trace.path.endswith("executing propagating paused")
    assert load_run(store, "down", strict=False).state == "interrupt_check"  # the last good one
    store.down = False
    assert checkpointer.flush() and checkpointer.error is None
    saved = load_run(store, "down", strict=False)
    assert (saved.status, saved.trace) == ("paused", run.trace)
    assert make_agent(log).resume_run_sync("down", store).status == "ok"
    assert executions(log)["done one"] == 1


def test_a_failed_terminal_write_leaves_the_boundary_before(db: Path, log: Path) -> None:
    store = FlakyStore(SQLiteStore(db, lease=0))  # the ended run stands for a dead process
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="t")
    while run.state != "deciding" or len(run.trace.where("deciding")) < 2:
        run.step_sync()
    store.down = True
    run.step_sync()
    assert isinstance(run.result, Ok)  # the run ended: there is nothing left to pause
    assert Checkpointer.of(run).error is not None
    saved = load_run(store, "t", strict=False)
    assert (saved.status, saved.state) == ("running", "interrupt_check")  # the last reply
    store.down = False
    done = executions(log)
    resumed = asyncio.run(restore_run(make_agent(log), "t", store))
    resumed.run_sync()  # redoes the pure states after the tool results: no tool runs
    assert resumed.trace.edges == run.trace.edges
    assert executions(log) == done


# ---------------------------------------------------------------- the runs command


def cli(*argv: str) -> tuple[int, str]:
    import argparse

    parser = argparse.ArgumentParser(prog="agentfsm")
    runs_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    out = io.StringIO()
    return args.handler(args, out), out.getvalue()


def test_runs_list_show_and_resume(
    db: Path, log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SQLiteStore(db)
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="cli")
    run.request_pause("draining")
    run.run_sync()

    status, out = cli("runs", "list", "--db", str(db))
    assert status == 0
    assert out.splitlines()[1].split()[:4] == ["cli", "paused", "paused", "1"]
    assert "draining" in out

    status, out = cli("runs", "show", "cli", "--db", str(db))
    assert status == 0
    assert "expanding --paused--> paused" in out and "paused: draining" in out

    status, out = cli("runs", "show", "cli", "--json", "--db", str(db))
    assert json.loads(out)["traces"][0]["format"] == "agentfsm/1"

    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    status, out = cli(
        "runs", "resume", "cli", "--db", str(db), "--agent", "tests._crash_worker:agent"
    )
    assert status == 0, out
    assert "run cli: ok at ok" in out and "answer: done" in out

    status, _ = cli(
        "runs", "resume", "cli", "--db", str(db), "--agent", "tests._crash_worker:agent"
    )
    assert status == 2
    assert "nothing to resume" in capsys.readouterr().err
    status, _ = cli("runs", "show", "x", "--db", str(db.with_name("missing.db")))
    assert status == 2
    assert "no store" in capsys.readouterr().err


def test_runs_resume_takes_decisions_for_the_demo_agent(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm._demo import DEMO_PROMPT, demo_agent

    monkeypatch.chdir(db.parent)  # the demo agent writes summary.md into the current folder

    run = start_run(demo_agent(delay=0, stream=False), AgentState.of(DEMO_PROMPT), SQLiteStore(db))
    run.run_sync()
    assert run.agent_state.status == "interrupted"
    run_id = Checkpointer.of(run).run_id
    # The command line takes decisions bound to the requests shown: a digest-less one is
    # refused, and nothing runs.
    status, out = cli(
        "runs", "resume", run_id, "--db", str(db), "--decisions", '[{"type": "approve"}]'
    )
    assert status == 2
    assert "decision 0 carries no digest" in capsys.readouterr().err
    assert not (db.parent / "summary.md").exists()
    assert load_run(SQLiteStore(db), run_id, strict=False).status == "interrupted"
    approval = Approval.of(run.agent_state.interrupt_data)
    decisions = json.dumps([d.to_data() for d in approval.approve_all()])
    status, out = cli("runs", "resume", run_id, "--db", str(db), "--decisions", decisions)
    assert status == 0, out
    assert f"run {run_id}: ok" in out
    saved = load_run(SQLiteStore(db), run_id, strict=False)
    assert saved.agent_state is not None
    assert "summary.md" in saved.agent_state.state["files"]
    assert (db.parent / "summary.md").is_file()


def test_trace_helpers_see_saved_traces_as_traces(db: Path, log: Path) -> None:
    run = start_run(make_agent(log), AgentState.of(PROMPT), SQLiteStore(db), run_id="x")
    run.run_sync()
    saved = load_run(SQLiteStore(db), "x", strict=False)
    assert isinstance(saved.trace, Trace)
    assert saved.trace.path == run.trace.path
    assert os.path.exists(db)
    assert isinstance(saved.chain.messages[0], Message)


def test_agent_resume_run_continues_a_paused_run(tmp_path: Any) -> None:
    """``agent.resume_run(run_id, store)``: the one way to continue a saved run."""
    from agentfsm import Agent, AgentState, start_run
    from agentfsm.providers import ScriptedModel, call_tool, say
    from agentfsm.store import SQLiteStore
    from tests.support import add

    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    with SQLiteStore(tmp_path / "runs.db") as store:
        run = start_run(agent, AgentState.of("go"), store, run_id="r1", should_pause=lambda: True)
        run.run_sync()
        assert run.agent_state.status == "paused"
        state = agent.resume_run_sync("r1", store)
    assert state.status == "ok" and state.messages[-1].text == "3"


# ---------------------------------------------------------------- one place at a time


def test_a_new_run_with_a_taken_id_is_refused_unless_replaced(db: Path, log: Path) -> None:
    store = SQLiteStore(db)
    start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="same").run_sync()
    with pytest.raises(RunExistsError, match="'same' exists"):
        start_run(make_agent(log), AgentState.of("another"), store, run_id="same")
    assert load_run(store, "same", strict=False).status == "ok"  # untouched
    run = start_run(make_agent(log), AgentState.of("another"), store, run_id="same", replace=True)
    run.run_sync()
    saved = load_run(store, "same", strict=False)
    assert len(saved.traces) == 1 and saved.chain.messages[0].text == "another"


def test_two_resumers_of_one_run_exactly_one_proceeds(db: Path, log: Path) -> None:
    store = SQLiteStore(db)
    run = start_run(
        make_agent(log), AgentState.of(PROMPT), store, run_id="r", should_pause=lambda: True
    )
    run.run_sync()
    assert load_run(store, "r", strict=False).status == "paused"
    first = asyncio.run(restore_run(make_agent(log), "r", SQLiteStore(db)))
    with pytest.raises(RunInUseError, match="one place at a time"):
        asyncio.run(restore_run(make_agent(log), "r", SQLiteStore(db)))
    first.run_sync()
    assert load_run(store, "r", strict=False).status == "ok"
    with pytest.raises(ResumeError, match="ended ok"):
        asyncio.run(restore_run(make_agent(log), "r", SQLiteStore(db)))
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}


def test_a_lease_expires_so_a_holder_that_hangs_blocks_no_one_for_ever(db: Path, log: Path) -> None:
    store = SQLiteStore(db, lease=0.2)
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="hang")
    run.step_sync()  # then the holder hangs
    with pytest.raises(RunInUseError):
        asyncio.run(restore_run(make_agent(log), "hang", SQLiteStore(db, lease=0.2)))
    time.sleep(0.3)
    taken = asyncio.run(restore_run(make_agent(log), "hang", SQLiteStore(db, lease=0.2)))
    taken.run_sync()
    run.run_sync()  # the old holder's next write is refused: it pauses instead of splicing
    assert run.result is not None and run.agent_state.pause_reason.startswith(
        "checkpoint_failed: RunInUseError"
    )
    assert load_run(store, "hang", strict=False).status == "ok"


def test_a_holder_whose_lease_was_taken_over_is_refused_while_the_taker_runs(
    db: Path, log: Path
) -> None:
    store = SQLiteStore(db, lease=0.2)
    run = start_run(make_agent(log), AgentState.of(PROMPT), store, run_id="taken")
    run.step_sync()
    time.sleep(0.3)  # the holder hangs past its lease
    taker = asyncio.run(restore_run(make_agent(log), "taken", SQLiteStore(db)))
    run.run_sync()  # the old holder renews nothing: its next write finds another owner
    assert run.agent_state.pause_reason.startswith("checkpoint_failed: RunInUseError")
    taker.run_sync()
    saved = load_run(store, "taken", strict=False)
    assert saved.status == "ok"
    whole_path(saved)


# ---------------------------------------------------------------- checkpoint rows


def _edges_of_a_run() -> list[Any]:
    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    run = agent.start(AgentState.of("go"))
    run.run_sync()
    return list(run.trace.transitions)


class _Rows:
    """A store that keeps the last agent state row it was given."""

    agent_state: str | None = None

    def write(self, run_id: str, write: StoreWrite) -> None:
        self.agent_state = write.agent_state or self.agent_state


@attrs.frozen
class _Where:
    """Detail data json cannot write as is: the converter's path."""

    file: str
    line: int


def test_checkpoint_rows_are_the_documents_packer_writes() -> None:
    from agentfsm import Transition
    from agentfsm._serialization import Packer, compact_json, converter

    transitions = _edges_of_a_run()
    chain = transitions[-1].chain
    transitions += [
        Transition("a", "b", "c", chain, 0.0, {"nested": ("tuple", 1), "n": None}),
        Transition("a", "b", "c", chain, 2, {"odd": {1: "int key"}}),
        Transition("a", "b", "c", chain, float("inf"), None),
    ]
    texts, docs = Packer(), Packer()
    for transition in transitions:
        text, doc = texts.transition_text(transition), docs.transition(transition)
        if isinstance(doc.get("elapsed"), float) and math.isfinite(doc["elapsed"]):
            assert f'"elapsed":{doc["elapsed"]:.6f}' in text  # kept to the microsecond
            doc["elapsed"] = round(doc["elapsed"], 6)
        assert json.loads(text) == json.loads(compact_json(doc))
    assert texts.message_texts() == [compact_json(d) for d in docs.message_docs()]
    assert texts.context_texts() == [compact_json(d) for d in docs.context_docs()]

    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    run = agent.start(AgentState.of("go", topic="sums"))
    rows = _Rows()
    checkpointer = checkpoint(run, rows)
    run.run_sync()
    state = run.agent_state
    assert state.messages and state.state
    whole = compact_json(converter.unstructure(state, AgentState))
    assert checkpointer._packer._texts  # the messages' rows are reused, not written again
    assert rows.agent_state == whole
    assert Packer().agent_state_text(state) == whole
    assert Packer().agent_state_text(AgentState()) == compact_json(
        converter.unstructure(AgentState(), AgentState)
    )

    where = Transition("a", "b", "c", chain, 0.5, {"at": _Where("x.py", 3)})
    assert json.loads(Packer().transition_text(where)) == Packer().transition(where)
    assert json.loads(Packer().transition_text(where))["detail"] == {
        "at": {"file": "x.py", "line": 3}
    }
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    looped = Transition("a", "b", "c", chain, 0.5, cyclic)
    with pytest.raises((ValueError, RecursionError)):  # as the converter's path refuses it
        Packer().transition(looped)
    with pytest.raises((ValueError, RecursionError)):
        Packer().transition_text(looped)


def test_a_store_made_before_the_log_loads_and_its_runs_go_on(db: Path, log: Path) -> None:
    # A run paused after its first reply, saved in a table per kind of row.
    with sqlite3.connect(db) as con:
        con.executescript((ROOT / "tests" / "golden" / "store-tables.sql").read_text())
    con.close()
    with SQLiteStore(db, read_only=True) as reader:  # as `agentfsm runs` opens it: no log yet
        assert [(r.run_id, r.status, r.steps) for r in reader.runs()] == [("old", "paused", 2)]
        assert load_run(reader, "old", strict=False).steps == 2
    store = SQLiteStore(db)
    saved = load_run(store, "old", strict=False)
    assert (saved.status, saved.state, saved.steps) == ("paused", "paused", 2)
    assert [m.role for m in saved.chain.messages] == ["user", "assistant"]
    resumed = asyncio.run(restore_run(make_agent(log), "old", store))
    resumed.run_sync()
    saved = load_run(store, "old", strict=False)
    assert saved.status == "ok"
    assert [t.entry for t in saved.traces] == ["expanding", "interrupt_check"]
    whole_path(saved)
    (info,) = store.runs()
    assert (info.status, info.state, info.steps, info.segments) == ("ok", "ok", saved.steps, 2)
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}
    store.delete("old")
    with sqlite3.connect(db) as con:
        left = [
            con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("segments", "messages", "contexts", "transitions", "log", "runs")
        ]
    con.close()
    assert left == [0] * 6


def _file_format(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return str(con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0])


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_store_is_read_and_its_first_write_makes_it_current(
    db: Path, log: Path, version: int
) -> None:
    """Format 1 kept each row as text in its checkpoint's document, format 2 every chain
    in full; both are read, and the first write makes the file format 3."""
    agent = make_agent(log)
    with SQLiteStore(db) as store:
        run = start_run(agent, AgentState.of(PROMPT), store, run_id="r")

        async def reply_then_pause() -> None:
            while run.state != "interrupt_check":  # the first reply is saved
                await run.step()
            run.request_pause("later")
            await run.step()

        asyncio.run(reply_then_pause())
        before = load_run(store, "r", strict=False)
    assert _file_format(db) == "agentfsm/3"
    docs = [json.loads(text) for (text,) in sqlite3.connect(db).execute("SELECT doc FROM log")]
    assert all(isinstance(doc.get("messages", [[0, {}]])[0][1], dict) for doc in docs)
    chains = [row["chain"] for doc in docs for _, row in doc.get("transitions", [])]
    assert "llm" in chains[0] and any("llm" not in chain for chain in chains)  # grown ones
    as_format(db, version)
    with SQLiteStore(db, read_only=True) as reader:  # reading changes nothing
        assert load_run(reader, "r", strict=False).traces == before.traces
    with SQLiteStore(db) as store:  # neither does opening it to write
        assert _file_format(db) == f"agentfsm/{version}"
        again = load_run(store, "r", strict=False)
        assert (again.status, again.state, again.steps) == (before.status, "paused", before.steps)
        assert [m.text for m in again.chain.messages] == [m.text for m in before.chain.messages]
        resumed = asyncio.run(restore_run(agent, "r", store))
        resumed.run_sync()
        assert _file_format(db) == "agentfsm/3"  # the resume's first write
        done = load_run(store, "r", strict=False)
    assert done.status == "ok"
    assert [t.entry for t in done.traces] == ["expanding", done.traces[1].entry]
    whole_path(done)
    assert executions(log) == {"start one": 1, "done one": 1, "start two": 1, "done two": 1}


@pytest.mark.parametrize("moved", [False, True], ids=["one loop", "moved to another loop"])
def test_a_holder_awaiting_a_long_tool_keeps_its_lease(db: Path, moved: bool) -> None:
    """The lease (0.3 s here) outlives no checkpoint, but a step in flight renews it:
    a second resumer is refused while the tool runs, and takes over once the holder's
    host stops stepping. A run stepped on one event loop, then run on another, keeps
    renewing it there."""
    napped: list[float] = []

    @tool
    async def nap(seconds: float) -> str:
        """Sleep."""
        napped.append(seconds)
        await asyncio.sleep(seconds)
        return "rested"

    def agent() -> Agent:
        return Agent(ScriptedModel([call_tool("nap", seconds=1.2), say("done")]), [nap])

    run = start_run(agent(), AgentState.of("rest"), SQLiteStore(db, lease=0.3), run_id="nap")
    if moved:
        run.step_sync()  # on the sync doors' own loop

    async def main() -> None:
        holder = asyncio.create_task(run.run())
        await asyncio.sleep(0.8)  # the tool naps; the last checkpoint's lease ran out long ago
        assert run.busy and run.state == "executing"
        with pytest.raises(RunInUseError, match="one place at a time"):
            await restore_run(agent(), "nap", SQLiteStore(db, lease=0.3))
        await holder
        assert run.agent_state.status == "ok"

    asyncio.run(main())
    assert napped == [1.2]
    assert load_run(SQLiteStore(db), "nap", strict=False).status == "ok"


def test_a_checkpoint_renews_the_lease_once_half_of_it_is_spent(db: Path) -> None:
    store = SQLiteStore(db, lease=60.0)
    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    run = start_run(agent, AgentState.of("go"), store, run_id="r")

    def lease() -> float:
        with contextlib.closing(sqlite3.connect(db)) as con:
            return float(con.execute("SELECT lease_until FROM runs").fetchone()[0])

    granted = lease()
    run.step_sync()
    run.step_sync()  # the reply: a checkpoint
    assert lease() == granted  # more than half left: the run's row is not written
    (info,) = store.runs()  # a listing still sees how far the run got
    assert (info.state, info.steps) == ("interrupt_check", 2)
    edit_store(db, "UPDATE runs SET lease_until = ?", time.time() + 20)
    run.step_sync()
    run.step_sync()  # the tool's result: a checkpoint, now with a renewal
    assert lease() > time.time() + 50
    assert run.run_sync().__class__ is Ok
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("SELECT status, owner, lease_until FROM runs").fetchone() == (
            "ok",
            None,
            None,
        )


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE messages SET idx = 'x' WHERE idx = 1",
        "UPDATE transitions SET seq = -1 WHERE seq = 1",
        "UPDATE segments SET segment = 'x'",
    ],
)
def test_an_edited_row_of_a_store_made_before_the_log_is_a_format_error(
    db: Path, edit: str
) -> None:
    with contextlib.closing(sqlite3.connect(db)) as con:
        con.executescript((ROOT / "tests" / "golden" / "store-tables.sql").read_text())
        con.execute(edit)
        con.commit()
    with SQLiteStore(db) as store, pytest.raises(FormatError, match="the store is damaged"):
        load_run(store, "old", strict=False)


def test_unheld_names_the_runs_nothing_holds_and_answers_for_one(db: Path) -> None:
    """A fork is saved running with no holder; a run stepping holds its lease; an ended
    run is held by no one but is not running. Asked of one run, the store looks at that one."""
    from agentfsm.store import fork_run

    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    with SQLiteStore(db) as store:
        start_run(agent, AgentState.of("1+2?"), store, run_id="done").run_sync()
        again = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
        held = start_run(again, AgentState.of("1+2?"), store, run_id="held")
        held.step_sync()  # expanding: its first checkpoint claims it
        fork_run(store, "done", 3, new_id="fork")
        assert store.unheld() == {"fork"}
        assert store.unheld("fork") == {"fork"}
        assert store.unheld("held") == store.unheld("done") == store.unheld("nope") == set()
        held.run_sync()
