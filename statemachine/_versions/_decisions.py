"""Resume decisions: whether and how one saved run goes on on a table.

:func:`check_resume` decides for a run and a table under a policy;
:func:`resume_decision` is what an agent resuming a run asks, under the policy
of the :func:`~._policies.resuming` block it runs in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .._errors import MachineChangedError, OtherMachineError
from .._machine import MachineTable, machine_named
from .._replay import _traces
from .._shape import (
    MachineDiff,
    MachineShape,
    diff,
    entry_faults,
    gate_fault,
    over,
    shape_of,
    skips_gate,
)
from .._trace import Trace
from ._policies import Compatible, Pinned, Policy, policy_now
from ._recorded import changed, declared, fits, known_shape, off_path, rebuild, resting_state

if TYPE_CHECKING:
    from ..store import SavedRun

__all__ = ["ResumeDecision", "check_resume", "resume_decision"]


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
    resting = resting_state(last)
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
        raise changed(
            traces,
            new_table,
            "Resume it with a policy: pinned, compatible or mapped(...) (agentfsm.versions).",
        )
    if isinstance(policy, Pinned):
        table = declared(last.machine, fingerprint)
        if table is None and old is not None and old.name == new_table.name:
            table = rebuild(old, (new_table,))
        if table is None:
            raise changed(
                traces,
                new_table,
                f"Pinned: declare that table (version={last.machine_version}) in this "
                "process to finish the run on it.",
            )
        return ResumeDecision(policy="pinned", table=table, state=resting, diff=changes)
    if isinstance(policy, Compatible):
        off = off_path(traces, new_table)
        if off is None and resting not in new_table.states:
            off = f"it rests at {resting!r}, which the new table lacks"
        if off is None and old is not None:
            off = _gate_off(old, shape_of(new_table), resting, last)
        if off is not None:
            raise changed(traces, new_table, f"Not compatible: {off}.")
        return ResumeDecision(policy="compatible", table=new_table, state=resting, diff=changes)
    if policy.old.fingerprint != fingerprint or policy.new.fingerprint != new_table.fingerprint:
        raise changed(
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


def resume_decision(saved: SavedRun, table: MachineTable) -> ResumeDecision:
    """How a saved run goes on when an agent running ``table`` resumes it.

    Unchanged, or allowed by the policy of :func:`resuming`: on ``table`` (or
    the pinned one, which the agent must run), at the state the run rests at or
    the one a mapping moves it to. Else :class:`MachineChangedError`.
    """
    last = saved.trace
    if last.machine != table.name:  # another machine altogether: the agent says so
        recorded = last.machine_fingerprint and declared(last.machine, last.machine_fingerprint)
        return ResumeDecision(
            policy="unchanged", table=recorded or machine_named(last.machine), state=saved.state
        )
    decision = check_resume(saved, table, policy_now())
    if decision.table is not table:
        raise MachineChangedError(
            f"Run {saved.run_id!r} is pinned to the {decision.table.name} machine "
            f"v{decision.table.version}; resume it with an agent of that table "
            "(Agent(..., machine=...))."
        )
    return decision
