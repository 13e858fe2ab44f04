"""Test helpers: assert the path a run took, and which edges a suite exercised.

``assert_path(run, "expanding calling interrupt_check executing propagating
until_check deciding ok")`` takes a space-separated state list, or a pattern
with groups and repetition: ``"(expanding calling interrupt_check executing
propagating until_check deciding)+ ok"`` (``+ * ?`` and ``{n}`` / ``{n,m}``);
``children={"executing": "..."}`` checks the paths of the child runs a state ran.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NoReturn, TypeAlias

import attrs

from .._hooks import global_hooks
from .._machine import Edge, MachineTable, machine_named
from .._modes.standard import STANDARD
from .._path_pattern import compile_path as _compile
from .._run import Run
from .._trace import Trace

__all__ = ["EdgeCoverage", "assert_path", "edge_coverage", "matches_path"]


def _trace(run_or_trace: Run | Trace) -> Trace:
    return run_or_trace.trace if isinstance(run_or_trace, Run) else run_or_trace


def _table(run_or_trace: Run | Trace, table: MachineTable | None) -> MachineTable:
    if table is not None:
        return table
    if isinstance(run_or_trace, Run):
        return run_or_trace.table
    return machine_named(run_or_trace.machine, version=run_or_trace.machine_version)


def matches_path(
    run_or_trace: Run | Trace, expected: str, table: MachineTable | None = None
) -> bool:
    """Whether the run's states match ``expected`` (a state list or a pattern).

    The states are those of ``table``, by default the machine the run ran on.
    """
    states = frozenset(_table(run_or_trace, table).states)
    return _compile(expected, states).fullmatch(_trace(run_or_trace).path + " ") is not None


#: What ``children=`` expects of a state's child runs: one path, or one path each.
ChildPaths: TypeAlias = str | Sequence[str]


def assert_path(
    run_or_trace: Run | Trace,
    expected: str,
    table: MachineTable | None = None,
    *,
    children: Mapping[str, ChildPaths] | None = None,
) -> None:
    """Fail with a readable diff unless the run's path matches ``expected``.

    ``children`` checks the child runs too (:func:`agentfsm.run_machine`, subagents):
    ``{"executing": "expanding calling ... ok"}`` says the transitions out of
    ``executing`` ran one child, which took that path; a list gives one path per
    child, in the order they started. Each path is matched on the child's own machine.
    """
    trace = _trace(run_or_trace)
    parent = _table(run_or_trace, table)
    if not matches_path(trace, expected, parent):
        _took_another(trace, expected)
    for state, paths in (children or {}).items():
        if state not in parent.states:
            raise ValueError(
                f"children: {state!r} is not a state of the {parent.name} machine; "
                f"states: {list(parent.states)}"
            )
        expected_paths = [paths] if isinstance(paths, str) else list(paths)
        ran = [child for t in trace.where(state) for child in t.children]
        if len(ran) != len(expected_paths):
            raise AssertionError(
                f"{state!r} ran {len(ran)} child run(s), not {len(expected_paths)}: "
                f"{[child.path for child in ran]}"
            )
        for index, (child, path) in enumerate(zip(ran, expected_paths, strict=True)):
            try:
                assert_path(child, path)
            except AssertionError as exc:
                raise AssertionError(
                    f"child {index} of {state!r} ({child.machine}): {exc}"
                ) from None


def _took_another(trace: Trace, expected: str) -> NoReturn:
    lines = [f"the run took another path than {expected!r}", "", "took:"]
    # steps count from 1, as the CLI, the run page and fork count them
    lines += [f"  {i:>3} {t.source} --{t.trigger}--> {t.dest}" for i, t in enumerate(trace, 1)]
    if not re.search(r"[()+*?{]", expected):
        lines += ["", "diff (- expected, + took):"]
        lines += [
            f"  {d}" for d in difflib.ndiff(expected.split(), trace.states) if not d.startswith("?")
        ]
    raise AssertionError("\n".join(lines))


@attrs.define
class EdgeCoverage:
    """Which edges of a table a set of traces took, and which none did."""

    table: MachineTable = STANDARD
    counts: dict[Edge, int] = attrs.field(factory=dict)
    entries: dict[str, int] = attrs.field(factory=dict)

    def add(self, run_or_trace: Run | Trace) -> None:
        trace = _trace(run_or_trace)
        self.entries[trace.entry] = self.entries.get(trace.entry, 0) + 1
        for t in trace:
            edge = self.table.edge(t.source, t.trigger)
            if edge is not None:
                self.counts[edge] = self.counts.get(edge, 0) + 1

    def extend(self, runs: Iterable[Run | Trace]) -> None:
        for run in runs:
            self.add(run)

    @property
    def missing(self) -> list[Edge]:
        """Edges of the table no trace took, in table order."""
        return [e for e in self.table.edges if e not in self.counts]

    @property
    def ratio(self) -> float:
        return len(self.counts) / len(self.table.edges)

    def report(self) -> str:
        lines = [f"{len(self.counts)}/{len(self.table.edges)} edges taken"]
        lines += [f"  never: {e.source} --{e.trigger}--> {e.dest} ({e.why})" for e in self.missing]
        return "\n".join(lines)


@contextlib.contextmanager
def edge_coverage(table: MachineTable = STANDARD) -> Iterator[EdgeCoverage]:
    """Count the edges every run started inside the block takes (when it ends)."""
    coverage = EdgeCoverage(table)
    runs = _Started()
    try:
        with global_hooks(runs):
            yield coverage
    finally:
        coverage.extend(r for r in runs.runs if r.table is table)


class _Started:
    """A global hook that keeps the runs made while it is registered."""

    def __init__(self) -> None:
        self.runs: list[Run] = []

    def run_started(self, run: Run) -> None:
        self.runs.append(run)
