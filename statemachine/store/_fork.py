"""Runs saved without running anything: a fork of a run's past, a migration's segment.

:func:`fork_run` saves a new run whose past is another run's up to one of its steps;
:func:`migrate_run` records a run's move onto another version of its machine as a new
segment. Neither runs a model or a tool: a resume goes on from what they saved.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._chain import LLMChain
from .._invariants import check_traces
from .._machine import UnknownMachineError
from .._run import Run
from .._serialization import (
    Binder,
    FormatError,
    Packer,
    UnknownToolError,
    Unpacker,
    compact_json,
    parse_json,
)
from .._trace import Trace
from .._versions import ResumeDecision, migrates, migration_trace, recorded_table
from ._base import Deletes, Leases, ResumeError, Store, StoreWrite, new_owner
from ._checkpointer import checkpoint
from ._load import SavedRun, decode_segments

__all__ = ["fork_run", "migrate_run", "migration_trace"]


def migrate_run(store: Store, saved: SavedRun, decision: ResumeDecision) -> None:
    """Record ``decision``'s move of a saved run that had not ended, running nothing: a new
    segment on ``decision.table``, entered at ``decision.state``. A later resume finds the
    run on that table, unchanged, and needs no policy. Claimed as a resume claims (a run
    that went on since it was loaded is refused), and given back at once."""
    if not migrates(saved, decision):
        raise ResumeError(
            f"Run {saved.run_id!r} is {saved.status} on its table: there is no move to record"
        )
    run = Run(decision.table, saved.chain, decision.state)
    run.trace = migration_trace(saved, decision)
    owner = new_owner()
    checkpointer = checkpoint(
        run, store, options=saved.options, saved=saved, new_segment=True, owner=owner
    )
    if isinstance(store, Leases):  # nothing runs it: the next resume may take it at once
        with contextlib.suppress(Exception):  # the lease lapses by itself anyway
            store.release(saved.run_id, owner, running=True)
    if checkpointer.error is not None:
        raise checkpointer.error


def fork_run(store: Store, run_id: str, at_step: int, *, new_id: str | None = None) -> str:
    """Save a new run whose past is run ``run_id``'s up to its step ``at_step``; its id.

    Steps are numbered as the run page numbers them: 1 is the run's first transition,
    counted over every segment. The new run (``new_id``, a fresh id by default; a taken
    one is refused with :class:`RunExistsError`) keeps the segments before that step's
    and that segment up to the step: it rests where the step went, with the chain the
    step left, and names its parent (:attr:`SavedRun.forked_from`). The prefix is
    checked to be a path of the machine the run names.

    A fork rests at a working state, where a resume goes on: a step into a terminal
    (ok, error, paused, interrupted) ended its segment with a result the new run would
    not have, so it cannot be forked from (fork at the step before it; ValueError). The
    new run is saved running and unclaimed: :meth:`Agent.resume_run
    <agentfsm.Agent.resume_run>` goes on from there, asking again for any approval a
    gated call would need. The parent is only read.
    """
    stored = store.read(run_id)
    try:
        unpacker = Unpacker(
            [parse_json(m) for m in stored.messages],
            [parse_json(c) for c in stored.contexts],
            Binder(None, (), (), False),
        )
        headers, firsts, traces = decode_segments(stored, unpacker)
    except (FormatError, UnknownToolError, UnknownMachineError):
        raise
    except Exception as exc:
        raise FormatError(f"Run {run_id!r} cannot be read: {type(exc).__name__}: {exc}") from exc
    total = sum(len(t) for t in traces)
    if isinstance(at_step, bool) or not isinstance(at_step, int) or not 1 <= at_step <= total:
        raise ValueError(
            f"Run {run_id!r} has steps 1 to {total}; there is no step {at_step!r} to fork at"
        )
    before = 0
    number = 0
    for number, trace in enumerate(traces):  # noqa: B007  (the segment that holds the step)
        if at_step <= before + len(trace):
            break
        before += len(trace)
    cut = traces[number]
    kept = [
        *traces[:number],
        attrs.evolve(cut, transitions=list(cut.transitions[: at_step - before])),
    ]
    table = recorded_table(kept, headers[: number + 1])
    step = kept[-1].transitions[-1]
    if step.dest in table.terminals:
        raise ValueError(
            f"Step {at_step} of run {run_id!r} ({step.source} --{step.trigger}--> {step.dest}) "
            f"ends a segment at {step.dest}: a fork rests at a working state; fork at step "
            f"{at_step - 1} or earlier"
            + (f", or at step {at_step + 1} or later" if at_step < total else "")
        )
    check_traces(kept, table, ended=False)
    fork_id = new_id or uuid.uuid4().hex
    owner = new_owner()
    _write_fork(store, fork_id, owner, kept, headers, firsts, (run_id, at_step))
    if isinstance(store, Leases):  # nothing runs it: a resume may take it at once
        with contextlib.suppress(Exception):  # the lease lapses by itself anyway
            store.release(fork_id, owner, running=True)
    return fork_id


def _write_fork(
    store: Store,
    fork_id: str,
    owner: str,
    traces: Sequence[Trace],
    headers: Sequence[Mapping[str, Any]],
    firsts: Sequence[LLMChain],
    parent: tuple[str, int],
) -> None:
    """The fork's segments, one write each, packed afresh (the parent's later messages are
    not the fork's); a fork left half written is deleted."""
    packer = Packer()
    steps = 0
    written = False
    try:
        for number, trace in enumerate(traces):
            marks = (len(packer.messages), len(packer.contexts))
            header = {**headers[number], "chain": packer.chain(firsts[number])}
            if number == 0:
                header["forked_from"] = {"run_id": parent[0], "step": parent[1]}
            transitions = packer.transition_rows(trace.transitions, 0)
            steps += len(trace)
            store.write(
                fork_id,
                StoreWrite(
                    segment=number,
                    state=trace.terminal or trace.entry,
                    status="running",
                    steps=steps,
                    header=compact_json(header),
                    messages=packer.message_rows(marks[0]),
                    contexts=packer.context_rows(marks[1]),
                    transitions=transitions,
                    summary=f"forked from {parent[0]} at step {parent[1]}",
                    owner=owner,
                    create=number == 0,
                    claim=number == 0,
                ),
            )
            written = True
    except BaseException:
        if isinstance(store, Deletes) and written:
            with contextlib.suppress(Exception):
                store.delete(fork_id)
        raise
