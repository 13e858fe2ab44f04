"""Tables as data: a table's shape, where its gates are, and what changed between two.

A :class:`MachineShape` is what a run depends on of a table, kept with a saved
run: states, entries, edges, each state's steps by name and by code, and each
step's declared effects (:mod:`agentfsm.effects`). The gate guards read those
effects, never step or state names: a state whose steps declare ``approval`` asks,
a state whose steps declare ``tools`` runs the pending calls.
:func:`diff` names what changed from one table to another. :mod:`agentfsm.versions`
is the face.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TypeAlias

import attrs

from ._effects import effects_of, step_effects
from ._machine import MachineTable, fingerprint_of, identity, machine_versions, step_name
from ._mermaid import Drawing, mermaid
from ._trace import Trace

__all__ = [
    "EdgeKey",
    "MachineDiff",
    "MachineShape",
    "diff",
    "entry_faults",
    "gate_fault",
    "gate_shape",
    "named_steps",
    "over",
    "shape_of",
    "skips_gate",
]

#: An edge as a fingerprint sees it: (source, dest, trigger, result type name).
EdgeKey: TypeAlias = tuple[str, str, str, str]


# ---------------------------------------------------------------- a table as data


def _effects_data(value: Any) -> Mapping[str, tuple[tuple[str, ...], ...]] | None:
    if value is None:
        return None
    return {
        str(k): tuple(tuple(sorted(str(e) for e in kinds)) for kinds in v) for k, v in value.items()
    }


def _code_data(value: Any) -> Mapping[str, tuple[str, ...]] | None:
    if value is None:
        return None
    return {str(k): tuple(str(c) for c in v) for k, v in value.items()}


@attrs.frozen
class MachineShape:
    """What a run depends on of a table, as plain data: kept with a saved run, so the
    table it ran on can be compared with today's after the code changed."""

    name: str
    version: int
    working: tuple[str, ...]
    terminals: tuple[str, ...]
    entries: Mapping[str, str]
    edges: tuple[EdgeKey, ...]
    #: Each working state's steps, by qualified name.
    steps: Mapping[str, tuple[str, ...]]
    #: Each working state's steps' declared effects, in order (:mod:`agentfsm.effects`);
    #: None in a shape saved before shapes kept them (read from the steps by name).
    effects: Mapping[str, tuple[tuple[str, ...], ...]] | None = attrs.field(
        default=None, converter=_effects_data
    )
    #: Each working state's steps' code digests (:func:`agentfsm._identity.step_code`);
    #: None in a shape saved before fingerprints covered code.
    code: Mapping[str, tuple[str, ...]] | None = attrs.field(default=None, converter=_code_data)

    @property
    def fingerprint(self) -> str:
        data: dict[str, Any] = {
            "working": sorted(self.working),
            "terminals": sorted(self.terminals),
            "entries": {k: self.entries[k] for k in sorted(self.entries)},
            "edges": sorted(list(e) for e in self.edges),
            "steps": {s: list(self.steps[s]) for s in sorted(self.steps)},
        }
        if self.code is not None:
            data["code"] = {s: list(self.code[s]) for s in sorted(self.code)}
        return fingerprint_of(data)

    @property
    def states(self) -> tuple[str, ...]:
        return (*self.working, *self.terminals)

    @property
    def successors(self) -> Mapping[str, Mapping[str, str]]:
        """``{source: {trigger: dest}}``, as :attr:`MachineTable.successors`."""
        out: dict[str, dict[str, str]] = {s: {} for s in self.states}
        for source, dest, trigger, _ in self.edges:
            out.setdefault(source, {})[trigger] = dest
        return out

    def onward(self, state: str) -> list[str]:
        """``state`` and the states its ``Continue`` edges lead through, to a loop or an end."""
        out = [state]
        while True:
            nexts = [d for s, d, _, on in self.edges if s == out[-1] and on == "Continue"]
            if not nexts or nexts[0] in out:
                return out
            out.append(nexts[0])

    def step_effects(self, state: str) -> tuple[frozenset[str], ...]:
        """The effects of ``state``'s steps, in order: as saved, or (a shape saved before
        shapes kept them) of the declared steps of that name (none for one not found)."""
        if self.effects is not None:
            return tuple(frozenset(kinds) for kinds in self.effects.get(state, ()))
        found = named_steps(self.name)
        return tuple(
            effects_of(found[n]) or frozenset() if n in found else frozenset()
            for n in self.steps.get(state, ())
        )

    def _first(self, state: str) -> str | None:
        """What a run holding pending calls meets first in ``state``'s work: ``approval``
        (a gate asks), ``tools`` (they run), ``model`` (a new reply: they are moot)."""
        for kinds in self.step_effects(state):
            for kind in ("approval", "tools", "model"):
                if kind in kinds:
                    return kind
        return None

    @property
    def gates(self) -> tuple[str, ...]:
        """The states that ask for approval (a step declared ``approval``)."""
        return tuple(s for s in self.working if any("approval" in k for k in self.step_effects(s)))

    def awaits_decision(self, state: str) -> bool:
        """Whether a run resting at ``state`` with calls pending meets an approval state
        before a state that runs tools or calls the model, on its way on (its
        ``Continue`` edges)."""
        for s in self.onward(state):
            first = self._first(s)
            if first is not None:
                return first == "approval"
        return False

    def runs_calls_ungated(self, state: str) -> bool:
        """Whether some way on from ``state`` (any edge) reaches a state that runs tools
        before a state that asks for approval (or calls the model, after which the
        calls pending at ``state`` are no longer the ones a tools step runs)."""
        seen = {state}
        queue = deque([state])
        while queue:
            at = queue.popleft()
            first = self._first(at)
            if first == "tools":
                return True
            if first is not None:
                continue
            for source, dest, _, _ in self.edges:
                if source == at and dest in self.working and dest not in seen:
                    seen.add(dest)
                    queue.append(dest)
        return False

    @property
    def gated(self) -> bool:
        return bool(self.gates)

    def to_data(self) -> dict[str, Any]:
        """The shape as JSON data (a saved run's header keeps it)."""
        return {"name": self.name, "version": self.version, **self._identity()}

    def _identity(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "working": list(self.working),
            "terminals": list(self.terminals),
            "entries": dict(self.entries),
            "edges": [list(e) for e in self.edges],
            "steps": {s: list(v) for s, v in self.steps.items()},
        }
        if self.effects is not None:
            out["effects"] = {s: [list(k) for k in v] for s, v in self.effects.items()}
        if self.code is not None:
            out["code"] = {s: list(v) for s, v in self.code.items()}
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> MachineShape:
        """A shape from :meth:`to_data`'s JSON (a ``ValueError`` for anything else)."""
        try:
            return cls(
                name=str(data["name"]),
                version=int(data["version"]),
                working=tuple(str(s) for s in data["working"]),
                terminals=tuple(str(s) for s in data["terminals"]),
                entries={str(k): str(v) for k, v in data["entries"].items()},
                edges=tuple(_edge_key(e) for e in data["edges"]),
                steps={str(k): tuple(str(n) for n in v) for k, v in data["steps"].items()},
                effects=data.get("effects"),
                code=data.get("code"),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a machine shape: {exc}") from exc


def named_steps(name: str, using: Iterable[MachineTable] = ()) -> dict[str, Any]:
    """The steps of ``using`` and of every declared version of ``name``, by name."""
    steps: dict[str, Any] = {}
    for table in (*using, *machine_versions(name)):
        for state_steps in table.steps.values():
            for step in state_steps:
                steps.setdefault(step_name(step), step)
    return steps


def _edge_key(value: Any) -> EdgeKey:
    source, dest, trigger, on = value
    return str(source), str(dest), str(trigger), str(on)


def gate_shape(table: MachineTable | MachineShape) -> MachineShape:
    """``table`` as data enough to say where its gates are (:meth:`MachineShape.gates`,
    :meth:`~MachineShape.runs_calls_ungated`): its edges and effects, its code unread."""
    if isinstance(table, MachineShape):
        return table
    return MachineShape(
        name=table.name,
        version=table.version,
        working=table.working,
        terminals=table.terminals,
        entries=dict(table.entries),
        edges=tuple(
            (e.source, e.dest, e.trigger, getattr(e.on, "__name__", str(e.on))) for e in table.edges
        ),
        steps={s: tuple(step_name(x) for x in v) for s, v in table.steps.items()},
        effects={s: tuple(tuple(sorted(k)) for k in v) for s, v in step_effects(table).items()},
    )


def shape_of(table: MachineTable | MachineShape) -> MachineShape:
    """``table`` as data."""
    if isinstance(table, MachineShape):
        return table
    data = identity(table)
    return MachineShape(
        name=table.name,
        version=table.version,
        working=table.working,
        terminals=table.terminals,
        entries=dict(table.entries),
        edges=tuple(_edge_key(e) for e in data["edges"]),
        steps={s: tuple(v) for s, v in data["steps"].items()},
        effects={s: tuple(tuple(sorted(k)) for k in v) for s, v in step_effects(table).items()},
        code={s: tuple(v) for s, v in data["code"].items()},
    )


# ---------------------------------------------------------------- diff


@attrs.frozen
class MachineDiff:
    """What changed from one table to another (:func:`diff`)."""

    old: MachineShape
    new: MachineShape
    states_added: tuple[str, ...]
    states_removed: tuple[str, ...]
    #: States of both whose steps (or kind, working or terminal) differ.
    states_changed: tuple[str, ...]
    edges_added: tuple[EdgeKey, ...]
    edges_removed: tuple[EdgeKey, ...]
    #: ``(old, new)``: the same source and trigger, another dest or result type.
    edges_changed: tuple[tuple[EdgeKey, EdgeKey], ...]
    #: ``{situation: (old state, new state)}``; None where one has no such entry.
    entries_changed: Mapping[str, tuple[str | None, str | None]]
    #: ``(state, step)``: a step of the same name in the same place whose code changed
    #: (its body, or the arguments it was made with); known when both shapes have code.
    code_changed: tuple[tuple[str, str], ...] = ()

    @property
    def same(self) -> bool:
        """Whether nothing a run depends on changed (the fingerprints are equal)."""
        return self.old.fingerprint == self.new.fingerprint

    def lines(self) -> list[str]:
        """The changes, one per line (``+`` added, ``-`` removed, ``~`` changed)."""
        out = [f"+ state {s}" for s in self.states_added]
        out += [f"- state {s}" for s in self.states_removed]
        for s in self.states_changed:
            out.append(f"~ state {s}: {_steps_text(self.old, s)} -> {_steps_text(self.new, s)}")
        out += [f"+ edge {_edge_text(e)}" for e in self.edges_added]
        out += [f"- edge {_edge_text(e)}" for e in self.edges_removed]
        out += [f"~ edge {_edge_text(a)} -> {_edge_text(b)}" for a, b in self.edges_changed]
        for situation, (a, b) in self.entries_changed.items():
            out.append(f"~ entry {situation!r}: {a} -> {b}")
        out += [
            f"notice: the code of step {step} in state {state} changed (same name, another "
            "body or other arguments)"
            for state, step in self.code_changed
        ]
        return out

    def summary(self) -> str:
        """One line: what was added, removed and changed, or that nothing was."""
        parts = []
        for what, items in (
            ("states added", self.states_added),
            ("states removed", self.states_removed),
            ("states changed", self.states_changed),
        ):
            if items:
                parts.append(f"{what} {', '.join(items)}")
        for what, edges in (("edges added", self.edges_added), ("removed", self.edges_removed)):
            if edges:
                parts.append(f"{what} {', '.join(_edge_text(e) for e in edges)}")
        if self.edges_changed:
            changed = ", ".join(f"{_edge_text(a)} now {b[1]}" for a, b in self.edges_changed)
            parts.append(f"edges changed {changed}")
        if self.entries_changed:
            parts.append(f"entries changed {', '.join(map(repr, self.entries_changed))}")
        if self.code_changed:
            said = ", ".join(f"{step} (state {state})" for state, step in self.code_changed)
            parts.append(f"code changed {said}")
        return "; ".join(parts) if parts else "no change a run depends on"

    def mermaid(self) -> str:
        """Both tables in one Mermaid flowchart: added in green, removed in red (dashed
        edges), changed in amber, the rest as it was."""
        added, removed = set(self.states_added), set(self.states_removed)
        changed = set(self.states_changed)
        new_edges, old_edges = set(self.new.edges), set(self.old.edges)
        changed_new = {b for _, b in self.edges_changed}
        changed_old = {a for a, _ in self.edges_changed}  # drawn as their new selves
        edges = [*self.old.edges, *(e for e in self.new.edges if e not in old_edges)]

        def state_class(state: str) -> str | None:
            for kind, names in (("added", added), ("removed", removed), ("changed", changed)):
                if state in names:
                    return kind
            return None

        def edge_style(edge: _DrawnEdge) -> str | None:
            if edge.key not in new_edges:
                return "stroke:#c62828,stroke-width:2px"
            if edge.key in changed_new:
                return "stroke:#ef8f00,stroke-width:2px"
            if edge.key not in old_edges:
                return "stroke:#2e7d32,stroke-width:2px"
            return None

        drawing = Drawing(
            states=[*self.old.states, *(s for s in self.new.states if s not in self.old.states)],
            terminals=(*self.old.terminals, *self.new.terminals),
            entries={},
            edges=[_DrawnEdge(e[0], e[1], e) for e in edges if e not in changed_old],
            edge_label=lambda edge: edge.key[2],
            state_class=state_class,
            arrow=lambda edge: "-->" if edge.key in new_edges else "-.->",
            edge_style=edge_style,
        )
        return mermaid(
            drawing,
            flowchart=True,
            class_defs={
                "added": "fill:#e8f5e9,stroke:#2e7d32,stroke-width:2px",
                "removed": "fill:#ffebee,stroke:#c62828,stroke-dasharray:4",
                "changed": "fill:#fff8e1,stroke:#ef8f00,stroke-width:2px",
            },
        )


class _DrawnEdge(NamedTuple):
    """An edge of a diff's drawing: its ends, for the writer, and its key."""

    source: str
    dest: str
    key: EdgeKey


def _edge_text(edge: EdgeKey) -> str:
    source, dest, trigger, on = edge
    return f"{source} --{trigger}--> {dest} (on {on})"


def _steps_text(shape: MachineShape, state: str) -> str:
    if state in shape.terminals:
        return "terminal"
    return "(" + ", ".join(shape.steps.get(state, ())) + ")"


def diff(old: MachineTable | MachineShape, new: MachineTable | MachineShape) -> MachineDiff:
    """What changed from ``old`` to ``new``: states and edges added, removed and changed."""
    a, b = shape_of(old), shape_of(new)
    states_a, states_b = set(a.states), set(b.states)

    def kind(shape: MachineShape, state: str) -> tuple[str, ...] | None:
        return None if state in shape.terminals else tuple(shape.steps.get(state, ()))

    by_trigger_a = {(e[0], e[2]): e for e in a.edges}
    by_trigger_b = {(e[0], e[2]): e for e in b.edges}
    changed = tuple(
        (by_trigger_a[k], by_trigger_b[k])
        for k in by_trigger_a
        if k in by_trigger_b and by_trigger_a[k] != by_trigger_b[k]
    )
    moved = {e for pair in changed for e in pair}
    situations = sorted(set(a.entries) | set(b.entries))
    return MachineDiff(
        old=a,
        new=b,
        states_added=tuple(s for s in b.states if s not in states_a),
        states_removed=tuple(s for s in a.states if s not in states_b),
        states_changed=tuple(s for s in a.states if s in states_b and kind(a, s) != kind(b, s)),
        edges_added=tuple(e for e in b.edges if e not in set(a.edges) and e not in moved),
        edges_removed=tuple(e for e in a.edges if e not in set(b.edges) and e not in moved),
        edges_changed=changed,
        entries_changed={
            s: (a.entries.get(s), b.entries.get(s))
            for s in situations
            if a.entries.get(s) != b.entries.get(s)
        },
        code_changed=_code_changed(a, b),
    )


def _code_changed(a: MachineShape, b: MachineShape) -> tuple[tuple[str, str], ...]:
    """``(state, step)`` for each step both shapes name alike in one place, coded otherwise."""
    if a.code is None or b.code is None:
        return ()
    out = []
    for state in a.working:
        if state not in b.steps or a.steps[state] != b.steps[state]:
            continue  # the state changed: said as such
        for name, old, new in zip(
            a.steps[state], a.code.get(state, ()), b.code.get(state, ()), strict=False
        ):
            if old != new:
                out.append((state, name))
    return tuple(out)


def skips_gate(old: MachineShape, state: str, new: MachineShape, target: str) -> bool:
    """Whether a run resting at ``state`` of ``old`` and going on at ``target`` of ``new``
    may run a call that needs approval without its decision: read from the effects."""
    if not new.runs_calls_ungated(target):
        return False
    if old.awaits_decision(state):
        return True
    # A gate new to the machine: only a run past an old gate may skip it.
    return new.gated and not (old.gated and old.runs_calls_ungated(state))


def gate_fault(old: MachineShape, state: str, new: MachineShape, target: str) -> str:
    gates = ", ".join(new.gates) or "none"
    return (
        f"{state!r} -> {target!r} lets a call that needs approval run without its decision: "
        f"from {target!r} a state that runs tools comes before any approval state ({gates})"
    )


def entry_faults(old: MachineShape, new: MachineShape) -> list[str]:
    """The entries of ``new`` that let a run re-entering by them (a paused run, an answered
    one) run a call that ``old`` asked approval for, without its decision."""
    faults = []
    for situation, was in old.entries.items():
        now = new.entries.get(situation)
        if now is None or was not in old.working or now not in new.working:
            continue
        if skips_gate(old, was, new, now):
            faults.append(
                f"entry {situation!r} now goes to {now!r}, which runs tools before any "
                f"approval state, where it went to {was!r}, which asked first: a run that "
                "re-enters by it (paused or answered with calls pending) would run a call "
                "that needs approval without its decision"
            )
    return faults


def over(last: Trace, shape: MachineShape) -> bool:
    """Whether the run ended for good (ok or in error), not to re-enter by an entry."""
    if not last.transitions:
        return False
    t = last.transitions[-1]
    kinds = {
        on for s, d, trigger, on in shape.edges if (s, d, trigger) == (t.source, t.dest, t.trigger)
    }
    return t.dest in shape.terminals and bool(kinds) and kinds <= {"Ok", "Failed"}
