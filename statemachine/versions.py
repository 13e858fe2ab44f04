"""Machine versions: a run saved on one version of a machine meets another, checked.

A machine is data, so what changed between two versions is data too:
:func:`diff` names the states and edges added, removed and changed, and draws
them. A saved run records the name, version and fingerprint of the table it ran
on (:attr:`MachineTable.fingerprint <agentfsm.machine.MachineTable.fingerprint>`),
and the table itself as data (:class:`MachineShape`). Resuming it on a table with
another fingerprint is refused with :class:`MachineChangedError`, naming what
changed, unless a policy says how it goes on:

* :data:`pinned` -- the run finishes on the table it started on: declared in
  this process (``version=`` the old one), or rebuilt from the shape the run
  kept, its steps found by name among the tables declared (:func:`rebuild`);
* :data:`compatible` -- it goes on on the new table when every segment of its
  recorded path is a path of the new table and its resting state exists there;
* :func:`mapped` -- an explicit map from the old table's resting states to new
  ones, checked when it is declared.

:func:`check_resume` decides for one saved run; ``with resuming(policy):``
makes a policy the one :func:`~agentfsm.store.restore_run` (and
``Agent.resume_run``) applies. :func:`replay` drives a recorded run's model
replies and tool results through another table, with no model and no tool
called, and says where the two part.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import attrs

from . import machine as _machine
from ._identity import names_identity, step_code
from ._replay import ReplayReport, replay
from .effects import effects_of, step_effects
from .errors import MachineChangedError
from .machine import (
    Edge,
    MachineDefinitionError,
    MachineTable,
    fingerprint_of,
    identity,
    machine_named,
    machine_versions,
    step_name,
)
from .options import Options
from .results import Continue, Failed, Interrupted, Ok, Paused
from .trace import Trace

if TYPE_CHECKING:
    from .store.checkpoint import SavedRun

__all__ = [
    "MachineChangedError",
    "MachineDiff",
    "MachineShape",
    "Mapped",
    "OtherMachineError",
    "Policy",
    "ReplayReport",
    "ResumeDecision",
    "check_resume",
    "compatible",
    "diff",
    "mapped",
    "pinned",
    "rebuild",
    "replay",
    "resuming",
    "shape_of",
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
        found = _named_steps(self.name)
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


def _named_steps(name: str, using: Iterable[MachineTable] = ()) -> dict[str, Any]:
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


#: Shapes read from saved runs, by fingerprint: how a run names what changed after its
#: table is gone from the code.
_SEEN: dict[str, MachineShape] = {}


def remember(shape: MachineShape) -> None:
    """Keep a saved run's table shape, so its changes can be named later."""
    _SEEN[shape.fingerprint] = shape


def known_shape(name: str, fingerprint: str) -> MachineShape | None:
    """The shape of the table called ``name`` with ``fingerprint``: declared, or seen saved."""
    table = _declared(name, fingerprint)
    if table is not None:
        return shape_of(table)
    return _SEEN.get(fingerprint)


def fits(table: MachineTable, fingerprint: str | None) -> bool:
    """Whether a run that recorded ``fingerprint`` was made on ``table``: its fingerprint,
    or the one of its names alone that runs recorded before fingerprints covered code
    (such a run could not record more; it goes on as it did then)."""
    return fingerprint == table.fingerprint or fingerprint == fingerprint_of(names_identity(table))


def _declared(name: str, fingerprint: str) -> MachineTable | None:
    for table in machine_versions(name):
        if fits(table, fingerprint):
            return table
    return None


#: Tables rebuilt from saved shapes, by fingerprint (:func:`rebuild`).
_REBUILT: dict[str, MachineTable] = {}


def rebuild(shape: MachineShape, using: Iterable[MachineTable] = ()) -> MachineTable:
    """The table ``shape`` describes, for a run pinned to a table the code no longer
    declares: each step is found by its qualified name among the steps of ``using`` and
    of every declared version of the machine (:class:`MachineChangedError` naming each
    one that is not). The table is not declared: the code's versions stay as they are."""
    known = _REBUILT.get(shape.fingerprint)
    if known is not None:
        return known
    tables = [*using, *machine_versions(shape.name)]
    steps = _named_steps(shape.name, using)
    kinds: dict[str, type[Any]] = {
        k.__name__: k for k in (Continue, Ok, Paused, Interrupted, Failed)
    }
    for table in tables:
        for edge in table.edges:
            kinds.setdefault(getattr(edge.on, "__name__", str(edge.on)), edge.on)
    missing = sorted(
        {f"{n} (state {s})" for s, names in shape.steps.items() for n in names if n not in steps}
        | {f"result type {e[3]}" for e in shape.edges if e[3] not in kinds}
    )
    if missing:
        raise MachineChangedError(
            f"The {shape.name} machine v{shape.version} ({shape.fingerprint}) cannot be "
            f"rebuilt to finish a pinned run: no step named {', '.join(missing)} is in "
            "this process's tables. Declare the old table (version="
            f"{shape.version}) or map the run to the new one."
        )
    declared = _machine._DECLARED.get(shape.name)
    before = None if declared is None else dict(declared)
    try:
        table = MachineTable(
            name=shape.name,
            version=shape.version,
            steps={s: tuple(steps[n] for n in shape.steps[s]) for s in shape.working},
            terminals=shape.terminals,
            entries=shape.entries,
            edges=[
                Edge(source, dest, on=kinds[on], trigger=trigger, why="as the run saved it")
                for source, dest, trigger, on in shape.edges
            ],
            default_edges=False,
            options=tables[0].options if tables else Options,
        )
    except MachineDefinitionError as exc:
        raise MachineChangedError(
            f"The {shape.name} machine v{shape.version} cannot be rebuilt: {exc}"
        ) from exc
    finally:  # rebuilt, not declared
        if before is None:
            _machine._DECLARED.pop(shape.name, None)
        else:
            _machine._DECLARED[shape.name] = before
    if not fits(table, shape.fingerprint):
        changed = sorted(
            f"{n} (state {s})"
            for s, codes in (shape.code or {}).items()
            for n, old, new in zip(
                shape.steps.get(s, ()), codes, (step_code(x) for x in table.steps[s]), strict=False
            )
            if old != new
        )
        raise MachineChangedError(
            f"The {shape.name} machine v{shape.version} rebuilt from its shape has "
            f"fingerprint {table.fingerprint}, not {shape.fingerprint}"
            + (f": the code of {', '.join(changed)} changed since" if changed else "")
            + ". Declare the old table or map the run to the new one."
        )
    _REBUILT[shape.fingerprint] = table
    return table


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
        lines = ["flowchart TD"]
        states = [*self.old.states, *(s for s in self.new.states if s not in self.old.states)]
        for s in states:
            shape = (
                f"{s}([{s}])" if s in (*self.old.terminals, *self.new.terminals) else f"{s}[{s}]"
            )
            lines.append(f"    {shape}")
        styles: list[str] = []
        new_edges = set(self.new.edges)
        old_edges = set(self.old.edges)
        changed_new = {b for _, b in self.edges_changed}
        changed_old = {a for a, _ in self.edges_changed}
        index = itertools.count()
        for edge in [*self.old.edges, *(e for e in self.new.edges if e not in old_edges)]:
            source, dest, trigger, _ = edge
            if edge in changed_old:
                continue  # drawn as its new self
            arrow = "-.->" if edge not in new_edges else "-->"
            lines.append(f"    {source} {arrow}|{trigger}| {dest}")
            n = next(index)
            if edge not in new_edges:
                styles.append(f"    linkStyle {n} stroke:#c62828,stroke-width:2px")
            elif edge in changed_new:
                styles.append(f"    linkStyle {n} stroke:#ef8f00,stroke-width:2px")
            elif edge not in old_edges:
                styles.append(f"    linkStyle {n} stroke:#2e7d32,stroke-width:2px")
        lines += [
            "    classDef added fill:#e8f5e9,stroke:#2e7d32,stroke-width:2px",
            "    classDef removed fill:#ffebee,stroke:#c62828,stroke-dasharray:4",
            "    classDef changed fill:#fff8e1,stroke:#ef8f00,stroke-width:2px",
        ]
        for kind, names in (("added", added), ("removed", removed), ("changed", changed)):
            if names:
                lines.append(f"    class {','.join(sorted(names))} {kind}")
        return "\n".join(lines + styles) + "\n"


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


# ---------------------------------------------------------------- policies


@attrs.frozen
class Pinned:
    """The run finishes on the table it started on: declared still, or rebuilt from the
    shape the run kept (its steps found by qualified name among the declared tables)."""

    name: str = "pinned"


@attrs.frozen
class Compatible:
    """The run goes on on the new table when its recorded path is one of the new table's
    paths and the state it rests at is a state there."""

    name: str = "compatible"


@attrs.frozen
class Mapped:
    """Runs of ``old`` go on on ``new`` at ``mapping[state]`` (checked: :func:`mapped`)."""

    old: MachineShape
    new: MachineShape
    #: Every resting state of ``old`` (its working states and terminals) to a state of ``new``.
    mapping: Mapping[str, str]
    name: str = "mapped"


#: A resume policy: :data:`pinned`, :data:`compatible` or :func:`mapped`.
Policy: TypeAlias = Pinned | Compatible | Mapped

#: Finish the run on the table it started on.
pinned: Final = Pinned()
#: Go on on the new table when the run's path is one of its paths.
compatible: Final = Compatible()


def mapped(
    mapping: Mapping[str, str],
    *,
    old: MachineTable | MachineShape,
    new: MachineTable | MachineShape,
) -> Mapped:
    """A policy that moves runs resting at an ``old`` state to ``mapping[state]`` of ``new``.

    Checked here, not when a run meets it (:class:`MachineChangedError` naming
    each fault): every resting state of ``old`` (working or terminal) is mapped,
    explicitly or by being a state of ``new`` of the same kind; each target is a
    legal resume point (a working state for a working one, a terminal for a
    terminal); and no target lets a call that needs approval run without a
    decision: a state that meets the approval check before any tool runs maps to
    one that does too, and no state maps past a gate that ``old`` did not pass.
    """
    a, b = shape_of(old), shape_of(new)
    faults: list[str] = []
    for source, dest in mapping.items():
        if source not in a.states:
            faults.append(f"{source!r} is not a state of the {a.name} machine v{a.version}")
        if dest not in b.states:
            faults.append(f"{dest!r} is not a state of the {b.name} machine v{b.version}")
    full: dict[str, str] = {}
    for state in a.states:
        target = mapping.get(state) or (state if state in b.states else None)
        if target is None:
            faults.append(f"resting state {state!r} is not mapped (the new table lacks it)")
            continue
        if target not in b.states:
            continue
        full[state] = target
        if state in a.working and target not in b.working:
            faults.append(
                f"{state!r} -> {target!r}: a run resting at a working state goes on at a "
                "working state (a legal resume point), not a terminal"
            )
        elif state in a.terminals and target not in b.terminals:
            faults.append(f"{state!r} -> {target!r}: an ended run's terminal maps to a terminal")
        elif state in a.working and _skips_gate(a, state, b, target):
            faults.append(_gate_fault(a, state, b, target))
    faults += _entry_faults(a, b)
    if faults:
        raise MachineChangedError(
            f"The mapping from the {a.name} machine v{a.version} to the {b.name} machine "
            f"v{b.version} is refused: " + "; ".join(faults)
        )
    return Mapped(old=a, new=b, mapping=full)


def _skips_gate(old: MachineShape, state: str, new: MachineShape, target: str) -> bool:
    """Whether a run resting at ``state`` of ``old`` and going on at ``target`` of ``new``
    may run a call that needs approval without its decision: read from the effects."""
    if not new.runs_calls_ungated(target):
        return False
    if old.awaits_decision(state):
        return True
    # A gate new to the machine: only a run past an old gate may skip it.
    return new.gated and not (old.gated and old.runs_calls_ungated(state))


def _gate_fault(old: MachineShape, state: str, new: MachineShape, target: str) -> str:
    gates = ", ".join(new.gates) or "none"
    return (
        f"{state!r} -> {target!r} lets a call that needs approval run without its decision: "
        f"from {target!r} a state that runs tools comes before any approval state ({gates})"
    )


def _entry_faults(old: MachineShape, new: MachineShape) -> list[str]:
    """The entries of ``new`` that let a run re-entering by them (a paused run, an answered
    one) run a call that ``old`` asked approval for, without its decision."""
    faults = []
    for situation, was in old.entries.items():
        now = new.entries.get(situation)
        if now is None or was not in old.working or now not in new.working:
            continue
        if _skips_gate(old, was, new, now):
            faults.append(
                f"entry {situation!r} now goes to {now!r}, which runs tools before any "
                f"approval state, where it went to {was!r}, which asked first: a run that "
                "re-enters by it (paused or answered with calls pending) would run a call "
                "that needs approval without its decision"
            )
    return faults


def _over(last: Trace, shape: MachineShape) -> bool:
    """Whether the run ended for good (ok or in error), not to re-enter by an entry."""
    if not last.transitions:
        return False
    t = last.transitions[-1]
    kinds = {
        on for s, d, trigger, on in shape.edges if (s, d, trigger) == (t.source, t.dest, t.trigger)
    }
    return t.dest in shape.terminals and bool(kinds) and kinds <= {"Ok", "Failed"}


# ---------------------------------------------------------------- resuming


class OtherMachineError(MachineChangedError):
    """A saved run met a table of another machine (another name): it is not a version
    of the run's machine, so no policy applies."""


@attrs.frozen
class ResumeDecision:
    """How a saved run goes on: on ``table``, at ``state``, by ``policy``."""

    #: ``unchanged``, ``pinned``, ``compatible`` or ``mapped``.
    policy: str
    table: MachineTable
    #: The state the run goes on at: where it rests, or the state it is mapped to.
    state: str
    #: What changed, when the machine did and its old shape is known.
    diff: MachineDiff | None = None

    @property
    def moved(self) -> bool:
        """Whether the run goes on at another state than the one it rests at."""
        return self.policy == "mapped"


def _traces(saved: SavedRun | Trace | Sequence[Trace]) -> list[Trace]:
    if isinstance(saved, Trace):
        return [saved]
    if isinstance(saved, Sequence):
        return list(saved)
    return list(saved.traces)


def _resting(trace: Trace) -> str:
    return trace.terminal or trace.entry


def _off_path(traces: Sequence[Trace], table: MachineTable | MachineShape) -> str | None:
    """The first step of ``traces`` that is not a move of ``table``, said; None when all are."""
    entries = set(table.entries.values())
    successors = table.successors
    for number, trace in enumerate(traces):
        moved_in = trace.migrated_from is not None and trace.entry in table.working
        if trace.entry not in entries and not moved_in:
            return f"segment {number} enters at {trace.entry!r}, not an entry of it"
        state = trace.entry
        for index, t in enumerate(trace.transitions):
            if t.source != state or successors.get(t.source, {}).get(t.trigger) != t.dest:
                return (
                    f"segment {number}, transition {index}: {t.source} --{t.trigger}--> "
                    f"{t.dest} is not one of its moves"
                )
            state = t.dest
    return None


def _changed(traces: Sequence[Trace], table: MachineTable, why: str) -> MachineChangedError:
    last = traces[-1]
    old = known_shape(last.machine, last.machine_fingerprint) if last.machine_fingerprint else None
    what = diff(old, table).summary() if old is not None else "its table is not known here"
    return MachineChangedError(
        f"The run was saved on the {last.machine} machine v{last.machine_version} "
        f"({last.machine_fingerprint}); this is the {table.name} machine v{table.version} "
        f"({table.fingerprint}). Changed: {what}. {why}"
    )


def _unchanged(last: Trace, table: MachineTable) -> bool:
    fingerprint = last.machine_fingerprint
    return last.machine == table.name and (fingerprint is None or fits(table, fingerprint))


def check_resume(
    saved: SavedRun | Trace | Sequence[Trace],
    new_table: MachineTable,
    policy: Policy | None = None,
) -> ResumeDecision:
    """How the saved run (its traces) goes on on ``new_table`` under ``policy``.

    A run saved on the same fingerprint (or before runs recorded one) goes on
    unchanged; any other is refused (:class:`MachineChangedError`, naming what
    changed) unless ``policy`` allows it. A run of another machine altogether is
    refused whatever the policy (:class:`OtherMachineError`).
    """
    traces = _traces(saved)
    if not traces:
        raise ValueError("a saved run has at least one segment")
    last = traces[-1]
    resting = _resting(last)
    if last.machine != new_table.name:
        raise OtherMachineError(
            f"the run is of the {last.machine} machine, not the {new_table.name} machine: "
            "no policy moves a run onto another machine"
        )
    if _unchanged(last, new_table):
        return ResumeDecision(policy="unchanged", table=new_table, state=resting)
    fingerprint = last.machine_fingerprint or ""
    old = known_shape(last.machine, fingerprint)
    changes = None if old is None else diff(old, new_table)
    if policy is None:
        raise _changed(
            traces,
            new_table,
            "Resume it with a policy: pinned, compatible or mapped(...) (agentfsm.versions).",
        )
    if isinstance(policy, Pinned):
        table = _declared(last.machine, fingerprint)
        if table is None and old is not None and old.name == new_table.name:
            table = rebuild(old, (new_table,))
        if table is None:
            raise _changed(
                traces,
                new_table,
                f"Pinned: declare that table (version={last.machine_version}) in this "
                "process to finish the run on it.",
            )
        return ResumeDecision(policy="pinned", table=table, state=resting, diff=changes)
    if isinstance(policy, Compatible):
        off = _off_path(traces, new_table)
        if off is None and resting not in new_table.states:
            off = f"it rests at {resting!r}, which the new table lacks"
        new = shape_of(new_table)
        gate_skipped = old is not None and resting in old.working
        if (
            off is None
            and old is not None
            and gate_skipped
            and _skips_gate(old, resting, new, resting)
        ):
            off = _gate_fault(old, resting, new, resting)
        if off is None and old is not None and not _over(last, old):
            off = "; ".join(_entry_faults(old, new)) or None
        if off is not None:
            raise _changed(traces, new_table, f"Not compatible: {off}.")
        return ResumeDecision(policy="compatible", table=new_table, state=resting, diff=changes)
    if policy.old.fingerprint != fingerprint or policy.new.fingerprint != new_table.fingerprint:
        raise _changed(
            traces,
            new_table,
            f"The mapping is from the {policy.old.name} machine v{policy.old.version} "
            f"({policy.old.fingerprint}) to v{policy.new.version} ({policy.new.fingerprint}), "
            "not between these.",
        )
    return ResumeDecision(
        policy="mapped", table=new_table, state=policy.mapping[resting], diff=changes
    )


_POLICY: contextvars.ContextVar[Policy | None] = contextvars.ContextVar(
    "agentfsm_resume_policy", default=None
)


@contextlib.contextmanager
def resuming(policy: Policy) -> Iterator[Policy]:
    """Within the block, saved runs made on another version of their machine are loaded
    and resumed under ``policy`` (it holds for the tasks started inside too)."""
    token = _POLICY.set(policy)
    try:
        yield policy
    finally:
        _POLICY.reset(token)


def recorded_table(
    traces: Sequence[Trace], headers: Iterable[Mapping[str, Any]] = ()
) -> MachineTable:
    """The table a saved run's traces are checked against when it is loaded.

    The table it ran on, when this process declares it (same name and
    fingerprint); else the newest of its name when the traces are paths of it
    (how the run may go on is decided on resume); else
    :class:`MachineChangedError`, naming what changed. ``headers`` are the
    run's segment headers; the table shapes they keep are remembered.
    """
    for header in headers:
        data = header.get("machine_table")
        if isinstance(data, Mapping):
            with contextlib.suppress(ValueError):
                remember(MachineShape.from_data(data))
    last = traces[-1]
    if last.machine_fingerprint is None:
        return machine_named(last.machine)
    table = _declared(last.machine, last.machine_fingerprint)
    if table is not None:
        return table
    newest = machine_named(last.machine)
    shape = _SEEN.get(last.machine_fingerprint)
    if isinstance(_POLICY.get(), Pinned) and shape is not None and shape.name == last.machine:
        return rebuild(shape, (newest,))
    if _off_path(traces, newest) is None:
        return newest
    raise _changed(
        traces,
        newest,
        "Its path is not a path of the new table: finish it on the old one (pinned), "
        "or map it (mapped).",
    )


def resume_decision(saved: SavedRun, table: MachineTable) -> ResumeDecision:
    """How a saved run goes on when an agent running ``table`` resumes it.

    Unchanged, or allowed by the policy of :func:`resuming`: on ``table`` (or
    the pinned one, which the agent must run), at the state the run rests at or
    the one a mapping moves it to. Else :class:`MachineChangedError`.
    """
    last = saved.trace
    if last.machine != table.name:  # another machine altogether: the agent says so
        recorded = last.machine_fingerprint and _declared(last.machine, last.machine_fingerprint)
        return ResumeDecision(
            policy="unchanged", table=recorded or machine_named(last.machine), state=saved.state
        )
    decision = check_resume(saved, table, _POLICY.get())
    if decision.table is not table:
        raise MachineChangedError(
            f"Run {saved.run_id!r} is pinned to the {decision.table.name} machine "
            f"v{decision.table.version}; resume it with an agent of that table "
            "(Agent(..., machine=...))."
        )
    return decision


def migrates(saved: SavedRun, decision: ResumeDecision) -> bool:
    """Whether resuming ``saved`` by ``decision`` moves it onto another table: a run
    that had not ended then goes on in a new segment, entered at ``decision.state``."""
    return (
        not saved.done
        and decision.policy in ("compatible", "mapped")
        and saved.trace.machine_fingerprint != decision.table.fingerprint
    )


def migration_fault(
    previous: Trace,
    previous_table: MachineTable | MachineShape,
    trace: Trace,
    table: MachineTable | MachineShape,
) -> str | None:
    """Why the segment ``trace`` is not a migration of the run ``previous`` left; None
    when it is: that run rested at ``trace.migrated_from``, a working state of its table,
    and ``trace`` enters at a working state of ``table`` that runs no call the old state
    would have asked approval for first."""
    source = trace.migrated_from
    rested = _resting(previous)
    if source != rested:
        return f"it moves the run from {source!r}, but the segment before rests at {rested!r}"
    if source not in previous_table.working:
        return f"{source!r} is not a working state of the {previous_table.name} machine"
    if trace.entry not in table.working:
        return f"it enters at {trace.entry!r}, not a working state of the {table.name} machine"
    old, new = shape_of(previous_table), shape_of(table)
    if _skips_gate(old, source, new, trace.entry):
        return _gate_fault(old, source, new, trace.entry)
    return None


def segment_table(trace: Trace, table: MachineTable) -> MachineTable | MachineShape:
    """The table a saved segment is checked against: the one it was recorded on when
    that is another than ``table`` and known here (declared, or kept with the run),
    else ``table``."""
    fingerprint = trace.machine_fingerprint
    if fingerprint is None or trace.machine != table.name or fits(table, fingerprint):
        return table
    return _declared(trace.machine, fingerprint) or _SEEN.get(fingerprint) or table


def header_identity(table: MachineTable, trace: Trace | None = None) -> dict[str, Any]:
    """What a saved run's segment header records of its table (and of the migration
    that opened the segment, when ``trace`` is one's)."""
    out = {
        "machine_version": table.version,
        "machine_fingerprint": table.fingerprint,
        "machine_table": shape_of(table).to_data(),
    }
    if trace is not None and trace.migrated_from is not None:
        out["migrated_from"] = trace.migrated_from
    return out


def trace_identity(header: Mapping[str, Any]) -> dict[str, Any]:
    """A segment header's machine version and fingerprint, as :class:`Trace` takes them
    (none recorded: a run saved before machines had them)."""
    version = header.get("machine_version")
    fingerprint = header.get("machine_fingerprint")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValueError(f"a segment's machine version {version!r} is not a number")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ValueError(f"a segment's machine fingerprint {fingerprint!r} is not text")
    moved = header.get("migrated_from")
    if moved is not None and not isinstance(moved, str):
        raise ValueError(f"a segment's migrated_from {moved!r} is not a state")
    return {"machine_version": version, "machine_fingerprint": fingerprint, "migrated_from": moved}
