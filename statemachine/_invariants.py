"""Resume-time checks: a saved run is data, so it is checked against the machine before it runs.

A checkpoint or a kept :class:`~agentfsm.state.AgentState` may have been
damaged or edited. Nothing in one may make a tool run that the machine would
not have run, above all an approval-gated call without a human's decision:

* :func:`check_trace` -- a saved trace is a path of the machine it names.
* :func:`approval_gap` -- the gated calls a run restored at a state would run
  without passing the approval check. Which states ask for approval and which
  run tools is read from the table's declared effects (:mod:`agentfsm.effects`),
  never from state or step names: the machine leaves its approval state with a
  gated call pending only once the call was decided (``custom_context["decided"]``,
  recorded with the answer that entered the segment), so a run saved where tools
  run next with an undecided one is not a run the machine produced; the restore
  path asks again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._approval import DECIDED
from ._errors import FormatError, InvariantError
from ._machine import MachineTable, UnknownMachineError, machine_named
from ._messages import Message, ToolCall
from ._middleware.human_in_the_loop import HumanInTheLoop, unanswered_calls
from ._shape import MachineShape, gate_shape
from ._steps import pending_calls
from ._trace import Trace
from ._versions import migration_fault, segment_table

if TYPE_CHECKING:
    from ._chain import LLMChain

__all__ = [
    "InvariantError",
    "approval_gap",
    "check_resumable",
    "check_trace",
    "check_traces",
]


def check_trace(
    trace: Trace,
    table: MachineTable | MachineShape,
    *,
    ended: bool | None = None,
    previous: tuple[Trace, MachineTable | MachineShape] | None = None,
) -> None:
    """Refuse a trace that is not a path of ``table`` (:class:`FormatError`), nor its
    child runs' traces paths of theirs (a machine not declared here: its error).

    ``ended`` says whether the run has a result: a run with one ends at a
    terminal, a run without one at a working state. A segment that a migration
    opened enters at the state the run was moved to, checked against
    ``previous``: the segment before and the table it was recorded on.
    """
    if trace.machine != table.name:
        raise FormatError(
            f"The saved run is of machine {trace.machine!r}, not {table.name!r}: "
            "it cannot be resumed on this agent."
        )
    if trace.migrated_from is not None:
        fault = (
            "it is the run's first segment"
            if previous is None
            else migration_fault(previous[0], previous[1], trace, table)
        )
        if fault is not None:
            raise FormatError(
                f"The saved run's migration to {trace.entry!r} is not one: {fault}; "
                "the checkpoint is damaged or was edited."
            )
    elif trace.entry not in table.entries.values():
        raise FormatError(
            f"The saved run enters the {table.name} machine at {trace.entry!r}, which is "
            f"not an entry (entries: {sorted(set(table.entries.values()))})."
        )
    state = trace.entry
    for index, step in enumerate(trace.transitions):
        dest = table.successors.get(step.source, {}).get(step.trigger)
        if step.source != state or dest is None or dest != step.dest:
            raise FormatError(
                f"Transition {index} of the saved run, {step.source} --{step.trigger}--> "
                f"{step.dest}, is not a move of the {table.name} machine from {state!r}: "
                "the checkpoint is damaged or was edited."
            )
        state = dest
        for child in step.children:
            _check_child(child)
    if ended is not None and (state in table.terminals) != ended:
        raise FormatError(
            f"The saved run stops at {state!r} but "
            + ("has a result" if ended else "has no result")
            + ": the checkpoint is damaged or was edited."
        )


def _check_child(child: Trace) -> None:
    """A child run's saved trace is a path of its own machine (shown, never resumed from:
    a waiting child goes on from its parent's interrupt)."""
    try:
        declared = machine_named(child.machine, child.machine_version)
    except UnknownMachineError:
        declared = machine_named(child.machine)
    check_trace(child, segment_table(child, declared))


def check_traces(traces: Sequence[Trace], table: MachineTable, *, ended: bool) -> None:
    """:func:`check_trace` for a saved run's segments; only the last one may be unfinished.

    Each segment is checked against the table it was recorded on when that is
    another version of ``table`` known here (a run migrated from it), else
    against ``table``.
    """
    if not traces:
        raise FormatError("The saved run has no segment: the store is damaged")
    before: tuple[Trace, MachineTable | MachineShape] | None = None
    for index, trace in enumerate(traces):
        on = segment_table(trace, table)
        check_trace(trace, on, ended=ended if index == len(traces) - 1 else None, previous=before)
        before = (trace, on)


def check_resumable(
    traces: Sequence[Trace],
    ended: bool,
    chain: LLMChain,
    table: MachineTable,
    middleware: Sequence[Any],
    *,
    state: str | None = None,
) -> bool:
    """Check a saved run before it is restored; True when it must ask for approval again.

    Every segment must be a path of ``table`` (the last one ending at a
    terminal exactly when the run has a result), else :class:`FormatError`.
    A run that would run a gated call unasked is re-entered at its entry
    instead, where the approval state asks. ``state`` is where the run goes on
    (a migrated run's new state); by default where it rests.
    """
    check_traces(traces, table, ended=ended)
    last = traces[-1]
    state = state or last.terminal or last.entry
    return not ended and bool(
        approval_gap(
            chain.last_message,
            chain.exchanged_messages,
            state,
            middleware,
            table,
            chain.custom_context.get(DECIDED),
        )
    )


def _gates(middleware: Sequence[Any]) -> list[HumanInTheLoop]:
    return [m for m in middleware if isinstance(m, HumanInTheLoop)]


def approval_gap(
    last: Message | None,
    exchanged: Sequence[Message],
    state: str,
    middleware: Sequence[Any],
    table: MachineTable | MachineShape,
    decided: Mapping[str, Any] | None = None,
) -> list[ToolCall]:
    """Gated calls a run of ``table`` restored at ``state`` would execute with no approval.

    ``last`` is the chain's last message (what a ``tools`` step runs),
    ``exchanged`` the run's messages (what the approval step looks at), ``decided``
    the calls the approval state decided in this segment (``custom_context["decided"]``,
    recorded with the answer that entered it). A run from which some way on reaches a
    state that runs tools before any approval state runs them unasked; one whose way on
    meets an approval state first is asked there, when the gate sees the calls in
    ``exchanged``.
    """
    gates = _gates(middleware)
    calls = [c for c in pending_calls(last) if not decided or c.call_id not in decided]
    if not gates or not calls:
        return []
    shape = gate_shape(table)
    if not shape.runs_calls_ungated(state):
        if not shape.awaits_decision(state):
            return []  # no way on runs the pending calls
        if any(g.gated(unanswered_calls(exchanged)) for g in gates):
            return []  # the approval state interrupts: nothing of that batch runs
    return [c for c in calls if any(g.gated([c]) for g in gates)]
