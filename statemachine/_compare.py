"""Two saved runs' paths step by step, and the first step where they part.

``agentfsm runs compare`` prints it and the studio's compare page draws it. Steps are
numbered as the run page numbers them (1 is a run's first transition, over every
segment). Two steps are the same when they take the same edge and leave the same
conversation; a run forked from another shares its parent's steps up to the fork.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from ._messages import Message
from ._trace import Transition
from .store import SavedRun

__all__ = ["Comparison", "Step", "compare_runs"]

#: How two runs' steps at one number relate: the same, the same edge with another
#: conversation, another edge, or a step only one of them took.
Likeness = Literal["same", "conversation", "edge", "missing"]


@attrs.frozen
class Step:
    """One step of one run: its number, its segment, and the edge it took."""

    number: int
    segment: int
    source: str
    trigger: str
    dest: str
    #: The step's conversation, as compared (role, text, calls and results).
    said: tuple[str, ...] = attrs.field(repr=False, eq=False)

    @property
    def edge(self) -> str:
        return f"{self.source} --{self.trigger}--> {self.dest}"


@attrs.frozen
class Side:
    """One of the two runs, as the comparison shows it."""

    run_id: str
    status: str
    state: str
    machine: str
    forked_from: tuple[str, int] | None
    steps: tuple[Step, ...]

    def line(self, name: str) -> str:
        parent = (
            f", forked from {self.forked_from[0]} at step {self.forked_from[1]}"
            if self.forked_from
            else ""
        )
        return (
            f"{name}  run {self.run_id}: {self.status} at {self.state}, {len(self.steps)} steps "
            f"on {self.machine}{parent}"
        )


@attrs.frozen
class Row:
    """The two runs' steps at one number."""

    number: int
    a: Step | None
    b: Step | None
    likeness: Likeness


@attrs.frozen
class Comparison:
    """Two runs aligned step by step; ``parted`` is the first step where they differ."""

    a: Side
    b: Side
    rows: tuple[Row, ...]
    #: The first step number whose row is not the same, or None when the runs agree.
    parted: int | None

    @property
    def why(self) -> str:
        """How the runs part, in words."""
        if self.parted is None:
            return "the two runs take the same path with the same conversation"
        row = self.rows[self.parted - 1]
        if row.likeness == "missing":
            longer, shorter = ("A", "B") if row.a is not None else ("B", "A")
            return f"they part at step {row.number}: {shorter} ends there, {longer} goes on"
        if row.likeness == "conversation":
            return (
                f"they part at step {row.number}: both take {_edge(row.a)}, "
                "with another conversation"
            )
        return f"they part at step {row.number}: A takes {_edge(row.a)}, B {_edge(row.b)}"

    def lines(self) -> list[str]:
        """The comparison as text: both runs, where they part, and the steps side by side
        (``=`` the same, ``~`` the same edge with another conversation, ``≠`` another edge
        or a step only one run took, ``>`` the first step that differs)."""
        width = max([len(_edge(r.a)) for r in self.rows] + [1])
        out = [self.a.line("A"), self.b.line("B"), self.why]
        if self.a.machine != self.b.machine:
            out.append(f"the runs are of two machines: {self.a.machine} and {self.b.machine}")
        out.append(f"     {'step':>4}  {'A'.ljust(width)}  B")
        for row in self.rows:
            mark = ">" if row.number == self.parted else " "
            sign = {"same": "=", "conversation": "~", "edge": "≠", "missing": "≠"}[row.likeness]
            right = "" if row.likeness == "same" else _edge(row.b)
            out.append(f"{mark} {sign}  {row.number:>4}  {_edge(row.a).ljust(width)}  {right}")
        return [line.rstrip() for line in out]

    def as_json(self) -> dict[str, Any]:
        """Plain JSON, for a page or a script."""
        return {
            "a": _side_json(self.a),
            "b": _side_json(self.b),
            "parted": self.parted,
            "why": self.why,
            "rows": [
                {
                    "number": r.number,
                    "a": None if r.a is None else r.a.edge,
                    "b": None if r.b is None else r.b.edge,
                    "likeness": r.likeness,
                }
                for r in self.rows
            ],
        }


def _edge(step: Step | None) -> str:
    return "-" if step is None else step.edge


def _side_json(side: Side) -> dict[str, Any]:
    return {
        "run_id": side.run_id,
        "status": side.status,
        "state": side.state,
        "machine": side.machine,
        "forked_from": None if side.forked_from is None else list(side.forked_from),
        "steps": len(side.steps),
    }


def _said(message: Message) -> str:
    """What a message says, as compared: not its metadata (timings, ids, usage)."""
    return json.dumps(
        [
            message.role,
            message.text,
            [[c.name, dict(c.arguments)] for c in message.tool_calls],
            [[r.name, r.text, r.is_error] for r in message.tool_results],
        ],
        sort_keys=True,
        default=str,
    )


def _steps(saved: SavedRun) -> tuple[Step, ...]:
    out: list[Step] = []
    said: dict[int, str] = {}
    for segment, trace in enumerate(saved.traces):
        for t in trace:
            out.append(_step(len(out) + 1, segment, t, said))
    return tuple(out)


def _step(number: int, segment: int, t: Transition, said: dict[int, str]) -> Step:
    texts = []
    for message in t.chain.messages:
        text = said.get(id(message))
        if text is None:
            text = said[id(message)] = _said(message)
        texts.append(text)
    return Step(
        number=number,
        segment=segment,
        source=t.source,
        trigger=t.trigger,
        dest=t.dest,
        said=tuple(texts),
    )


def _side(saved: SavedRun) -> Side:
    return Side(
        run_id=saved.run_id,
        status=saved.status,
        state=saved.state,
        machine=saved.trace.machine,
        forked_from=saved.forked_from,
        steps=_steps(saved),
    )


def _likeness(a: Step | None, b: Step | None) -> Likeness:
    if a is None or b is None:
        return "missing"
    if (a.source, a.trigger, a.dest) != (b.source, b.trigger, b.dest):
        return "edge"
    return "same" if a.said == b.said else "conversation"


def compare_runs(a: SavedRun, b: SavedRun) -> Comparison:
    """``a`` and ``b`` side by side, step by step."""
    left, right = _side(a), _side(b)
    pairs: Sequence[tuple[Step | None, Step | None]] = list(
        itertools.zip_longest(left.steps, right.steps)
    )
    rows = tuple(
        Row(number=n, a=x, b=y, likeness=_likeness(x, y)) for n, (x, y) in enumerate(pairs, 1)
    )
    parted = next((r.number for r in rows if r.likeness != "same"), None)
    return Comparison(a=left, b=right, rows=rows, parted=parted)
