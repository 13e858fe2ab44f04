"""Migrations: a saved run moved onto another table goes on in a new segment.

The segment is entered at the state the decision names, and records the state
the run rested at (``migrated_from``), so a reader checks the move was allowed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._machine import MachineTable
from .._shape import MachineShape, gate_fault, shape_of, skips_gate
from .._trace import Trace
from ._recorded import resting_state

if TYPE_CHECKING:
    from ..store import SavedRun
    from ._decisions import ResumeDecision

__all__ = ["migrates", "migration_fault", "migration_trace"]


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
    rested = resting_state(previous)
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
