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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import attrs

from . import machine as _machine
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
    from .messages import Message, ToolResult
    from .results import Terminal
    from .store import SavedRun

__all__ = [
    "MachineChangedError",
    "MachineDiff",
    "MachineShape",
    "Mapped",
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

#: The step that asks for approval: a state running it is a gate.
APPROVAL_STEP: Final = "check_approvals"
#: The step that runs the model's tool calls.
EXECUTE_STEP: Final = "execute_tools"

#: An edge as a fingerprint sees it: (source, dest, trigger, result type name).
EdgeKey: TypeAlias = tuple[str, str, str, str]


# ---------------------------------------------------------------- a table as data


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

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(
            {
                "working": sorted(self.working),
                "terminals": sorted(self.terminals),
                "entries": {k: self.entries[k] for k in sorted(self.entries)},
                "edges": sorted(list(e) for e in self.edges),
                "steps": {s: list(self.steps[s]) for s in sorted(self.steps)},
            }
        )

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

    def awaits_decision(self, state: str) -> bool:
        """Whether a run resting at ``state`` meets an approval gate before any tool runs."""
        for s in self.onward(state):
            steps = self.steps.get(s, ())
            if APPROVAL_STEP in steps:
                return True
            if EXECUTE_STEP in steps:
                return False
        return False

    def runs_calls_ungated(self, state: str) -> bool:
        """Whether a run resting at ``state`` runs pending calls before any approval gate."""
        for s in self.onward(state):
            steps = self.steps.get(s, ())
            if APPROVAL_STEP in steps:
                return False
            if EXECUTE_STEP in steps:
                return True
        return False

    @property
    def gated(self) -> bool:
        return any(APPROVAL_STEP in steps for steps in self.steps.values())

    def to_data(self) -> dict[str, Any]:
        """The shape as JSON data (a saved run's header keeps it)."""
        return {"name": self.name, "version": self.version, **self._identity()}

    def _identity(self) -> dict[str, Any]:
        return {
            "working": list(self.working),
            "terminals": list(self.terminals),
            "entries": dict(self.entries),
            "edges": [list(e) for e in self.edges],
            "steps": {s: list(v) for s, v in self.steps.items()},
        }

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
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a machine shape: {exc}") from exc


def _edge_key(value: Any) -> EdgeKey:
    source, dest, trigger, on = value
    return str(source), str(dest), str(trigger), str(on)


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


def _declared(name: str, fingerprint: str) -> MachineTable | None:
    for table in machine_versions(name):
        if table.fingerprint == fingerprint:
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
    steps: dict[str, Any] = {}
    kinds: dict[str, type[Any]] = {
        k.__name__: k for k in (Continue, Ok, Paused, Interrupted, Failed)
    }
    for table in tables:
        for state_steps in table.steps.values():
            for step in state_steps:
                steps.setdefault(step_name(step), step)
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
    if table.fingerprint != shape.fingerprint:
        raise MachineChangedError(
            f"The {shape.name} machine v{shape.version} rebuilt from its shape has "
            f"fingerprint {table.fingerprint}, not {shape.fingerprint}."
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
    )


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
            faults.append(
                f"{state!r} -> {target!r} lets a call that needs approval run without its "
                f"decision: {state!r} meets the approval check first, {target!r} runs calls "
                "before any"
            )
    if faults:
        raise MachineChangedError(
            f"The mapping from the {a.name} machine v{a.version} to the {b.name} machine "
            f"v{b.version} is refused: " + "; ".join(faults)
        )
    return Mapped(old=a, new=b, mapping=full)


def _skips_gate(old: MachineShape, state: str, new: MachineShape, target: str) -> bool:
    if not new.runs_calls_ungated(target):
        return False
    if old.awaits_decision(state):
        return True
    # A gate new to the machine: only a run past an old gate may skip it.
    return new.gated and not (old.gated and old.runs_calls_ungated(state))


# ---------------------------------------------------------------- resuming


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
    return last.machine == table.name and last.machine_fingerprint in (None, table.fingerprint)


def check_resume(
    saved: SavedRun | Trace | Sequence[Trace],
    new_table: MachineTable,
    policy: Policy | None = None,
) -> ResumeDecision:
    """How the saved run (its traces) goes on on ``new_table`` under ``policy``.

    A run saved on the same fingerprint (or before runs recorded one) goes on
    unchanged; any other is refused (:class:`MachineChangedError`, naming what
    changed) unless ``policy`` allows it.
    """
    traces = _traces(saved)
    if not traces:
        raise ValueError("a saved run has at least one segment")
    last = traces[-1]
    resting = _resting(last)
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
        if off is None and old is not None and _ungates(old, resting, shape_of(new_table), resting):
            off = f"at {resting!r} the new table runs calls the old one asked approval for"
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
    if _ungates(shape_of(previous_table), source, shape_of(table), trace.entry):
        return (
            f"{source!r} -> {trace.entry!r} lets a call that needs approval run without "
            "its decision"
        )
    return None


def _ungates(old: MachineShape, state: str, new: MachineShape, target: str) -> bool:
    return old.awaits_decision(state) and new.runs_calls_ungated(target)


def segment_table(trace: Trace, table: MachineTable) -> MachineTable | MachineShape:
    """The table a saved segment is checked against: the one it was recorded on when
    that is another than ``table`` and known here (declared, or kept with the run),
    else ``table``."""
    fingerprint = trace.machine_fingerprint
    if fingerprint is None or fingerprint == table.fingerprint or trace.machine != table.name:
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


# ---------------------------------------------------------------- replay


@attrs.frozen
class ReplayReport:
    """Where a recorded run and its replay on another table part, or that they agree."""

    #: The states the recorded run visited, segment after segment.
    recorded: tuple[str, ...]
    #: The states the replay visited.
    replayed: tuple[str, ...]
    #: The replay's trace and result.
    trace: Trace
    result: Terminal
    #: How many recorded replies there were, and how many the replay asked for.
    replies: int
    model_calls: int
    #: Tool calls the replay made that the recording has no result for.
    unrecorded_calls: tuple[str, ...] = ()

    @property
    def index(self) -> int | None:
        """The position of the first state where the two differ; None when they agree."""
        for i, (a, b) in enumerate(itertools.zip_longest(self.recorded, self.replayed)):
            if a != b:
                return i
        return None

    @property
    def agrees(self) -> bool:
        return self.index is None

    def __str__(self) -> str:
        i = self.index
        if i is None:
            return f"the replay agrees: {len(self.replayed)} states, {' '.join(self.replayed)}"
        a = self.recorded[i] if i < len(self.recorded) else "(the end)"
        b = self.replayed[i] if i < len(self.replayed) else "(the end)"
        return (
            f"the replay parts at state {i}: recorded {a!r}, replayed {b!r} "
            f"(after {' '.join(self.recorded[:i]) or 'nothing'})"
        )


def _recorded(traces: Sequence[Trace]) -> tuple[list[Message], dict[str, ToolResult]]:
    """The model replies and tool results a run recorded, in order."""
    replies: list[Message] = []
    results: dict[str, ToolResult] = {}
    seen: set[int] = set()
    for trace in traces:
        for t in trace.transitions:
            last = t.chain.last_message
            if last is None or id(last) in seen:
                continue
            seen.add(id(last))
            if last.role == "assistant" and (not replies or replies[-1] != last):
                replies.append(last)
            for result in last.tool_results:
                results.setdefault(result.tool_call_id, result)
    return replies, results


def _start_messages(traces: Sequence[Trace]) -> list[Message]:
    for trace in traces:
        for t in trace.transitions:
            messages = list(t.chain.messages)
            for i, m in enumerate(messages):
                if m.role == "assistant":
                    return messages[:i]
            return messages
    return []


def replay(
    saved: SavedRun | Trace | Sequence[Trace],
    table: MachineTable,
    opts: Mapping[str, Any] | None = None,
) -> ReplayReport:
    """Drive a recorded run's model replies and tool results through ``table``.

    No model and no tool is called: a scripted model answers with the recorded
    replies in order, and each tool call answers with the recorded result of
    the same call id. The replay starts from the run's first conversation (the
    messages before the first reply) and runs ``table`` to its end with ``opts``
    (the run's saved options when ``saved`` is a saved run); the report
    compares the states visited.
    """

    from agentfsm.providers.scripted import ScriptedModel

    from .modes.standard import StandardMode
    from .run import Run
    from .tools import Tool, ToolContext, ToolOutput

    traces = _traces(saved)
    replies, results = _recorded(traces)
    start = _start_messages(traces)
    unrecorded: list[str] = []

    def tool_for(name: str) -> Tool:
        def answer(context: ToolContext, **_: Any) -> ToolOutput:
            result = results.get(context.tool_call_id)
            if result is None or result.name != name:
                unrecorded.append(f"{name} ({context.tool_call_id})")
                return ToolOutput(content=f"no recorded result for {name}", is_error=True)
            return ToolOutput(
                content=result.content,
                state_updates=result.state_updates,
                interrupt=result.interrupt_data if result.is_interrupt else None,
                is_error=result.is_error,
            )

        return Tool(
            name=name,
            description="answers from a recorded run",
            function=answer,
            parameters={"type": "object", "properties": {}, "additionalProperties": True},
            context_param="context",
        )

    names = sorted(
        {r.name for r in results.values()} | {c.name for m in replies for c in m.tool_calls}
    )
    model = ScriptedModel(list(replies), model_name="replay")
    first = next((t.chain for trace in traces for t in trace.transitions), None)
    if first is None:
        raise ValueError("the recorded run made no transition: there is nothing to replay")
    chain = attrs.evolve(
        first,
        llm=model,
        tools=tuple(tool_for(n) for n in names),
        messages=start,
        exchanged_messages=(),
        last_message=start[-1] if start else None,
        needs_response=True,
        custom_context={},
        current_failure_count=0,
    )
    if opts is None:
        opts = dict(getattr(saved, "options", None) or {})
    run: Run
    if {"fresh", "pending tool calls", "tool results"} <= set(table.entries):
        run = StandardMode(table).start(chain, opts)
    else:
        run = Run(table, chain, next(iter(table.entries.values())), opts)
    result = run.run_sync()
    recorded = tuple(s for trace in traces for s in trace.states)
    return ReplayReport(
        recorded=recorded,
        replayed=tuple(run.trace.states),
        trace=run.trace,
        result=result,
        replies=len(replies),
        model_calls=model.calls,
        unrecorded_calls=tuple(unrecorded),
    )
