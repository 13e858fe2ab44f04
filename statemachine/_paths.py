"""Every path through a machine, and a run's path in short.

Computed from a :class:`~agentfsm.machine.MachineTable` alone: :func:`paths`
walks it from each entry to each terminal (going round the loop at most a
set number of times), :func:`compress_path` writes a run's states in short.
:mod:`agentfsm.diagrams` draws them; ``assert_path`` takes their text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from ._machine import Edge, MachineTable
from ._modes.standard import STANDARD

__all__ = ["Path", "compress_path", "loop_edges", "paths", "shared_edges", "state_label"]


def state_label(state: str) -> str:
    """A state as drawn: ``interrupt_check`` -> ``InterruptCheck`` (CamelCase in diagrams)."""
    return "".join(part.capitalize() for part in state.split("_"))


def shared_edges(table: MachineTable) -> set[Edge]:
    """Edges whose trigger, destination and why several states share ("any working state")."""
    counts = Counter((e.trigger, e.dest, e.why) for e in table.edges)
    return {e for e in table.edges if counts[(e.trigger, e.dest, e.why)] > 1}


def loop_edges(table: MachineTable = STANDARD) -> tuple[Edge, ...]:
    """Edges that go back to an earlier working state: the loop of the machine."""
    order = {s: i for i, s in enumerate(table.working)}
    return tuple(
        e
        for e in table.edges
        if e.source in order and e.dest in order and order[e.dest] <= order[e.source]
    )


@attrs.frozen
class Path:
    """One way through the machine: from an entry, along ``edges``, to a terminal.

    ``entry`` is the situation the run entered in (a key of the table's
    ``entries``); ``situation`` says in plain words what makes a run take it.
    """

    entry: str
    edges: tuple[Edge, ...]
    situation: str

    @property
    def states(self) -> tuple[str, ...]:
        return (self.edges[0].source, *(e.dest for e in self.edges))

    @property
    def triggers(self) -> tuple[str, ...]:
        return tuple(e.trigger for e in self.edges)

    @property
    def terminal(self) -> str:
        return self.edges[-1].dest

    @property
    def text(self) -> str:
        """The states as one space-separated string, as ``assert_path`` takes it."""
        return " ".join(self.states)


def _phrase(edge: Edge, shared: set[Edge]) -> str:
    """An edge's why; for a why many states share, where it happened."""
    if edge in shared:
        return f"{edge.why} (in {state_label(edge.source)})"
    return edge.why


def _situation(edges: Sequence[Edge], loops: set[Edge], shared: set[Edge]) -> str:
    """The whys of the edges that end each lap: the loop edges and the last one."""
    return "; then ".join(
        _phrase(e, shared) for i, e in enumerate(edges) if e in loops or i == len(edges) - 1
    )


def paths(table: MachineTable = STANDARD, *, loops: int = 1) -> list[Path]:
    """Every path from an entry to a terminal, going round the loop at most ``loops`` times.

    A lap (the part of a path between loop edges) visits no state twice, so
    the list is finite and each path is a different story. Paths are ordered
    by entry, then terminal (both in table order), then by the laps they take.
    """
    loop = set(loop_edges(table))
    shared = shared_edges(table)
    terminals = set(table.terminals)
    outgoing: dict[str, list[Edge]] = {s: [] for s in table.states}
    for e in table.edges:
        outgoing[e.source].append(e)
    out: list[Path] = []
    for situation, entry in table.entries.items():
        found: list[tuple[Edge, ...]] = []

        def walk(
            state: str,
            taken: tuple[Edge, ...],
            lap: frozenset[str],
            left: int,
            found: list[tuple[Edge, ...]] = found,
        ) -> None:
            for e in outgoing[state]:
                if e in loop:
                    if left:
                        walk(e.dest, (*taken, e), frozenset({e.dest}), left - 1)
                elif e.dest in terminals:
                    found.append((*taken, e))
                elif e.dest not in lap:
                    walk(e.dest, (*taken, e), lap | {e.dest}, left)

        walk(entry, (), frozenset({entry}), loops)
        order = {t: i for i, t in enumerate(table.terminals)}
        found.sort(
            key=lambda edges: (order[edges[-1].dest], sum(e in loop for e in edges), len(edges))
        )
        out += [Path(situation, edges, _situation(edges, loop, shared)) for edges in found]
    return out


def compress_path(states: Sequence[str], table: MachineTable = STANDARD) -> str:
    """A path in short: laps between loop edges as ``first … last``, repeats as ``(…)xN``.

    ``expanding calling … deciding`` three times, then ``ok``, reads
    ``(expanding … deciding)x3 ok``.
    """
    if not states:
        return ""
    loop = {(e.source, e.dest) for e in loop_edges(table)}
    body, end = list(states), None
    if body[-1] in table.terminals:
        end = body.pop()
    laps: list[list[str]] = [[]]
    for i, state in enumerate(body):
        if i and (body[i - 1], state) in loop:
            laps.append([])
        laps[-1].append(state)
    groups: list[tuple[tuple[str, ...], int]] = []
    for lap in laps:
        key = tuple(lap)
        if groups and groups[-1][0] == key:
            groups[-1] = (key, groups[-1][1] + 1)
        else:
            groups.append((key, 1))
    words = []
    for key, count in groups:
        text = " ".join(key) if len(key) <= 2 else f"{key[0]} … {key[-1]}"
        words.append(f"({text})x{count}" if count > 1 else text)
    if end is not None:
        words.append(end)
    return " ".join(w for w in words if w)
