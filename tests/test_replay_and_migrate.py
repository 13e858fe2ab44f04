"""Replaying saved runs of every shape, and ``runs migrate`` across machines."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import agentfsm._machine as m
from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    Edge,
    Failed,
    HumanInTheLoop,
    Message,
    OtherMachineError,
    ToolCall,
    ToolResult,
    start_run,
)
from agentfsm._cli._main import main
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore, load_run
from agentfsm.versions import check_resume, compatible, replay
from tests.support import add

LOOP = "expanding calling interrupt_check executing propagating until_check deciding"


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(m, "_DECLARED", {k: dict(v) for k, v in m._DECLARED.items()})
    yield


def _agent(*replies: object, gated: bool = False) -> Agent:
    script = list(replies) or [call_tool("add", a=1, b=2), say("3")]
    middleware = [HumanInTheLoop({"add": True})] if gated else []
    return Agent(ScriptedModel(script), [add], middleware=middleware)


def _noting() -> object:
    def _note(result: object, opts: object = None) -> object:
        return result

    return STANDARD.insert(
        "noting",
        (_note,),
        after="expanding",
        name="standard_noting",
        edges=(Edge("noting", "error", on=Failed, trigger="failed", why="it failed"),),
    )


# ---------------------------------------------------------------- replay


def test_a_paused_run_replays_on_its_machine_as_recorded(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    run = start_run(_agent(), AgentState.of("1+2?"), store, run_id="p")
    run.request_pause("deploying")
    run.run_sync()
    report = replay(load_run(store, "p", strict=False), STANDARD)
    assert report.agrees, str(report)
    assert report.replayed == ("expanding", "paused")
    assert (report.replies, report.model_calls) == (0, 0)


def test_a_paused_then_resumed_run_replays_segment_by_segment(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    run = start_run(_agent(), AgentState.of("1+2?"), store, run_id="p")
    while run.state != "interrupt_check":
        run.step_sync()
    run.request_pause("deploying")
    run.run_sync()
    assert _agent(say("3")).resume_run_sync("p", store).status == "ok"
    saved = load_run(store, "p", strict=False)
    assert [t.path for t in saved.traces] == [
        "expanding calling interrupt_check paused",
        "interrupt_check executing propagating until_check deciding "
        "expanding calling interrupt_check executing propagating until_check deciding ok",
    ]
    report = replay(saved, STANDARD)
    assert report.agrees, str(report)
    assert report.replayed == tuple(s for t in saved.traces for s in t.states)
    assert (report.replies, report.model_calls) == (2, 2)
    assert type(report.result).__name__ == "Ok"
    parted = replay(saved, _noting())  # type: ignore[arg-type]
    assert (parted.index, parted.replayed[1]) == (1, "noting")


def test_a_cut_run_replays_as_far_as_it_went(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", lease=0)
    run = start_run(_agent(), AgentState.of("1+2?"), store, run_id="c")
    while run.state != "propagating":
        run.step_sync()
    saved = load_run(store, "c", strict=False)
    assert not saved.done
    report = replay(saved, STANDARD)
    assert report.agrees, str(report)
    assert report.replayed == tuple(saved.trace.states)
    assert report.result is None  # cut off, as the recording was


def test_a_run_started_from_tool_results_replays_from_them(tmp_path: Path) -> None:
    asked = AgentState.of("1+2?")
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    messages = (
        *asked.messages,
        Message.assistant("", tool_calls=(call,)),
        Message.tool((ToolResult("c1", "add", "3"),)),
    )
    store = SQLiteStore(tmp_path / "runs.db")
    start_run(
        _agent(say("3")), attrs.evolve(asked, messages=messages), store, run_id="t"
    ).run_sync()
    saved = load_run(store, "t", strict=False)
    assert saved.trace.entry == "propagating"
    report = replay(saved, STANDARD)
    assert report.agrees, str(report)
    assert report.replayed[:2] == ("propagating", "until_check")
    assert (report.replies, report.model_calls) == (1, 1)


def test_an_interrupted_then_approved_run_replays_on_its_machine(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    start_run(_agent(gated=True), AgentState.of("1+2?"), store, run_id="h").run_sync()
    assert replay(load_run(store, "h", strict=False), STANDARD).agrees
    _agent(say("3"), gated=True).resume_run_sync("h", store, [{"type": "approve"}], unbound=True)
    saved = load_run(store, "h", strict=False)
    assert [t.path.split()[-1] for t in saved.traces] == ["interrupted", "ok"]
    report = replay(saved, STANDARD)
    assert report.agrees, str(report)
    assert not report.unrecorded_calls


def test_replay_on_the_command_line_agrees_for_a_paused_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        run = start_run(_agent(), AgentState.of("1+2?"), store, run_id="p")
        run.request_pause("deploying")
        run.run_sync()
    spec = "agentfsm:STANDARD"
    assert main(["runs", "replay", "p", "--db", str(db), "--machine", spec]) == 0
    assert "the replay agrees: 2 states, expanding paused" in capsys.readouterr().out


# ---------------------------------------------------------------- runs migrate

_OTHER = """
from agentfsm import STANDARD

OTHER = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="cli_other")
"""


def test_runs_migrate_refuses_a_run_of_another_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cli_other.py").write_text(_OTHER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_other", raising=False)
    import cli_other  # type: ignore[import-not-found]

    db = tmp_path / "runs.db"
    with SQLiteStore(db, lease=0) as store:
        other = Agent(
            ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add], machine=cli_other.OTHER
        )
        run = start_run(other, AgentState.of("1+2?"), store, run_id="o")
        while run.state != "propagating":
            run.step_sync()
    saved = load_run(SQLiteStore(db), "o", strict=False)
    with pytest.raises(OtherMachineError, match="of the cli_other machine, not the standard"):
        check_resume(saved, STANDARD, compatible)
    to = ["runs", "migrate", "--db", str(db), "--to", "agentfsm:STANDARD"]
    assert main(to) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "o: refused: the run is of the cli_other machine, not the standard machine: no policy "
        "moves a run onto another machine (--to agentfsm:STANDARD)"
    )
    again = load_run(SQLiteStore(db), "o", strict=False)  # left as it was, and loadable
    assert [t.machine for t in again.traces] == ["cli_other"]
    assert again.trace.path == " ".join(LOOP.split()[:5])
