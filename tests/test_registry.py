"""The machine registry changes through _machine's functions; what versions keeps is bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import agentfsm._machine as m
from agentfsm import STANDARD, MachineTable
from agentfsm._machine import declare, forget, machine_named, machine_versions
from agentfsm._versions import rebuild, shape_of
from agentfsm._versions._recorded import RECORDED, Recorded, _Bounded


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machines a test declares (or rebuilds) are forgotten after it."""
    monkeypatch.setattr(m, "_DECLARED", {k: dict(v) for k, v in m._DECLARED.items()})
    monkeypatch.setattr(RECORDED, "rebuilt", _Bounded(RECORDED.rebuilt.bound))
    yield


def _table(name: str, version: int = 1) -> MachineTable:
    return STANDARD.replace("deciding", STANDARD.steps["deciding"], name=name, version=version)


def test_a_table_made_is_declared_and_forget_takes_it_back() -> None:
    one, two = _table("registered"), _table("registered", 2)
    assert machine_versions("registered") == (one, two)
    assert MachineTable.named("registered", 1) is one  # the version asked for
    assert MachineTable.named("registered") is two  # none asked: the newest
    forget("registered", 2)
    assert machine_versions("registered") == (one,)
    forget("registered", 3)  # a version never declared: the others stay
    assert machine_versions("registered") == (one,)
    assert MachineTable.named("registered") is one
    forget("registered", 1)
    assert "registered" not in m._DECLARED
    forget("registered", 1)  # forgetting what is not declared is nothing
    declare(one)
    assert machine_named("registered") is one


def test_a_rebuilt_table_is_not_declared() -> None:
    one = _table("rebuilt_here")
    shape = shape_of(one)
    forget("rebuilt_here", 1)  # the code no longer declares it
    table = rebuild(shape, (STANDARD,))
    assert table.fingerprint == one.fingerprint
    assert machine_versions("rebuilt_here") == ()
    assert rebuild(shape, (STANDARD,)) is table  # found again, not made twice


def test_rebuilding_an_old_version_leaves_the_declared_ones_as_they_are() -> None:
    one = _table("moved_on")
    shape = shape_of(one)
    forget("moved_on", 1)
    two = _table("moved_on", 2)  # the code declares only v2 now
    assert rebuild(shape, (two,)).version == 1
    assert machine_versions("moved_on") == (two,)


def test_what_is_recorded_is_bounded() -> None:
    kept: _Bounded[str, int] = _Bounded(3)
    for i in range(10):
        kept.put(str(i), i)
    assert len(kept) == 3
    assert kept.get("0") is None
    assert kept.get("7") == 7  # used: kept over 8, which goes next
    kept.put("10", 10)
    assert (kept.get("8"), kept.get("7")) == (None, 7)
    assert Recorded().shapes.bound and Recorded().rebuilt.bound
