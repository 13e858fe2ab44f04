"""Saved runs: a run checkpoints at its state boundaries and resumes from the last one.

A :class:`Checkpointer` is a run's hook: after a transition that grew the
conversation (a model reply, tool results, an expansion) or ended the run, it
writes what is new (the transition, the messages and contexts no earlier checkpoint
holds, the result once there is one) to a :class:`Store` in one atomic write,
so a checkpoint costs the same at step 5 and at step 500. :func:`restore_run`
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
import contextlib
import os
import socket
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from .._invariants import check_resumable, check_traces
from .._state import AgentState
from ..chain import Callbacks, LLMChain
from ..machine import UnknownMachineError
from ..messages import Message
from ..results import Failed, Interrupted, Ok, Paused, Terminal
from ..run import Run
from ..serialization import (
    FORMAT,
    Binder,
    FormatError,
    Models,
    Packer,
    UnknownToolError,
    Unpacker,
    check_format,
    compact_json,
    converter,
    parse_json,
)
from ..tools import Tool
from ..trace import Trace, Transition
from ..versions import (
    MachineChangedError,
    ResumeDecision,
    header_identity,
    migrates,
    recorded_table,
    resume_decision,
)
from ..versions import trace_identity as _identity
from .base import (
    RUN_STATUS,
    ResumeError,
    RunExistsError,
    RunInUseError,
    RunNotFoundError,
    RunStatus,
    Store,
    StoredRun,
    StoreWrite,
)

if TYPE_CHECKING:
    from ..agent import Agent, AgentRun

__all__ = [
    "Checkpointer",
    "SavedRun",
    "checkpoint",
    "execute_options",
    "fork_run",
    "load_run",
    "migrate_run",
    "restore_run",
    "start_run",
]

#: The options a checkpoint keeps; ``should_pause``, ``middleware`` and
#: ``extra_steps`` are code, passed again on resume.
SAVED_OPTIONS: Final = ("until_tool", "require_tool_success", "max_runs")

#: The statuses of a run that is over: the store refuses to claim or write it again.
_FINISHED: Final = ("ok", "error")


@attrs.frozen
class SavedRun:
    """A run as its last checkpoint left it, decoded.

    ``traces`` has one trace per segment: a run resumed after it ended
    (paused, interrupted) goes on in a new segment that enters the machine
    afresh, so each trace is a path of the machine.
    """

    run_id: str
    status: RunStatus
    #: The machine state of the last boundary (a terminal when the run ended).
    state: str
    #: The chain at that boundary (the result's chain when the run ended).
    chain: LLMChain
    traces: tuple[Trace, ...]
    options: Mapping[str, Any]
    result: Terminal | None
    agent_state: AgentState | None
    #: The run's message and context tables, which the chains share.
    messages: tuple[Message, ...] = attrs.field(repr=False, eq=False)
    contexts: tuple[Mapping[str, Any], ...] = attrs.field(repr=False, eq=False)
    #: The store's head of the run when it was read: a resume claims the run only
    #: if it is still there (:attr:`StoredRun.head <agentfsm.store.StoredRun.head>`).
    head: str | None = attrs.field(default=None, repr=False, eq=False)
    #: The run this one was forked from and the step it was forked at
    #: (:func:`fork_run`), or None for a run started afresh.
    forked_from: tuple[str, int] | None = None

    @property
    def trace(self) -> Trace:
        """The last segment's trace."""
        return self.traces[-1]

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def steps(self) -> int:
        return sum(len(t) for t in self.traces)


def _saved_options(value: Any) -> dict[str, Any]:
    """A segment's saved options, checked: a checkpoint is data, not code."""
    options = dict(value or {}) if isinstance(value, Mapping | None) else None
    if options is None or not set(options) <= set(SAVED_OPTIONS):
        raise FormatError(f"Saved options {value!r} are not {list(SAVED_OPTIONS)}")
    names = options.get("until_tool", [])
    runs = options.get("max_runs", 1)
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or not isinstance(options.get("require_tool_success", False), bool)
        or isinstance(runs, bool)
        or not isinstance(runs, int)
        or runs < 1
    ):
        raise FormatError(f"Saved options {value!r} are malformed")
    return options


def load_run(
    store: Store,
    run_id: str,
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> SavedRun:
    """The saved run ``run_id``, bound as :func:`agentfsm.serialization.load` binds.

    Each segment must be a path of the machine it names (:class:`FormatError`
    if not, :class:`~agentfsm.machine.UnknownMachineError` for a machine not
    declared in this process).
    """
    stored = store.read(run_id)
    binder = Binder(models, tools, callbacks, strict)
    try:
        unpacker = Unpacker(
            [parse_json(m) for m in stored.messages],
            [parse_json(c) for c in stored.contexts],
            binder,
        )
        headers, firsts, traces = _segments(stored, unpacker)
        if not traces:
            raise FormatError(f"Run {run_id!r} has no segment: the store is damaged")
        header, first = headers[-1], firsts[-1]
        result: Terminal | None = None
        if stored.result is not None:
            decoded = unpacker.result(parse_json(stored.result))
            if not isinstance(decoded, Ok | Paused | Interrupted | Failed):
                raise FormatError(f"Run {run_id!r} has a result that is not terminal")
            result = decoded
        table = recorded_table(traces, headers)
        check_traces(traces, table, ended=result is not None)
        forked_from = _fork_point(headers[0])
        agent_state = None
        if result is not None:
            _check_logged(run_id, result, traces[-1])
            if stored.agent_state is not None:
                agent_state = converter.structure(parse_json(stored.agent_state), AgentState)
                _check_agent_state(run_id, agent_state, result)
        options = _saved_options(header.get("options"))
    except (FormatError, UnknownToolError, UnknownMachineError, MachineChangedError):
        raise
    except Exception as exc:
        raise FormatError(f"Run {run_id!r} cannot be read: {type(exc).__name__}: {exc}") from exc
    status: RunStatus = RUN_STATUS[type(result)] if result is not None else "running"
    if stored.status != status and {stored.status, status} & set(_FINISHED):
        # The store refuses to run a run its row says is over: the row and the log agree on that.
        raise _edited(run_id, f"the run's status ({stored.status!r}; its log says {status!r})")
    last = traces[-1]
    if result is not None:
        chain = result.chain
    elif last.transitions:
        chain = last.transitions[-1].chain
    else:
        chain = first
    return SavedRun(
        run_id=run_id,
        status=status,
        state=last.terminal or last.entry,
        chain=chain,
        traces=tuple(traces),
        options=options,
        result=result,
        agent_state=agent_state,
        messages=tuple(unpacker.messages),
        contexts=tuple(unpacker.contexts),
        head=stored.head,
        forked_from=forked_from,
    )


def _segments(
    stored: StoredRun, unpacker: Unpacker
) -> tuple[list[Mapping[str, Any]], list[LLMChain], list[Trace]]:
    """A stored run's segments decoded: each one's header, first chain and trace."""
    headers: list[Mapping[str, Any]] = []
    firsts: list[LLMChain] = []
    traces: list[Trace] = []
    for header_text, transitions in zip(stored.headers, stored.transitions, strict=True):
        header = parse_json(header_text)
        check_format(header)
        headers.append(header)
        firsts.append(unpacker.chain(header["chain"]))
        traces.append(
            Trace(
                entry=str(header["entry"]),
                transitions=unpacker.transitions([parse_json(t) for t in transitions]),
                machine=str(header["machine"]),
                **_identity(header),
            )
        )
    return headers, firsts, traces


def _fork_point(header: Mapping[str, Any]) -> tuple[str, int] | None:
    """The parent a forked run's first header names, checked (a header is data)."""
    point = header.get("forked_from")
    if point is None:
        return None
    run_id = point.get("run_id") if isinstance(point, Mapping) else None
    step = point.get("step") if isinstance(point, Mapping) else None
    if not isinstance(run_id, str) or type(step) is not int or step < 1:
        raise FormatError(f"A run's fork point {point!r} is not (run id, step)")
    return run_id, step


def _edited(run_id: str, what: str) -> FormatError:
    return FormatError(
        f"Run {run_id!r}: {what} does not match its checkpoints: the store was edited or "
        "is damaged. Nothing was run."
    )


def _check_logged(run_id: str, result: Terminal, last: Trace) -> None:
    """The result's conversation is the one the log's last transition left: the run's row
    is a copy of the log, never a second source."""
    transitions = last.transitions
    if not transitions or tuple(transitions[-1].chain.messages) != tuple(result.chain.messages):
        raise _edited(run_id, "the result's conversation")
    if isinstance(result, Interrupted):
        _check_interrupt(run_id, result.data)


def _check_interrupt(run_id: str, data: Any) -> None:
    """An approval interrupt's data has the shape its middleware reads (else FormatError)."""
    if not isinstance(data, Mapping):
        raise _edited(run_id, "the interrupt")
    if "hitl_tool_call_ids" not in data:
        return
    requests = data.get("action_requests")
    ids = data.get("hitl_tool_call_ids")
    configs = data.get("review_configs")
    if not (
        isinstance(requests, list)
        and isinstance(ids, list)
        and isinstance(configs, Mapping)
        and all(isinstance(i, str) for i in ids)
        and all(
            isinstance(r, Mapping)
            and isinstance(r.get("tool_call_id"), str)
            and isinstance(r.get("tool_name"), str)
            and isinstance(r.get("arguments"), Mapping)
            for r in requests
        )
        and all(
            isinstance(c, Mapping) and isinstance(c.get("allowed_decisions", []), list)
            for c in configs.values()
        )
    ):
        raise FormatError(f"Run {run_id!r} has an approval interrupt that is not one")


def _check_agent_state(run_id: str, state: AgentState, result: Terminal) -> None:
    """The saved agent state says what the result says: the conversation (less a system
    prompt), the status, the interrupt, the error's type. An ok run's state is its
    after_model hooks' (they may rewrite it), so only its status is checked."""
    if isinstance(result, Ok):
        if state.status not in ("ok", "error"):
            raise _edited(run_id, "the saved agent state")
        return
    messages = tuple(result.chain.messages)
    if messages and messages[0].role == "system" and tuple(state.messages) == messages[1:]:
        messages = messages[1:]
    same = tuple(state.messages) == messages and state.status == RUN_STATUS[type(result)]
    if isinstance(result, Interrupted):
        same = same and state.interrupt_data == result.data
    elif isinstance(result, Failed):
        same = same and state.error is not None and state.error.type == result.error.type
    if not same:
        raise _edited(run_id, "the saved agent state")


# ---------------------------------------------------------------- checkpointing


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
    ) -> None:
        self.run = run
        self.store = store
        self.run_id = run_id
        self.options = dict(options)
        self.segment = segment
        self.error: Exception | None = None
        self.writes = 0
        #: The lease holder's name in the store: host, process, and this checkpointer.
        self.owner = owner or _new_owner()
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
        renew = getattr(self.store, "renew", None)
        lease = getattr(self.store, "lease", None)
        if self._lost is None and (renew is None or not lease):
            self._lease_until = None
            return
        if self._lost is None:
            try:
                held = bool(renew(self.run_id, self.owner))  # type: ignore[misc]
            except Exception as exc:
                self._lost = exc
            else:
                if held:
                    self._lease_until = now + lease / 2  # type: ignore[operator]
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
        lease = getattr(self.store, "lease", None)
        if not lease or getattr(self.store, "renew", None) is None:
            self._lease_loop = False
            return
        self._lease_loop = loop
        every = lease / 3
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
                checkpointer._renew_now(lease)
            loop.call_later(every, tick)

        loop.call_later(every, tick)

    def _renew_now(self, lease: float) -> None:
        """The timer's renewal: a failed one is noted, and the next boundary checks
        the lease again in full (so a holder that lost it stops there)."""
        now = time.time()
        try:
            held = self.store.renew(self.run_id, self.owner)  # type: ignore[attr-defined]
        except Exception:  # the next boundary asks again, and stops if it fails
            self._lease_until = 0.0
            return
        if held:
            self._lease_until = now + lease / 2
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
        lease = getattr(self.store, "lease", None)
        if lease and getattr(self.store, "renew", None) is not None:
            self._lease_until = started + lease / 2  # a write holds the lease that long
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
    before approved calls run).
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


# ---------------------------------------------------------------- agents


def start_run(
    agent: Agent,
    state: AgentState,
    store: Store,
    *,
    run_id: str | None = None,
    until_tool: str | Sequence[str] | None = None,
    until_tool_success: str | Sequence[str] | None = None,
    max_runs: int | None = None,
    should_pause: Callable[[], bool | str] | None = None,
    extra_steps: Mapping[str, Sequence[Any]] | None = None,
    replace: bool = False,
) -> AgentRun:
    """``agent.start(state, ...)``, checkpointed as it goes; the id is
    ``Checkpointer.of(run).run_id``. A ``run_id`` the store has is refused
    (:class:`RunExistsError`) unless ``replace=True``."""
    run = agent.start(
        state,
        until_tool=until_tool,
        until_tool_success=until_tool_success,
        max_runs=max_runs,
        should_pause=should_pause,
        extra_steps=extra_steps,
    )
    options = agent.options(
        until_tool=until_tool,
        until_tool_success=until_tool_success,
        max_runs=max_runs,
        should_pause=should_pause,
    )
    checkpoint(run, store, run_id=run_id, options=options.saved(), replace=replace)
    return run


def _rebind(chain: LLMChain, agent: Agent, strict: bool) -> LLMChain:
    available = {t.name for t in agent.tools}
    missing = [name for name in chain.tool_names if name not in available]
    if missing and strict:
        raise UnknownToolError(
            f"The saved run used tool(s) {missing} that the agent does not have "
            f"(it has {sorted(available)}); resume with strict=False to go on without them."
        )
    return attrs.evolve(chain, llm=agent.model, tools=agent.tools, callbacks=agent.callbacks)


def _load_for(agent: Agent, run_id: str, store: Store) -> tuple[SavedRun, ResumeDecision]:
    saved = load_run(
        store,
        run_id,
        models={agent.model.name: agent.model},
        tools=agent.tools,
        callbacks=agent.callbacks,
        strict=False,
    )
    decision = resume_decision(saved, agent.mode.table)
    machine = decision.table
    if machine is not agent.mode.table:
        raise ResumeError(
            f"Run {run_id!r} ran on the {machine.name} machine and this agent runs the "
            f"{agent.mode.table.name} one; resume it with Agent(..., machine=...) of that machine"
        )
    return saved, decision


async def restore_run(
    agent: Agent,
    run_id: str,
    store: Store,
    answer: Any = None,
    *,
    should_pause: Callable[[], bool | str] | None = None,
    extra_steps: Mapping[str, Sequence[Any]] | None = None,
    strict: bool = True,
) -> AgentRun:
    """The run behind :meth:`Agent.resume_run <agentfsm.Agent.resume_run>`, checkpointed,
    not stepped: for a host that steps a saved run.

    A run that had not ended goes on from the state it was saved at, with the
    saved chain and trace: no checkpointed tool result is produced again. A
    paused run goes on in a new segment from its chain's entry (pending tool
    calls run, tool results are propagated). An interrupted run goes on in a
    new segment once its middleware took ``answer`` (see :meth:`Agent.resume
    <agentfsm.Agent.resume>`); a run that ended ok or in error is over. The
    agent's model, tools, callbacks and middleware replace the saved ones;
    ``should_pause`` and ``extra_steps`` are passed again.
    """
    saved, decision = _load_for(agent, run_id, store)
    if isinstance(saved.result, Interrupted) and saved.agent_state is not None:
        if answer is None:
            raise ResumeError(
                f"Run {run_id!r} ended interrupted; resume it with an answer: "
                "agent.resume_run(run_id, store, answer)"
            )
        _rebind(saved.chain, agent, strict)
        state = saved.agent_state
        # The result chain's messages are the store's own: reuse them, so the
        # new segment refers to the saved message rows instead of copying them.
        shared = tuple(saved.result.chain.messages)[-len(state.messages) :]
        if state.messages and shared == state.messages:
            state = attrs.evolve(state, messages=shared)
        # Claim first: the approved calls run only in the one process that holds the run.
        owner = _new_owner()
        _claim(store, run_id, owner, saved.head)
        try:
            async with _holding(store, run_id, owner):
                resumed = await agent.start_resume(
                    state,
                    answer,
                    should_pause=should_pause,
                    extra_steps=extra_steps,
                    **execute_options(saved.options),
                )
        except BaseException:
            _release(store, run_id, owner)
            raise
        checkpoint(resumed, store, options=saved.options, saved=saved, owner=owner)
        return resumed
    if answer is not None:
        raise ResumeError(
            f"Run {run_id!r} is {saved.status}, not interrupted by an agent: "
            "an answer resumes an interrupted agent run"
        )
    if saved.result is not None and not isinstance(saved.result, Paused):
        raise ResumeError(f"Run {run_id!r} ended {saved.status}: there is nothing to resume")
    chain = _rebind(saved.chain, agent, strict)
    moving = migrates(saved, decision)
    ask_again = check_resumable(
        saved.traces, saved.done, chain, agent.mode.table, agent.middleware, state=decision.state
    )
    options: dict[str, Any] = {
        "middleware": agent.middleware,
        "should_pause": should_pause,
        "token_budget": agent.token_budget,
        **saved.options,
    }
    if extra_steps:
        options["extra_steps"] = extra_steps
    if saved.result is None and not ask_again:
        if moving:  # a new segment on the new table, entered where the run is moved to
            trace = _migration_trace(saved, decision)
        else:
            trace = attrs.evolve(saved.trace, transitions=list(saved.trace.transitions))
        run = agent.mode.restore(
            chain,
            decision.state if moving else saved.state,
            trace,
            options,
            run_class=agent.run_class,
        )
    else:
        context = {k: v for k, v in chain.custom_context.items() if k != "pause_reason"}
        chain = attrs.evolve(chain, custom_context=context, exchanged_messages=())
        run = agent.mode.start(chain, options, run_class=agent.run_class)
    assert isinstance(run, agent.run_class)
    run.agent = agent
    checkpoint(run, store, options=saved.options, saved=saved, new_segment=ask_again or moving)
    return run


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
    run.trace = _migration_trace(saved, decision)
    owner = _new_owner()
    checkpointer = checkpoint(
        run, store, options=saved.options, saved=saved, new_segment=True, owner=owner
    )
    release = getattr(store, "release", None)
    if release is not None:  # nothing runs it: the next resume may take it at once
        with contextlib.suppress(Exception):  # the lease lapses by itself anyway
            release(saved.run_id, owner, running=True)
    if checkpointer.error is not None:
        raise checkpointer.error


def _migration_trace(saved: SavedRun, decision: ResumeDecision) -> Trace:
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


# ---------------------------------------------------------------- forks


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
        headers, firsts, traces = _segments(stored, unpacker)
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
    owner = _new_owner()
    _write_fork(store, fork_id, owner, kept, headers, firsts, (run_id, at_step))
    release = getattr(store, "release", None)
    if release is not None:  # nothing runs it: a resume may take it at once
        with contextlib.suppress(Exception):  # the lease lapses by itself anyway
            release(fork_id, owner, running=True)
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
        delete = getattr(store, "delete", None)
        if delete is not None and written:
            with contextlib.suppress(Exception):
                delete(fork_id)
        raise


def _new_owner() -> str:
    """A lease holder's name: host, process, and a token of its own."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def _claim(store: Store, run_id: str, owner: str, head: str | None) -> None:
    """Take the run for ``owner`` if the store keeps leases (a compare-and-set on ``head``)."""
    claim = getattr(store, "claim", None)
    if claim is not None:
        claim(run_id, owner, head)


def _release(store: Store, run_id: str, owner: str) -> None:
    """Give back a claim that ran nothing (decisions that did not fit, say)."""
    release = getattr(store, "release", None)
    if release is not None:
        with contextlib.suppress(Exception):  # the lease lapses by itself anyway
            release(run_id, owner)


@contextlib.asynccontextmanager
async def _holding(store: Store, run_id: str, owner: str) -> AsyncIterator[None]:
    """Renew ``owner``'s lease every third of it while the block runs (approved calls)."""
    renew = getattr(store, "renew", None)
    lease = getattr(store, "lease", None)
    if renew is None or not lease:
        yield
        return

    async def keep() -> None:
        while True:
            await asyncio.sleep(lease / 3)
            try:
                if not renew(run_id, owner):
                    return
            except Exception:  # the first checkpoint reports a failing store
                return

    task = asyncio.ensure_future(keep())
    try:
        yield
    finally:
        task.cancel()


def execute_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A saved run's options as :meth:`Agent.start <agentfsm.Agent.start>` takes them."""
    names = list(options.get("until_tool") or ())
    key = "until_tool_success" if options.get("require_tool_success") else "until_tool"
    out: dict[str, Any] = {key: names} if names else {}
    if "max_runs" in options:
        out["max_runs"] = options["max_runs"]
    return out
