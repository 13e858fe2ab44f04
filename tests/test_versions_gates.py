"""Machine versions meet approvals: every guard knows the gate by its declared effect.

A run holding a gated call nobody decided on (resting before the approval state
with the call pending, paused with it, or interrupted at the gate) must never
reach a state that runs tools without passing a state that asks for approval,
whatever the steps are called and however the run re-enters the new table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import agentfsm._machine as m
from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    Edge,
    HumanInTheLoop,
    MachineChangedError,
    MachineTable,
    effects,
    start_run,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import PipelineResult, execute_tools, state_effects
from agentfsm.store import SQLiteStore, load_run
from agentfsm.versions import check_resume, compatible, mapped, resuming

RAN: list[str] = []


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(m, "_DECLARED", {k: dict(v) for k, v in m._DECLARED.items()})
    RAN.clear()
    yield


@tool
def publish(text: str) -> str:
    """Publish a note (needs a human's approval)."""
    RAN.append(text)
    return f"published {text}"


def _agent(table: MachineTable, *replies: Any) -> Agent:
    model = ScriptedModel(list(replies) or [call_tool("publish", text="hi"), say("done")])
    return Agent(model, [publish], machine=table, middleware=[HumanInTheLoop({"publish": True})])


@effects("tools")
def run_the_calls(result: PipelineResult, opts: Mapping[str, Any]) -> Any:
    """``execute_tools`` under another name: a wrapper, as a user writes one."""
    return execute_tools(result, opts)


def _renamed(table: MachineTable, old: str, new: str, name: str, **changes: Any) -> MachineTable:
    """``table`` with the state ``old`` called ``new``; ``changes`` replace fields."""

    def r(state: str) -> str:
        return new if state == old else state

    steps = {r(s): v for s, v in table.steps.items()}
    steps.update(changes.pop("steps", {}))
    return MachineTable(
        name=name,
        steps=steps,
        terminals=table.terminals,
        entries=changes.pop("entries", {k: r(v) for k, v in table.entries.items()}),
        edges=[
            Edge(r(e.source), r(e.dest), on=e.on, trigger=e.trigger, why=e.why) for e in table.edges
        ],
        default_edges=False,
        **changes,
    )


def _resting_at_the_gate(db: Path, table: MachineTable) -> None:
    """A run of ``table`` whose process died with a gated call pending, before the gate."""
    store = SQLiteStore(db, lease=0)
    run = start_run(_agent(table), AgentState.of("publish hi"), store, run_id="r")
    while run.state != "interrupt_check":
        run.step_sync()
    store.close()


def test_the_gate_and_the_tool_states_are_read_from_effects() -> None:
    wrapped = _renamed(
        STANDARD, "executing", "running", "gate_wrapped", steps={"running": (run_the_calls,)}
    )
    found = state_effects(wrapped)
    assert [s for s, k in found.items() if "approval" in k] == ["interrupt_check"]
    assert [s for s, k in found.items() if "tools" in k] == ["running"]


def test_a_mapping_onto_a_wrapped_tool_step_is_refused_naming_the_state(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    one = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="gate_wrapped")
    _resting_at_the_gate(db, one)
    two = _renamed(
        one, "executing", "running", "gate_wrapped", steps={"running": (run_the_calls,)}, version=2
    )
    with pytest.raises(MachineChangedError) as caught:
        mapped({"interrupt_check": "running", "executing": "running"}, old=one, new=two)
    assert "'interrupt_check' -> 'running' lets a call that needs approval run" in str(caught.value)
    # Onto the gate itself, the run goes on and asks.
    policy = mapped({"executing": "running"}, old=one, new=two)
    with resuming(policy):
        state = _agent(two).resume_run_sync("r", SQLiteStore(db))
    assert (state.status, RAN) == ("interrupted", [])
    assert state.interrupt_data["action_requests"][0]["tool_name"] == "publish"
    assert load_run(SQLiteStore(db), "r", strict=False).traces[-1].states == [
        "interrupt_check",
        "interrupted",
    ]


def _paused_with_a_gated_call(db: Path, table: MachineTable) -> None:
    """A run of ``table`` paused right after the model asked for a gated call."""
    store = SQLiteStore(db)
    run = start_run(_agent(table), AgentState.of("publish hi"), store, run_id="p")
    while run.state != "calling":
        run.step_sync()
    run.step_sync()  # the reply, with its call, is saved
    run.request_pause("deploying")
    run.run_sync()
    assert load_run(store, "p", strict=False).status == "paused"
    store.close()


def test_compatible_sees_an_entry_that_skips_the_gate(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    one = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="gate_entry")
    _paused_with_a_gated_call(db, one)
    entries = {**one.entries, "pending tool calls": "executing"}
    two = _renamed(one, "", "", "gate_entry", entries=entries, version=2)
    saved = load_run(SQLiteStore(db), "p", strict=False)
    with pytest.raises(MachineChangedError, match="entry 'pending tool calls'") as caught:
        check_resume(saved, two, compatible)
    assert "'executing'" in str(caught.value) and "approval" in str(caught.value)
    with resuming(compatible), pytest.raises(MachineChangedError, match="pending tool calls"):
        _agent(two, say("done")).resume_run_sync("p", SQLiteStore(db))
    assert RAN == []
    # The entry change is named, also with no policy.
    with pytest.raises(MachineChangedError, match="entries changed 'pending tool calls'"):
        check_resume(saved, two)


def test_compatible_takes_an_entry_change_that_keeps_the_gate(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    one = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="gate_kept")
    _paused_with_a_gated_call(db, one)
    two = _renamed(one, "interrupt_check", "reviewing", "gate_kept", version=2)
    saved = load_run(SQLiteStore(db), "p", strict=False)
    with pytest.raises(MachineChangedError, match="Not compatible"):
        check_resume(saved, two, compatible)  # its path passed interrupt_check, gone in v2
    three = one.replace(
        "propagating", STANDARD.steps["propagating"][:1], name="gate_kept", version=3
    )
    assert check_resume(saved, three, compatible).policy == "compatible"
    with resuming(compatible):
        state = _agent(three, say("done")).resume_run_sync("p", SQLiteStore(db))
    assert (state.status, RAN) == ("interrupted", [])


def test_a_run_forged_to_rest_at_a_renamed_tools_state_is_asked_again(tmp_path: Path) -> None:
    """The saved run says the gate let the call through to the state that runs the calls
    (a wrapped ``execute_tools``): the restore path finds that state by its effect."""
    from tests.support import edit_saved, edit_store

    table = _renamed(
        STANDARD, "executing", "running", "gate_cut", steps={"running": (run_the_calls,)}
    )
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        start_run(_agent(table), AgentState.of("publish hi"), store, run_id="r").run_sync()
    edit_saved(db, "transitions", 2, lambda r: r.update(trigger="clear", dest="running"))
    edit_store(db, "UPDATE runs SET result = NULL")
    with SQLiteStore(db) as store:
        state = _agent(table).resume_run_sync("r", store)
        traces = load_run(store, "r", strict=False).traces
    assert (state.status, RAN) == ("interrupted", [])
    assert [t.path for t in traces] == [
        "expanding calling interrupt_check running",
        "interrupt_check interrupted",
    ]


def test_approval_gap_reads_effects_not_names() -> None:
    from agentfsm import Message, ToolCall
    from agentfsm._invariants import approval_gap

    table = _renamed(
        STANDARD, "executing", "running", "gate_gap", steps={"running": (run_the_calls,)}
    )
    call = ToolCall("c1", "publish", {"text": "hi"})
    reply = Message.assistant("", tool_calls=(call,))
    gate = [HumanInTheLoop({"publish": True})]
    assert approval_gap(reply, (), "running", gate, table) == [call]
    assert approval_gap(reply, (), "executing", gate, STANDARD) == [call]
    assert approval_gap(reply, (reply,), "interrupt_check", gate, table) == []  # it asks
    assert approval_gap(reply, (), "interrupt_check", gate, table) == [call]  # it would not see
    assert approval_gap(reply, (), "propagating", gate, table) == []  # no way on runs it
    assert approval_gap(reply, (), "running", [], table) == []  # nothing is gated
