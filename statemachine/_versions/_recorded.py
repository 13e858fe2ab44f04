"""Reading the tables saved runs recorded: which table a run is checked against.

A saved run records the name, version and fingerprint of its table, and the
table's shape. Loading it finds that table among the declared ones
(:func:`declared`), or rebuilds it from its shape (:func:`rebuild`), or checks
the run against the newest table of its name (:func:`recorded_table`). What was
read of tables the code no longer declares is kept in :data:`RECORDED`, bounded.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar

from .._errors import MachineChangedError
from .._identity import names_identity, step_code
from .._machine import (
    Edge,
    MachineDefinitionError,
    MachineTable,
    declare,
    fingerprint_of,
    forget,
    machine_named,
    machine_versions,
)
from .._options import Options
from .._results import Continue, Failed, Interrupted, Ok, Paused
from .._shape import MachineShape, diff, named_steps, shape_of
from .._trace import Trace
from ._policies import Pinned, policy_now

__all__ = [
    "RECORDED",
    "Recorded",
    "changed",
    "declared",
    "fits",
    "header_identity",
    "known_shape",
    "off_path",
    "rebuild",
    "recorded_table",
    "remember",
    "resting_state",
    "segment_table",
    "trace_identity",
]

_K = TypeVar("_K")
_V = TypeVar("_V")


class _Bounded(Generic[_K, _V]):
    """A mapping that keeps its ``bound`` most recently used entries; threads (a durable
    worker's) share it, so each read or write holds its lock."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._items: collections.OrderedDict[_K, _V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K) -> _V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: _K, value: _V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.bound:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class Recorded:
    """What this process read of tables the code may no longer declare, by fingerprint.

    ``shapes``: the table shapes saved runs kept, so a run names what changed after
    its table is gone from the code. ``rebuilt``: the tables rebuilt from them, so a
    pinned run meets the same table when it is loaded and when it is resumed. Both
    keep their most recently used entries only (a long-lived process reading many
    runs does not grow without end); a shape forgotten is read again from the next
    run that kept it.
    """

    def __init__(self, shapes: int = 256, rebuilt: int = 64) -> None:
        self.shapes: _Bounded[str, MachineShape] = _Bounded(shapes)
        self.rebuilt: _Bounded[str, MachineTable] = _Bounded(rebuilt)


#: The process's memory of recorded tables (see :class:`Recorded`).
RECORDED: Final = Recorded()


def remember(shape: MachineShape) -> None:
    """Keep a saved run's table shape, so its changes can be named later."""
    RECORDED.shapes.put(shape.fingerprint, shape)


def known_shape(name: str, fingerprint: str) -> MachineShape | None:
    """The shape of the table called ``name`` with ``fingerprint``: declared, or seen saved."""
    table = declared(name, fingerprint)
    if table is not None:
        return shape_of(table)
    return RECORDED.shapes.get(fingerprint)


def fits(table: MachineTable, fingerprint: str | None) -> bool:
    """Whether a run that recorded ``fingerprint`` was made on ``table``: its fingerprint,
    or the one of its names alone that runs recorded before fingerprints covered code
    (such a run could not record more; it goes on as it did then)."""
    return fingerprint == table.fingerprint or fingerprint == fingerprint_of(names_identity(table))


def declared(name: str, fingerprint: str) -> MachineTable | None:
    for table in machine_versions(name):
        if fits(table, fingerprint):
            return table
    return None


def rebuild(shape: MachineShape, using: Iterable[MachineTable] = ()) -> MachineTable:
    """The table ``shape`` describes, for a run pinned to a table the code no longer
    declares: each step is found by its qualified name among the steps of ``using`` and
    of every declared version of the machine (:class:`MachineChangedError` naming each
    one that is not). The table is not declared: the code's versions stay as they are."""
    known = RECORDED.rebuilt.get(shape.fingerprint)
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
    # Made, a table is declared: the one it replaces (a twin), if any, is put back after.
    before = next((t for t in machine_versions(shape.name) if t.version == shape.version), None)
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
    finally:  # rebuilt, not declared: the code's versions stay as they are
        if before is None:
            forget(shape.name, shape.version)
        else:
            declare(before)
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
    RECORDED.rebuilt.put(shape.fingerprint, table)
    return table


def resting_state(trace: Trace) -> str:
    return trace.terminal or trace.entry


def off_path(traces: Sequence[Trace], table: MachineTable | MachineShape) -> str | None:
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


def changed(traces: Sequence[Trace], table: MachineTable, why: str) -> MachineChangedError:
    last = traces[-1]
    old = known_shape(last.machine, last.machine_fingerprint) if last.machine_fingerprint else None
    what = diff(old, table).summary() if old is not None else "its table is not known here"
    return MachineChangedError(
        f"The run was saved on the {last.machine} machine v{last.machine_version} "
        f"({last.machine_fingerprint}); this is the {table.name} machine v{table.version} "
        f"({table.fingerprint}). Changed: {what}. {why}"
    )


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
    table = declared(last.machine, last.machine_fingerprint)
    if table is not None:
        return table
    newest = machine_named(last.machine)
    shape = RECORDED.shapes.get(last.machine_fingerprint)
    if isinstance(policy_now(), Pinned) and shape is not None and shape.name == last.machine:
        return rebuild(shape, (newest,))
    if off_path(traces, newest) is None:
        return newest
    raise changed(
        traces,
        newest,
        "Its path is not a path of the new table: finish it on the old one (pinned), "
        "or map it (mapped).",
    )


def segment_table(trace: Trace, table: MachineTable) -> MachineTable | MachineShape:
    """The table a saved segment is checked against: the one it was recorded on when
    that is another than ``table`` and known here (declared, or kept with the run),
    else ``table``."""
    fingerprint = trace.machine_fingerprint
    if fingerprint is None or trace.machine != table.name or fits(table, fingerprint):
        return table
    return declared(trace.machine, fingerprint) or RECORDED.shapes.get(fingerprint) or table


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
