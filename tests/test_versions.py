"""Machine versions: identity, diffs, resume policies, checkpoints and replay."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

import agentfsm._machine as m
from agentfsm import (
    STANDARD,
    Agent,
    AgentfsmError,
    AgentState,
    Edge,
    Failed,
    FormatError,
    MachineChangedError,
    MachineDefinitionError,
    MachineTable,
    Trace,
    start_run,
)
from agentfsm._invariants import check_traces
from agentfsm._machine import machine_named
from agentfsm._modes.standard import check_approvals
from agentfsm._serialization import dump_trace
from agentfsm._versions import MachineShape
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import PipelineResult
from agentfsm.store import SQLiteStore, load_run, load_trace
from agentfsm.versions import (
    check_resume,
    compatible,
    diff,
    mapped,
    pinned,
    replay,
    resuming,
    shape_of,
)
from tests.support import add


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machines a test declares are forgotten after it: other tests see the usual ones."""
    monkeypatch.setattr(m, "_DECLARED", {k: dict(v) for k, v in m._DECLARED.items()})
    yield


def _note(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    return result


def _v1(name: str = "versioned") -> MachineTable:
    return STANDARD.replace("deciding", STANDARD.steps["deciding"], name=name)


def _v2(name: str = "versioned", one: MachineTable | None = None) -> MachineTable:
    """v1 with a ``noting`` state after ``expanding``: the compacting shape of change."""
    return (one or machine_named(name, version=1)).insert(
        "noting",
        (_note,),
        after="expanding",
        name=name,
        version=2,
        edges=(Edge("noting", "error", on=Failed, trigger="failed", why="it failed"),),
    )


def _model() -> ScriptedModel:
    return ScriptedModel([call_tool("add", a=1, b=2), say("3")])


# ---------------------------------------------------------------- identity


def test_a_table_has_a_version_and_a_fingerprint_that_ignores_the_whys() -> None:
    assert STANDARD.version == 1
    assert len(STANDARD.fingerprint) == 16
    reworded = MachineTable(
        name="reworded",
        steps=STANDARD.steps,
        terminals=STANDARD.terminals,
        entries=STANDARD.entries,
        edges=[
            Edge(e.source, e.dest, on=e.on, trigger=e.trigger, why="said otherwise")
            for e in STANDARD.edges
        ],
        default_edges=False,
    )
    assert reworded.fingerprint == STANDARD.fingerprint
    assert _v2(one=_v1()).fingerprint != _v1().fingerprint
    renamed_step = STANDARD.replace("deciding", (_note,), name="renamed_step")
    assert renamed_step.fingerprint != STANDARD.fingerprint


def test_several_versions_of_a_name_are_declared_and_found() -> None:
    one = _v1()
    two = _v2()
    assert machine_named("versioned") is two
    assert machine_named("versioned", version=1) is one
    assert m.machine_versions("versioned") == (one, two)
    with pytest.raises(m.UnknownMachineError, match="no version 3"):
        machine_named("versioned", version=3)
    with pytest.raises(MachineDefinitionError, match="next version"):
        _v1().insert("noting", (_note,), after="expanding", name="versioned")
    with pytest.raises(MachineDefinitionError, match="version"):
        STANDARD.replace("deciding", (_note,), name="bad_version", version=0)


def test_a_run_and_its_saved_trace_carry_the_machine_identity() -> None:
    table = _v2(one=_v1())
    agent = Agent(_model(), [add], machine=table)
    run = agent.start(AgentState.of("1+2?"))
    run.run_sync()
    assert (run.trace.machine_version, run.trace.machine_fingerprint) == (2, table.fingerprint)
    again = load_trace(json.loads(json.dumps(dump_trace(run.trace))), strict=False)
    assert (again.machine_version, again.machine_fingerprint) == (2, table.fingerprint)


# ---------------------------------------------------------------- diff


def test_diff_names_states_and_edges_added_removed_and_changed() -> None:
    one = _v1()
    d = diff(one, _v2())
    assert d.states_added == ("noting",)
    assert not d.states_removed
    assert [(a[0], a[1], b[1]) for a, b in d.edges_changed] == [("expanding", "calling", "noting")]
    assert ("noting", "calling", "noting_done", "Continue") in d.edges_added
    assert "states added noting" in d.summary()
    assert "+ state noting" in d.lines()
    drawn = d.mermaid()
    assert drawn.startswith("flowchart TD")
    assert "class noting added" in drawn
    assert "stroke:#ef8f00" in drawn  # the changed edge
    back = diff(_v2(), one)
    assert back.states_removed == ("noting",)
    assert "class noting removed" in back.mermaid()
    assert diff(STANDARD, STANDARD).same and diff(STANDARD, STANDARD).summary().startswith("no")


def test_a_shape_round_trips_as_data() -> None:
    two = _v2(one=_v1())
    shape = shape_of(two)
    again = MachineShape.from_data(json.loads(json.dumps(shape.to_data())))
    assert again == shape and again.fingerprint == two.fingerprint
    with pytest.raises(ValueError, match="not a machine shape"):
        MachineShape.from_data({"name": "x"})


# ---------------------------------------------------------------- policies


def test_mapped_is_checked_when_declared() -> None:
    one = _v1()
    two = _v2()
    policy = mapped({}, old=one, new=two)  # every old state is a state of v2
    assert policy.mapping["interrupt_check"] == "interrupt_check"
    with pytest.raises(MachineChangedError, match="without its decision"):
        mapped({"interrupt_check": "executing"}, old=one, new=two)
    with pytest.raises(MachineChangedError, match="legal resume point"):
        mapped({"calling": "ok"}, old=one, new=two)
    with pytest.raises(MachineChangedError, match="'noting' is not mapped"):
        mapped({}, old=two, new=one)
    assert mapped({"noting": "calling"}, old=two, new=one).mapping["noting"] == "calling"
    with pytest.raises(MachineChangedError, match="not a state"):
        mapped({"nowhere": "calling"}, old=one, new=two)


def test_a_new_gate_is_not_skipped_by_a_mapping() -> None:
    ungated = STANDARD.replace("interrupt_check", (_note,), name="ungated")
    assert check_approvals not in ungated.steps["interrupt_check"]
    with pytest.raises(MachineChangedError, match="without its decision"):
        mapped({}, old=ungated, new=STANDARD)  # executing was never past a gate


def test_check_resume_refuses_a_change_unless_a_policy_allows_it() -> None:
    one = _v1()
    run = Agent(_model(), [add], machine=one).start(AgentState.of("1+2?"))
    run.run_sync()
    two = _v2()
    assert check_resume(run.trace, one).policy == "unchanged"
    with pytest.raises(MachineChangedError, match="states added noting") as caught:
        check_resume(run.trace, two)
    assert isinstance(caught.value, AgentfsmError) and "pinned" in str(caught.value)
    assert check_resume(run.trace, two, pinned).table is one
    with pytest.raises(MachineChangedError, match="Not compatible"):
        check_resume(run.trace, two, compatible)
    decision = check_resume(run.trace, two, mapped({}, old=one, new=two))
    assert (decision.policy, decision.state, decision.moved) == ("mapped", "ok", True)
    assert decision.diff is not None and decision.diff.states_added == ("noting",)
    with pytest.raises(MachineChangedError, match="The mapping is from"):
        check_resume(run.trace, two, mapped({}, old=two, new=two))


def test_compatible_takes_a_run_whose_path_the_new_table_has() -> None:
    one = _v1("steps_changed")
    run = Agent(_model(), [add], machine=one).start(AgentState.of("1+2?"))
    run.run_sync()
    two = one.replace("propagating", (_note,), name="steps_changed", version=2)
    decision = check_resume(run.trace, two, compatible)
    assert (decision.policy, decision.table, decision.state) == ("compatible", two, "ok")
    assert decision.diff is not None and decision.diff.states_changed == ("propagating",)


# ---------------------------------------------------------------- checkpoints


def _paused_run(store: SQLiteStore, table: MachineTable) -> None:
    run = start_run(Agent(_model(), [add], machine=table), AgentState.of("1+2?"), store, run_id="r")
    run.request_pause("deploying")
    run.run_sync()


def test_the_saved_header_records_the_machine_and_a_changed_one_is_refused(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    one = _v1()
    _paused_run(store, one)
    header = json.loads(store.read("r").headers[0])
    assert header["machine_version"] == 1
    assert header["machine_fingerprint"] == one.fingerprint
    assert MachineShape.from_data(header["machine_table"]) == shape_of(one)
    saved = load_run(store, "r", strict=False)
    assert saved.trace.machine_fingerprint == one.fingerprint
    two = _v2()
    with pytest.raises(MachineChangedError, match="states added noting"):
        Agent(_model(), [add], machine=two).resume_run_sync("r", store)
    with resuming(pinned), pytest.raises(MachineChangedError, match="pinned"):
        Agent(_model(), [add], machine=two).resume_run_sync("r", store)
    with resuming(pinned):  # an agent of the table it started on finishes it
        state = Agent(_model(), [add], machine=one).resume_run_sync("r", store)
    assert state.status == "ok"


def test_a_run_whose_edges_are_gone_is_named_changed_not_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    agent = Agent(_model(), [add], machine=_v1())
    start_run(agent, AgentState.of("1+2?"), store, run_id="r").run_sync()
    monkeypatch.delitem(m._DECLARED["versioned"], 1)  # the code now declares only v2
    _v2(one=_v1("other"))
    with pytest.raises(MachineChangedError, match="states added noting") as caught:
        load_run(store, "r", strict=False)
    assert "damaged" not in str(caught.value)


def test_a_compatible_change_resumes_under_the_policy(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    one = _v1("steps_changed")
    _paused_run(store, one)
    two = one.replace(
        "propagating", STANDARD.steps["propagating"][:1], name="steps_changed", version=2
    )
    agent = Agent(_model(), [add], machine=two)
    with pytest.raises(MachineChangedError, match="states changed propagating"):
        agent.resume_run_sync("r", store)
    with resuming(compatible):
        state = agent.resume_run_sync("r", store)
    assert state.status == "ok"
    saved = load_run(store, "r", strict=False)
    assert [t.machine_version for t in saved.traces] == [1, 2]


# ---------------------------------------------------------------- replay


def test_replay_on_the_same_table_agrees_and_calls_nothing() -> None:
    model = _model()
    run = Agent(model, [add], machine=_v1()).start(AgentState.of("1+2?"))
    run.run_sync()
    report = replay(run.trace, _v1())
    assert report.agrees and report.index is None
    assert report.replayed == tuple(run.trace.states)
    assert report.model_calls == report.replies == 2
    assert model.calls == 2  # the recorded model was not asked again
    assert not report.unrecorded_calls
    assert str(report).startswith("the replay agrees")


def test_replay_names_the_first_state_where_the_tables_part(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    agent = Agent(_model(), [add], machine=_v1())
    start_run(agent, AgentState.of("1+2?"), store, run_id="done").run_sync()
    saved = load_run(store, "done", strict=False)
    report = replay(saved, _v2())
    assert (report.index, report.recorded[1], report.replayed[1]) == (1, "calling", "noting")
    assert "parts at state 1" in str(report)
    assert report.result.__class__.__name__ == "Ok"


def test_replay_needs_a_recorded_step() -> None:
    with pytest.raises(ValueError, match="nothing to replay"):
        replay(Trace(entry="expanding", machine="versioned"), _v1())


# ---------------------------------------------------------------- the command line

_MODULE = """
from agentfsm import STANDARD, Agent, Edge, Failed
from agentfsm.providers import ScriptedModel, call_tool, say
from tests.support import add


def _note(result, opts=None):
    return result


V1 = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="cli_versioned")
V2 = V1.insert("noting", (_note,), after="expanding", name="cli_versioned", version=2,
               edges=(Edge("noting", "error", on=Failed, trigger="failed", why="it failed"),))


def agent():
    return Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add], machine=V1)
"""


def test_the_command_line_diffs_machines_and_replays_and_checks_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from agentfsm._cli._main import main

    (tmp_path / "cli_machines.py").write_text(_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_machines", raising=False)
    assert main(["machines", "diff", "cli_machines:V1", "cli_machines:V2"]) == 1
    out = capsys.readouterr().out
    assert "old: cli_versioned v1" in out and "+ state noting" in out
    assert "```mermaid" in out and "class noting added" in out
    assert main(["machines", "diff", "cli_machines:V1", "cli_machines:agent"]) == 0
    assert "no change" in capsys.readouterr().out
    assert main(["machines", "diff", "cli_machines:nothing", "cli_machines:V2"]) == 2
    assert "no attribute" in capsys.readouterr().err

    import cli_machines  # type: ignore[import-not-found]

    db = str(tmp_path / "runs.db")
    store = SQLiteStore(db)
    start_run(cli_machines.agent(), AgentState.of("1+2?"), store, run_id="r1").run_sync()
    store.close()
    assert main(["runs", "show", "r1", "--db", db]) == 0
    assert f"on cli_versioned v1 ({cli_machines.V1.fingerprint})" in capsys.readouterr().out
    assert main(["runs", "replay", "r1", "--db", db, "--machine", "cli_machines:V1"]) == 0
    assert "agrees" in capsys.readouterr().out
    assert main(["runs", "replay", "r1", "--db", db, "--machine", "cli_machines:V2"]) == 1
    assert "parts at state 1" in capsys.readouterr().out
    assert main(["runs", "migrate", "--db", db, "--to", "cli_machines:V2", "--dry-run"]) == 0
    assert "r1: needs mapping" in capsys.readouterr().out
    mapped_args = ["--policy", "mapped", "--from", "cli_machines:V1"]
    assert (
        main(["runs", "migrate", "--db", db, "--to", "cli_machines:V2", "--dry-run", *mapped_args])
        == 0
    )
    assert "r1: ok (mapped, at ok)" in capsys.readouterr().out
    bad = [*mapped_args, "--map", "interrupt_check=executing"]
    assert main(["runs", "migrate", "--db", db, "--to", "cli_machines:V2", "--dry-run", *bad]) == 2
    assert "without its decision" in capsys.readouterr().err
    assert main(["runs", "migrate", "--db", db, "--to", "cli_machines:V2"]) == 0
    assert "r1: needs mapping" in capsys.readouterr().out  # and is left as it is
    monkeypatch.delitem(m._DECLARED["cli_versioned"], 1)  # the code now declares only v2
    for command in (["runs", "show", "r1"], ["view", "r1", "--out", str(tmp_path / "r1.html")]):
        assert main([*command, "--db", db]) == 2
        assert "Changed: states added noting" in capsys.readouterr().err


def test_the_viewer_shows_the_version_and_a_migration_between_segments(tmp_path: Path) -> None:
    from agentfsm._view._model import page_data

    store = SQLiteStore(tmp_path / "runs.db")
    one = _v1("steps_changed")
    _paused_run(store, one)
    two = one.replace(
        "propagating", STANDARD.steps["propagating"][:1], name="steps_changed", version=2
    )
    with resuming(compatible):
        Agent(_model(), [add], machine=two).resume_run_sync("r", store)
    saved = load_run(store, "r", strict=False)
    data = page_data(saved.traces, two, title="r")
    assert data["version"] == f"v2 ({two.fingerprint})"
    assert [s["version"] for s in data["segments"]] == [
        f"v1 ({one.fingerprint})",
        f"v2 ({two.fingerprint})",
    ]


# ---------------------------------------------------------------- migrations


def _shrinking() -> tuple[MachineTable, MachineTable]:
    """v1 reviews tool results in a state of its own; v2 (the standard shape) has none."""
    one = STANDARD.insert(
        "reviewing",
        (_note,),
        after="executing",
        name="shrinking",
        edges=(Edge("reviewing", "error", on=Failed, trigger="failed", why="it failed"),),
    )
    two = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="shrinking", version=2)
    return one, two


def _resting_at_reviewing(db: Path, one: MachineTable) -> None:
    """A run of ``one`` whose process died right after its tool results were saved."""
    store = SQLiteStore(db, lease=0)  # the abandoned run stands for a dead process
    run = start_run(Agent(_model(), [add], machine=one), AgentState.of("1+2?"), store, run_id="r")
    while run.state != "reviewing":
        run.step_sync()
    assert load_run(store, "r", strict=False).state == "reviewing"
    store.close()


def test_a_mapped_resume_moves_the_run_in_a_new_segment(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    one, two = _shrinking()
    _resting_at_reviewing(db, one)
    agent = Agent(ScriptedModel([say("3")]), [add], machine=two)
    with pytest.raises(MachineChangedError, match="states removed reviewing"):
        agent.resume_run_sync("r", SQLiteStore(db))
    with resuming(mapped({"reviewing": "propagating"}, old=one, new=two)):
        state = agent.resume_run_sync("r", SQLiteStore(db))
    assert state.status == "ok"
    saved = load_run(SQLiteStore(db), "r", strict=False)
    assert [t.machine_version for t in saved.traces] == [1, 2]
    assert saved.traces[0].terminal == "reviewing"
    moved = saved.traces[1]
    assert (moved.migrated_from, moved.entry, moved.terminal) == ("reviewing", "propagating", "ok")
    from agentfsm._view._model import page_data

    drawn = page_data(saved.traces, two, title="r")["segments"]
    assert [s["migrated_from"] for s in drawn] == [None, "reviewing"]
    # Each segment is checked on its own table, also once the code declares only v2.
    del m._DECLARED["shrinking"][1]
    again = load_run(SQLiteStore(db), "r", strict=False)
    assert [t.machine_fingerprint for t in again.traces] == [one.fingerprint, two.fingerprint]


def test_a_forged_migration_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    one, two = _shrinking()
    _resting_at_reviewing(db, one)
    agent = Agent(ScriptedModel([say("3")]), [add], machine=two)
    with resuming(mapped({"reviewing": "propagating"}, old=one, new=two)):
        agent.resume_run_sync("r", SQLiteStore(db))
    saved = load_run(SQLiteStore(db), "r", strict=False)
    first, moved = saved.traces
    forged = attrs.evolve(moved, migrated_from="executing")
    with pytest.raises(FormatError, match="migration to 'propagating' is not one"):
        check_traces([first, forged], two, ended=True)
    with pytest.raises(FormatError, match="first segment"):
        check_traces([moved], two, ended=True)


_SHRINKING = """
from agentfsm import STANDARD, Edge, Failed


def _note(result, opts=None):
    return result


V1 = STANDARD.insert("reviewing", (_note,), after="executing", name="cli_shrinking",
                     edges=(Edge("reviewing", "error", on=Failed, trigger="failed", why="x"),))
V2 = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="cli_shrinking", version=2)
"""


def test_runs_migrate_moves_the_runs_the_policy_takes_and_leaves_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from agentfsm._cli._main import main

    (tmp_path / "cli_shrinking.py").write_text(_SHRINKING)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_shrinking", raising=False)
    import cli_shrinking  # type: ignore[import-not-found]

    one, two = cli_shrinking.V1, cli_shrinking.V2
    db = tmp_path / "runs.db"
    _resting_at_reviewing(db, one)  # run "r", resting at a state v2 lacks
    store = SQLiteStore(db)
    agent = Agent(_model(), [add], machine=one)
    start_run(agent, AgentState.of("1+2?"), store, run_id="over").run_sync()
    _paused = start_run(agent, AgentState.of("1+2?"), store, run_id="paused")
    _paused.request_pause("deploying")
    _paused.run_sync()
    store.close()
    to = ["runs", "migrate", "--db", str(db), "--to", "cli_shrinking:V2"]
    assert main(to) == 0  # compatible takes none of them: each is left
    out = capsys.readouterr().out
    assert "r: needs mapping" in out and "migrated" not in out
    policy = ["--policy", "mapped", "--from", "cli_shrinking:V1", "--map", "reviewing=propagating"]
    assert main([*to, *policy, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "r: ok (mapped, at propagating, from reviewing)\n" in out
    assert main([*to, *policy]) == 0
    out = capsys.readouterr().out
    assert "r: ok (mapped, at propagating, from reviewing): migrated to v2, at propagating" in out
    assert "over: ok (mapped, at ok): left: it ended ok" in out
    assert "paused: ok (mapped, at paused): left paused" in out
    saved = load_run(SQLiteStore(db), "r", strict=False)
    assert [(t.machine_version, t.entry, t.migrated_from) for t in saved.traces] == [
        (1, "expanding", None),
        (2, "propagating", "reviewing"),
    ]
    assert main([*to, *policy]) == 0  # moved once: now it is on v2 already
    assert "r: ok (unchanged, at propagating): left, already on" in capsys.readouterr().out
    # A later resume needs no policy, and nothing ran twice.
    model = ScriptedModel([say("3")])
    state = Agent(model, [add], machine=two).resume_run_sync("r", SQLiteStore(db))
    assert (state.status, model.calls) == ("ok", 1)
    last = load_run(SQLiteStore(db), "r", strict=False).traces[-1]
    assert (last.entry, last.states[1], last.terminal) == ("propagating", "until_check", "ok")


# ---------------------------------------------------------------- pinned, rebuilt


def _kept(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    return result


def test_pinned_rebuilds_an_undeclared_table_from_the_saved_shape(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    one = _v1("pinning")
    _paused_run(store, one)
    two = _v2("pinning", one=one)
    del m._DECLARED["pinning"][1]  # the code now declares only v2
    with pytest.raises(MachineChangedError, match="states added noting"):
        Agent(_model(), [add], machine=two).resume_run_sync("r", store)
    with resuming(pinned):
        saved = load_run(store, "r", strict=False)
        old = check_resume(saved, two, pinned).table
        assert (old.fingerprint, old.version) == (one.fingerprint, 1) and old is not one
        assert m.machine_versions("pinning") == (two,)  # rebuilt, not declared
        state = Agent(_model(), [add], machine=old).resume_run_sync("r", store)
    assert state.status == "ok"
    with resuming(pinned):
        finished = load_run(store, "r", strict=False)
    assert [t.machine_fingerprint for t in finished.traces] == [one.fingerprint] * 2


def test_pinned_refuses_when_a_step_of_the_old_table_is_gone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    steps = (*STANDARD.steps["propagating"], _kept)
    one = STANDARD.replace("propagating", steps, name="pinning_gone")
    _paused_run(store, one)
    two = one.replace("propagating", STANDARD.steps["propagating"], name="pinning_gone", version=2)
    del m._DECLARED["pinning_gone"][1]
    with resuming(pinned), pytest.raises(MachineChangedError, match="cannot be rebuilt") as e:
        load_run(store, "r", strict=False)
    assert "_kept (state propagating)" in str(e.value)
    with pytest.raises(MachineChangedError, match="cannot be rebuilt"):
        check_resume(load_run(store, "r", strict=False), two, pinned)


def test_a_compatible_resume_of_a_cut_off_run_opens_a_segment_on_the_new_table(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteStore(db, lease=0)  # the abandoned run stands for a dead process
    one = _v1("compat_moving")
    run = start_run(Agent(_model(), [add], machine=one), AgentState.of("1+2?"), store, run_id="r")
    while run.state != "propagating":
        run.step_sync()
    two = one.replace(
        "propagating", STANDARD.steps["propagating"][:1], name="compat_moving", version=2
    )
    with resuming(compatible):
        state = Agent(ScriptedModel([say("3")]), [add], machine=two).resume_run_sync(
            "r", SQLiteStore(db)
        )
    assert state.status == "ok"
    traces = load_run(SQLiteStore(db), "r", strict=False).traces
    assert [(t.machine_version, t.entry, t.migrated_from) for t in traces] == [
        (1, "expanding", None),
        (2, "propagating", "propagating"),
    ]


_POLICY_MODULE = """
from agentfsm import STANDARD, Agent
from agentfsm.providers import ScriptedModel, call_tool, say
from tests.support import add

V1 = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="cli_policy")
V2 = V1.replace("propagating", STANDARD.steps["propagating"][:2], name="cli_policy", version=2)


def reply(messages):
    return say("3") if messages[-1].role == "tool" else call_tool("add", a=1, b=2)


def agent_v1():
    return Agent(ScriptedModel(reply), [add], machine=V1)


def agent_v2():
    return Agent(ScriptedModel(reply), [add], machine=V2)
"""


def test_runs_resume_takes_a_policy_for_a_run_of_an_older_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from agentfsm._cli._main import main

    (tmp_path / "cli_policy_machines.py").write_text(_POLICY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_policy_machines", raising=False)
    import cli_policy_machines  # type: ignore[import-not-found]

    db = str(tmp_path / "runs.db")
    with SQLiteStore(db) as store:
        start_run(
            cli_policy_machines.agent_v1(),
            AgentState.of("1+2?"),
            store,
            run_id="r1",
            should_pause=lambda: True,
        ).run_sync()
    resume = ["runs", "resume", "r1", "--db", db, "--agent", "cli_policy_machines:agent_v2"]
    assert main(resume) == 2
    err = capsys.readouterr().err
    assert "states changed propagating" in err
    assert err.rstrip().endswith(
        "--agent cli_policy_machines:agent_v2 --policy compatible (or pinned)"
    )
    assert main([*resume, "--policy", "compatible"]) == 0
    assert "run r1: ok at ok" in capsys.readouterr().out
    with SQLiteStore(db) as store:
        assert [t.machine_version for t in load_run(store, "r1", strict=False).traces] == [1, 2]
