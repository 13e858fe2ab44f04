"""Saved runs: a run checkpoints at its state boundaries and resumes from the last one.

A :class:`Checkpointer` is a run's hook: after a transition that grew the
conversation (a model reply, tool results, an expansion) or ended the run, it
writes what is new (the transition, the messages and contexts no earlier checkpoint
holds, the result once there is one) to a :class:`Store` in one atomic write,
so a checkpoint costs the same at step 5 and at step 500. :func:`~agentfsm.store.restore_run`
builds the run again at the state of its last boundary, with the saved chain
and trace, and goes on from there.

What runs again after a crash:

* **exactly once** -- a tool whose result was checkpointed never runs again.
  The ``executing --executed--> propagating`` transition carries the tool
  message; a run resumed from it starts at ``propagating`` with the results.
* **at least once** -- a tool that was running when the process died (or
  whose ``executed`` checkpoint never reached the store) runs again on resume:
  the last boundary is the reply's, its calls still pending. Make such
  tools idempotent, or key their side effects on ``ToolContext.tool_call_id``
  (stable across the resume). A model call in flight is likewise made again,
  and the tools a middleware runs to answer an interrupt (approved calls) run
  once the resume claimed the run, before its first checkpoint. A process
  frozen (not killed) past its lease while a tool is in flight is the same
  case: the lease stops its next step, not the tool already running.

A store write that fails does not lose the run: the checkpointer asks the run
to pause (reason ``"checkpoint_failed: <error>"``) and keeps what it could not
write for the next write, which :meth:`Checkpointer.flush` may retry later.
When the failed write is the terminal one, the run has already ended; the
store keeps the boundary before, so a resume redoes only that last step (no
transition into a terminal runs a tool).

One place at a time: a running run's checkpointer holds the run's lease in the
store (:class:`~agentfsm.store.sqlite.SQLiteStore`), so a second process that
resumes it meanwhile is refused with :class:`RunInUseError`, and a new run
given a taken id with :class:`RunExistsError` (unless ``replace=True``).
A resume claims the run before anything runs, approved calls included: the
claim is a compare-and-set on the run as it was loaded, so a resumer that
loaded it before another process went on (or finished it:
:class:`RunFinishedError`) is refused and runs nothing. The holder checks its
lease at every state boundary before a model call or a tool batch, and one
that lost it (a renewal failed, another process took the run over) pauses
there, its chain kept in memory.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any, Literal

from .._results import Failed, Interrupted, Ok, Paused, Terminal
from .._run import Run
from .._serialization import FORMAT, Packer, compact_json
from .._trace import Transition
from .._versions import header_identity
from ._base import (
    RUN_STATUS,
    Leases,
    RunExistsError,
    RunInUseError,
    RunNotFoundError,
    RunStatus,
    Store,
    StoreWrite,
    new_owner,
)
from ._load import SAVED_OPTIONS, SavedRun

__all__ = ["Checkpointer", "checkpoint"]


def _summary(result: Terminal) -> str | None:
    match result:
        case Ok(chain, tool_result):
            if tool_result is not None:
                return f"{tool_result.name}: {tool_result.text[:80]}"
            last = chain.last_message
            return last.text[:80] if last is not None else None
        case Paused(chain):
            reason = chain.custom_context.get("pause_reason")
            return None if reason is None else str(reason)
        case Interrupted(_, data):
            requests = data.get("action_requests")
            if isinstance(requests, list | tuple):
                names = [r.get("tool_name") for r in requests if isinstance(r, Mapping)]
                return f"approval needed: {', '.join(str(n) for n in names)}"
            return str(data.get("type") or "interrupt")
        case Failed(_, error):
            return f"{error.type}: {error.message}"
    return None


class Checkpointer:
    """A run's hook that saves it at the boundaries a resume needs.

    Attach with :func:`checkpoint`. ``error`` is the last write's failure (None
    once a write succeeds again); ``writes`` counts successful writes.
    """

    def __init__(
        self,
        run: Run,
        store: Store,
        run_id: str,
        options: Mapping[str, Any],
        packer: Packer,
        *,
        segment: int,
        prior_steps: int,
        saved: int,
        new_segment: bool,
        marks: tuple[int, int] = (0, 0),
        head: str | None = None,
        owner: str | None = None,
        command: Mapping[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.store = store
        #: The store as a keeper of leases, or None when it keeps none (or a lease of 0 s).
        self._leases: Leases | None = store if isinstance(store, Leases) and store.lease else None
        self.run_id = run_id
        self.options = dict(options)
        self.segment = segment
        self.error: Exception | None = None
        self.writes = 0
        #: The lease holder's name in the store: host, process, and this checkpointer.
        self.owner = owner or new_owner()
        #: The run as this writer read it: its first write extends exactly that.
        self.head = head
        #: Until when (this host's clock) the lease is known held; None: no lease.
        self._lease_until: float | None = None
        #: Why the lease was lost (a renewal failed, another process took the run).
        self._lost: Exception | None = None
        self.create = False
        self.replace = False
        #: The message log of the last chain written: a chain that grew has another one.
        self._written: object = None
        self._packer = packer
        self._prior_steps = prior_steps
        self._saved = saved
        self._messages_saved, self._contexts_saved = marks
        self._header: dict[str, Any] | None = None
        #: The event loop the lease renewal runs on (``False``: the store has no lease).
        self._lease_loop: asyncio.AbstractEventLoop | Literal[False] | None = None
        if new_segment:
            self._header = {
                "format": FORMAT,
                "machine": run.table.name,
                **header_identity(run.table, run.trace),
                "entry": run.trace.entry,
                "chain": packer.chain(run.chain),
                "options": self.options,
                "started": time.time(),
            }
            if command:
                self._header["command"] = dict(command)

    @classmethod
    def of(cls, run: Run) -> Checkpointer:
        """The checkpointer attached to ``run``."""
        for hook in run.hooks:
            if isinstance(hook, Checkpointer):
                return hook
        raise LookupError(f"{run!r} has no checkpointer; attach one with checkpoint()")

    def transition(self, run: Run, transition: Transition) -> None:
        # Only the boundaries a resume needs: where the conversation changed (a reply,
        # tool results, an expansion), the end, and a retry of a failed write. The states
        # in between are pure: a resumed run does them again from the last one written.
        # A run's every move comes here, so a lease known held costs one clock reading.
        ended = run.result is not None
        if ended or self.error is not None or run.chain.messages is not self._written:
            self.flush()
        elif self._lost is not None or (
            self._lease_until is not None and time.time() >= self._lease_until
        ):
            self._check_lease(run)
        if self._lease_loop is not False and not ended:
            loop = asyncio._get_running_loop()
            if loop is not self._lease_loop and loop is not None:
                self._keep_lease(loop)

    def _check_lease(self, run: Run) -> None:
        """Before the next step's work (a model call, a tool batch): still the holder?
        A lease known held costs nothing; one near its end is renewed in one statement,
        and one that cannot be (taken over, ended elsewhere, a failing store) makes the
        next step pause instead of doing its work."""
        now = time.time()
        if self._lost is None and self._lease_until is not None and now < self._lease_until:
            return
        leases = self._leases
        if self._lost is None and leases is None:
            self._lease_until = None
            return
        if self._lost is None and leases is not None:
            try:
                held = bool(leases.renew(self.run_id, self.owner))
            except Exception as exc:
                self._lost = exc
            else:
                if held:
                    self._lease_until = now + leases.lease / 2
                    return
                self._lost = RunInUseError(
                    f"Run {self.run_id!r} was taken over by another process (this holder's "
                    "lease lapsed); this copy stops so the two do not splice."
                )
        lost = self._lost
        self.error = lost
        run.request_pause(f"checkpoint_failed: {type(lost).__name__}: {lost}")

    def _keep_lease(self, loop: asyncio.AbstractEventLoop) -> None:
        """While a step is in flight (a long tool, a slow model), renew the run's lease
        every third of it, so no other process takes the run over meanwhile; between
        steps the lease is left to the writes, so a host that stops stepping lets it
        lapse. The timer runs on the loop the run steps on (moved with the run when it
        goes on on another loop) and holds the run weakly: a sync tool without a timeout
        blocks the loop and renews nothing."""
        leases = self._leases
        if leases is None:
            self._lease_loop = False
            return
        self._lease_loop = loop
        every = leases.lease / 3
        holder = weakref.ref(self)

        def tick() -> None:
            checkpointer = holder()
            if (
                checkpointer is None
                or checkpointer.run.done
                or checkpointer._lease_loop is not loop
            ):
                return
            if checkpointer.run.busy and checkpointer.error is None:
                checkpointer._renew_now(leases)
            loop.call_later(every, tick)

        loop.call_later(every, tick)

    def _renew_now(self, leases: Leases) -> None:
        """The timer's renewal: a failed one is noted, and the next boundary checks
        the lease again in full (so a holder that lost it stops there)."""
        now = time.time()
        try:
            held = leases.renew(self.run_id, self.owner)
        except Exception:  # the next boundary asks again, and stops if it fails
            self._lease_until = 0.0
            return
        if held:
            self._lease_until = now + leases.lease / 2
        else:
            self._lease_until = 0.0
            self._lost = RunInUseError(
                f"Run {self.run_id!r} was taken over by another process while a step was "
                "in flight; this copy stops at its next boundary."
            )

    def flush(self) -> bool:
        """Write everything not saved yet; on failure ask the run to pause. True if written."""
        run = self.run
        started = time.time()
        try:
            if self._lost is not None:
                raise self._lost
            write = self._pending()
            self.store.write(self.run_id, write)
        except Exception as exc:
            self.error = exc
            if not run.done:
                run.request_pause(f"checkpoint_failed: {type(exc).__name__}: {exc}")
            return False
        self.error = None
        if self._leases is not None:  # a write holds the lease that long
            self._lease_until = started + self._leases.lease / 2
        self.writes += 1
        self.create = False
        self._written = run.chain.messages
        self._header = None
        self._saved = write.steps - self._prior_steps
        self._messages_saved += len(write.messages)
        self._contexts_saved += len(write.contexts)
        return True

    def _pending(self) -> StoreWrite:
        run = self.run
        packer = self._packer
        trace = run.trace.transitions
        steps = len(trace)
        transitions = packer.transition_rows(trace, self._saved)
        result = agent_state = summary = None
        status: RunStatus = "running"
        if run.result is not None:
            result = compact_json(packer.result(run.result))
            status = RUN_STATUS[type(run.result)]
            summary = _summary(run.result)
            if hasattr(type(run), "agent_state"):  # an agent's run maps back to its state
                try:
                    state = run.agent_state  # type: ignore[attr-defined]
                    agent_state = packer.agent_state_text(state)
                except Exception:  # an after_model hook's failure is the host's to see
                    agent_state = None
        header = None if self._header is None else compact_json(self._header)
        messages = packer.message_rows(self._messages_saved)
        contexts = packer.context_rows(self._contexts_saved)
        return StoreWrite(
            segment=self.segment,
            state=run.state,
            status=status,
            steps=self._prior_steps + steps,
            header=header,
            messages=messages,
            contexts=contexts,
            transitions=transitions,
            result=result,
            agent_state=agent_state,
            summary=summary,
            owner=self.owner,
            create=self.create,
            replace=self.replace,
            claim=self.writes == 0,
            head=self.head if self.writes == 0 else None,
        )


def checkpoint(
    run: Run,
    store: Store,
    *,
    run_id: str | None = None,
    options: Mapping[str, Any] | None = None,
    saved: SavedRun | None = None,
    new_segment: bool = False,
    replace: bool = False,
    owner: str | None = None,
    command: Mapping[str, Any] | None = None,
) -> Checkpointer:
    """Save ``run`` to ``store`` now and at every transition from here on.

    A new run gets ``run_id`` (a fresh id by default). With ``saved``, the run
    continues that saved run: in its last segment when it had not ended (the
    run restored at ``saved.state``), in a new segment when it had.
    ``new_segment`` starts a new segment for a run that had not ended (one
    restored afresh at its entry). ``options`` are the serializable ones (``until_tool``,
    ``require_tool_success``, ``max_runs``), kept for the resume.

    The first write claims the run: a new run's id that the store has is
    refused (:class:`RunExistsError`) unless ``replace``; a run another process
    is running is refused (:class:`RunInUseError`), as is a saved run that went on
    or ended since it was loaded. Nothing is attached then. ``owner`` is the lease
    holder's name when the run was claimed already (:func:`restore_run` claims
    before approved calls run). ``command`` (a new run only) records how the command line
    started it, as JSON (``{"agent": "MODULE:ATTR"}``): ``agentfsm runs resume`` takes its
    agent from there, and the commands it prints name it.
    """
    kept = {k: v for k, v in dict(options or {}).items() if k in SAVED_OPTIONS}
    if saved is None:
        checkpointer = Checkpointer(
            run,
            store,
            run_id or uuid.uuid4().hex,
            kept,
            Packer(),
            segment=0,
            prior_steps=0,
            saved=0,
            new_segment=True,
            owner=owner,
            command=command,
        )
    else:
        packer = Packer(saved.messages, saved.contexts)
        marks = (len(saved.messages), len(saved.contexts))
        prior = sum(len(t) for t in saved.traces[:-1])
        if saved.done or new_segment:
            checkpointer = Checkpointer(
                run,
                store,
                saved.run_id,
                kept or saved.options,
                packer,
                segment=len(saved.traces),
                prior_steps=saved.steps,
                saved=0,
                new_segment=True,
                marks=marks,
                head=saved.head,
                owner=owner,
            )
        else:
            checkpointer = Checkpointer(
                run,
                store,
                saved.run_id,
                saved.options,
                packer,
                segment=len(saved.traces) - 1,
                prior_steps=prior,
                saved=len(saved.trace),
                new_segment=False,
                marks=marks,
                head=saved.head,
                owner=owner,
            )
    checkpointer.create = saved is None
    checkpointer.replace = replace
    if not checkpointer.flush() and isinstance(
        checkpointer.error, RunExistsError | RunInUseError | RunNotFoundError
    ):
        raise checkpointer.error
    run.add_hook(checkpointer, first=True)  # saved before any other hook hears the step
    return checkpointer
