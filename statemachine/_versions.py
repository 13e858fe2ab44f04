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

Neither of the last two lets a run holding a gated call nobody decided on (at
rest before the approval state, paused with the call pending, interrupted at
the gate) reach a state that runs tools without passing a state that asks for
approval: not at the state it goes on at, nor through an entry it re-enters by
(an entry is part of the change). Gates and tool states are read from the
steps' declared effects (:mod:`agentfsm.effects`), never from their names. A
run of another machine (another name) is refused whatever the policy
(:class:`OtherMachineError`).

:func:`check_resume` decides for one saved run; ``with resuming(policy):``
makes a policy the one :func:`~agentfsm.store.restore_run` (and
``Agent.resume_run``) applies. :func:`replay` drives a recorded run's model
replies and tool results through another table, with no model and no tool
called, and says where the two part.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import attrs

from . import _machine
from ._errors import MachineChangedError, OtherMachineError
from ._identity import names_identity, step_code
from ._machine import (
    Edge,
    MachineDefinitionError,
    MachineTable,
    fingerprint_of,
    machine_named,
    machine_versions,
)
from ._options import Options
from ._replay import ReplayReport, _traces, replay
from ._results import Continue, Failed, Interrupted, Ok, Paused
from ._shape import (
    MachineDiff,
    MachineShape,
    diff,
    entry_faults,
    gate_fault,
    named_steps,
    over,
    shape_of,
    skips_gate,
)
from ._trace import Trace

if TYPE_CHECKING:
    from .store import SavedRun

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
    steps = named_steps(shape.name, using)
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
        elif state in a.working and skips_gate(a, state, b, target):
            faults.append(gate_fault(a, state, b, target))
    faults += entry_faults(a, b)
    if faults:
        raise MachineChangedError(
            f"The mapping from the {a.name} machine v{a.version} to the {b.name} machine "
            f"v{b.version} is refused: " + "; ".join(faults)
        )
    return Mapped(old=a, new=b, mapping=full)


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


def _resting(trace: Trace) -> str:
    return trace.terminal or trace.entry


def _off_path(traces: Sequence[Trace], table: MachineTable | MachineShape) -> str | None:
    """The first step of ``traces`` that is not a move of ``table``, said; None when all are."""
    entries = set(table.entries.values())
    successors = table.successors
    for number, trace in enumerate(traces, 1):  # segments and steps count from 1
        moved_in = trace.migrated_from is not None and trace.entry in table.working
        if trace.entry not in entries and not moved_in:
            return f"segment {number} enters at {trace.entry!r}, not an entry of it"
        state = trace.entry
        for index, t in enumerate(trace.transitions, 1):
            if t.source != state or successors.get(t.source, {}).get(t.trigger) != t.dest:
                return (
                    f"segment {number}, step {index}: {t.source} --{t.trigger}--> "
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
        if off is None and old is not None:
            off = _gate_off(old, shape_of(new_table), resting, last)
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


def _gate_off(old: MachineShape, new: MachineShape, resting: str, last: Trace) -> str | None:
    """Why going on on ``new`` at ``resting`` (or re-entering it by an entry, for a run
    that has not ended for good) may run an undecided gated call; None when it may not."""
    if resting in old.working and skips_gate(old, resting, new, resting):
        return gate_fault(old, resting, new, resting)
    if not over(last, old):
        return "; ".join(entry_faults(old, new)) or None
    return None


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
    if skips_gate(old, source, new, trace.entry):
        return gate_fault(old, source, new, trace.entry)
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


def migration_trace(saved: SavedRun, decision: ResumeDecision) -> Trace:
    """The new segment's empty trace of a run ``decision`` moves onto its table: entered
    at ``decision.state``, from the state the run rests at."""
    table = decision.table
    return Trace(
        entry=decision.state,
        machine=table.name,
        machine_version=table.version,
        machine_fingerprint=table.fingerprint,
        migrated_from=saved.state,
    )
