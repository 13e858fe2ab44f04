"""The table itself: well formed, and the shared machine built from it honours it."""

from __future__ import annotations

import attrs
import pytest
from transitions import MachineError

from agentfsm import STANDARD, MachineTable


def test_one_edge_per_source_and_trigger() -> None:
    keys = [(e.source, e.trigger) for e in STANDARD.edges]
    assert len(keys) == len(set(keys))
    assert all(e.why for e in STANDARD.edges)


def test_every_state_is_reachable_and_every_working_state_can_end() -> None:
    seen = set(STANDARD.entries.values())
    frontier = list(seen)
    while frontier:
        for dest in STANDARD.successors[frontier.pop()].values():
            if dest not in seen:
                seen.add(dest)
                frontier.append(dest)
    assert seen == set(STANDARD.states)
    for state in STANDARD.working:
        assert set(STANDARD.successors[state].values()) & {"paused", "error"}
    for terminal in STANDARD.terminals:
        assert STANDARD.successors[terminal] == {}


def test_the_machine_is_built_once_and_refuses_illegal_moves() -> None:
    assert STANDARD.machine is STANDARD.machine

    class Cursor:
        state: str

    cursor = Cursor()
    STANDARD.machine.add_model(cursor, initial="expanding")
    try:
        assert not hasattr(cursor, "expanded")  # nothing is bound onto a run
        STANDARD.machine.events["expanded"].trigger(cursor)
        assert cursor.state == "calling"
        with pytest.raises(MachineError):
            STANDARD.machine.events["loop"].trigger(cursor)
        assert cursor.state == "calling"
    finally:
        STANDARD.machine.remove_model(cursor)


def test_callbacks_added_to_a_machine_still_run() -> None:
    table = attrs.evolve(STANDARD, name="copy")
    seen: list[str] = []
    table.machine.after_state_change = [lambda: seen.append("after")]
    table.machine.get_state("calling").add_callback("enter", lambda: seen.append("enter"))

    class Cursor:
        state: str

    cursor = Cursor()
    table.machine.add_model(cursor, initial="expanding")
    table.machine.events["expanded"].trigger(cursor)
    assert cursor.state == "calling" and seen == ["enter", "after"]
    table.machine.remove_model(cursor)


def test_is_path() -> None:
    assert STANDARD.is_path(["expanding", "calling", "error"])
    assert STANDARD.is_path(["expanding", "calling", "error"], ["expanded", "failed"])
    assert not STANDARD.is_path(["expanding", "calling", "error"], ["expanded", "paused"])
    assert not STANDARD.is_path(["calling", "error"])
    assert not STANDARD.is_path(["expanding", "executing"])
    assert isinstance(STANDARD, MachineTable)
