"""The shared machine at scale: runs join and leave in O(1), none lingers, triggers stay real."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import weakref
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transitions import Machine, MachineError

from agentfsm import STANDARD, Agent, AgentState
from agentfsm._modes.standard import StandardMode
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.testing import assert_path
from tests.support import LOOP, add, chain_of, registered_runs


async def test_starting_and_ending_many_runs_leaves_no_model_registered() -> None:
    before = registered_runs(STANDARD)
    agents = [Agent(ScriptedModel([say(f"done {n}")])) for n in range(2000)]
    runs = [agent.start(AgentState.of("go")) for agent in agents]
    assert registered_runs(STANDARD) == before + 2000
    results = await asyncio.gather(*(run.run() for run in runs))
    assert all(type(r).__name__ == "Ok" for r in results)
    assert registered_runs(STANDARD) == before


async def test_an_abandoned_run_is_collected_and_leaves_the_machine() -> None:
    before = registered_runs(STANDARD)
    run = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("done")]), [add]).start(
        AgentState.of("go")
    )
    await run.step()
    await run.step()
    assert run.state == "interrupt_check" and not run.done
    assert registered_runs(STANDARD) == before + 1
    gone = weakref.ref(run)
    del run
    gc.collect()
    assert gone() is None
    assert len(STANDARD.machine.models) == before


async def test_a_parked_run_keeps_no_copy_of_the_state_it_was_started_with() -> None:
    """A run waiting on its model holds its chain, not the state it was given (the
    chain has its messages): thousands of parked runs would each keep one."""
    gate = asyncio.Event()
    asked = asyncio.Event()

    async def slow(messages: Any) -> Any:
        asked.set()
        await gate.wait()
        return say("done")

    given = AgentState.of("go", topic="x")
    gone = weakref.ref(given)
    task = asyncio.create_task(Agent(ScriptedModel(slow)).execute(given, max_runs=3))
    del given
    await asyncio.wait_for(asked.wait(), 5)
    gc.collect()
    assert gone() is None
    gate.set()
    final = await task
    assert final.status == "ok"
    assert [(m.role, m.text) for m in final.messages] == [("user", "go"), ("assistant", "done")]
    assert final.state == {"topic": "x"}


class _Counted:
    """A model that counts how often the machine compares it with another."""

    comparisons = 0
    state: str

    def __eq__(self, other: object) -> bool:
        _Counted.comparisons += 1
        return self is other

    def __hash__(self) -> int:
        return id(self)


def test_joining_and_leaving_do_not_look_at_the_other_runs() -> None:
    table = STANDARD.machine
    crowd = [_Counted() for _ in range(3000)]
    table.add_model(crowd, initial="expanding")
    try:
        _Counted.comparisons = 0
        newcomer = _Counted()
        table.add_model(newcomer, initial="expanding")
        table.remove_model(newcomer)
        # A list would compare the newcomer with every run on add and on remove.
        assert _Counted.comparisons <= 4
    finally:
        table.remove_model(crowd)


def test_removing_twice_or_a_stranger_is_harmless() -> None:
    class Cursor:
        state: str

    cursor = Cursor()
    STANDARD.machine.add_model(cursor, initial="calling")
    STANDARD.machine.remove_model(cursor)
    STANDARD.machine.remove_model(cursor)
    STANDARD.machine.remove_model(Cursor())
    assert cursor not in STANDARD.machine.models


def _stock() -> Machine:
    return Machine(
        model=None,
        states=list(STANDARD.states),
        transitions=[
            {"trigger": e.trigger, "source": e.source, "dest": e.dest} for e in STANDARD.edges
        ],
        initial=None,
        auto_transitions=False,
    )


_STOCK = _stock()
_TRIGGERS = sorted({e.trigger for e in STANDARD.edges})


@settings(max_examples=200, deadline=None)
@given(
    entry=st.sampled_from(sorted(STANDARD.states)),
    triggers=st.lists(st.sampled_from(_TRIGGERS), max_size=20),
)
def test_lean_triggers_move_runs_exactly_as_stock_transitions(
    entry: str, triggers: list[str]
) -> None:
    class Cursor:
        state: str

    lean, stock = Cursor(), Cursor()
    STANDARD.machine.add_model(lean, initial=entry)
    _STOCK.add_model(stock, initial=entry)
    try:
        for trigger in triggers:
            outcomes: list[object] = []
            for machine, model in ((STANDARD.machine, lean), (_STOCK, stock)):
                try:
                    outcomes.append(machine.events[trigger].trigger(model))
                except MachineError as exc:
                    outcomes.append(str(exc))
            assert outcomes[0] == outcomes[1]
            assert lean.state == stock.state
    finally:
        STANDARD.machine.remove_model(lean)
        _STOCK.remove_model(stock)


def _hook(table: Any, where: str, seen: list[str]) -> None:
    machine = table.machine
    note = lambda *_: seen.append(where)  # noqa: E731
    if where == "machine.prepare_event":
        machine.prepare_event = [note]
    elif where == "machine.before_state_change (in place)":
        machine.before_state_change.append(note)
    elif where == "transition.before":
        machine.events["expanded"].transitions["expanding"][0].add_callback("before", note)
    elif where == "source.on_exit":
        machine.get_state("expanding").add_callback("exit", note)
    elif where == "machine.finalize_event":
        machine.finalize_event = [note]


@pytest.mark.parametrize(
    "where",
    [
        "machine.prepare_event",
        "machine.before_state_change (in place)",
        "transition.before",
        "source.on_exit",
        "machine.finalize_event",
    ],
)
def test_a_run_on_a_hooked_machine_takes_the_stock_path(where: str) -> None:
    table = attrs.evolve(STANDARD, name="hooked")
    seen: list[str] = []
    _hook(table, where, seen)
    run = StandardMode(table).start(chain_of(ScriptedModel([say("hi")])))
    run.run_sync()
    assert_path(run, f"{LOOP} ok")
    assert seen and seen[0] == where


def test_a_long_run_costs_the_same_memory_per_transition() -> None:
    """Every transition keeps its chain, and consecutive chains share their messages."""

    def held(rounds: int) -> float:
        agent = Agent(
            ScriptedModel([call_tool("add", a=1, b=n) for n in range(rounds)] + [say("done")]),
            [add],
        )
        gc.collect()
        tracemalloc.start()
        try:
            run = agent.start(AgentState.of("go"), max_runs=rounds + 2)
            run.run_sync()
            gc.collect()
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(run.trace) == 7 * (rounds + 1)
        return size / len(run.trace)

    held(5)
    short, long = held(20), held(160)
    # Copies of the conversation per transition would make the long run's
    # per-transition cost grow eight-fold; shared ones keep it flat.
    assert long < 1.5 * short


def test_a_callback_added_after_a_trigger_fired_still_runs() -> None:
    """Lean events keep each source's destination; adding a callback forgets them."""
    table = attrs.evolve(STANDARD, name="late_callbacks").machine

    class Cursor:
        state: str

    cursor = Cursor()
    seen: list[str] = []
    table.add_model(cursor, initial="expanding")
    try:
        table.events["expanded"].trigger(cursor)  # the lean path, remembered
        assert cursor.state == "calling" and seen == []
        cursor.state = "expanding"
        table.get_state("calling").add_callback("enter", lambda: seen.append("enter"))
        table.events["expanded"].trigger(cursor)
        assert seen == ["enter"]
        cursor.state = "expanding"
        table.after_state_change = [lambda: seen.append("after")]
        table.events["expanded"].trigger(cursor)
        assert seen == ["enter", "enter", "after"]
        table.add_transition("expanded", "calling", "error", conditions=[lambda: False])
        table.events["expanded"].trigger(cursor)  # two transitions from calling now: stock path
        assert cursor.state == "calling"
    finally:
        table.remove_model(cursor)
