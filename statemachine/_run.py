"""Run: one execution of a machine, driven one state at a time.

A step awaits the current state's work, then fires exactly one trigger of the
shared machine; the move is recorded as a :class:`~agentfsm.trace.Transition`.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Final, TypeVar

import attrs

from ._chain import LLMChain
from ._errors import ChainError, IllegalTransitionError
from ._hooks import Hook, current_global_hooks
from ._machine import COROUTINE, RESULTS, MachineTable, not_a_result
from ._messages import Usage
from ._options import Options
from ._results import Continue, Failed, Interrupted, Paused, PipelineResult, Terminal
from ._steps import Step, get_run_count, normalize_pause
from ._sync import SyncBridge
from ._trace import Trace, Transition, total_usage

__all__ = ["Run", "current_run"]

_T = TypeVar("_T")

#: The run whose state's work is in flight in this context: a step that starts a child
#: run (:func:`agentfsm.run_machine`, a subagent) nests the child's trace under it.
_RUNNING: contextvars.ContextVar[Run | None] = contextvars.ContextVar("agentfsm_run", default=None)


#: A run's tokens before it counted any (frozen: one shared by every run).
_NO_USAGE: Final = Usage()


def current_run() -> Run | None:
    """The run whose steps are running here (inside its ``run()`` or ``step()``), if any."""
    return _RUNNING.get()


class _Cursor:
    """The model ``transitions`` moves: one per run, holding only ``state``.

    The shared machine holds it weakly, so a run dropped before its end
    leaves the machine with it.
    """

    __slots__ = ("__weakref__", "state")
    state: str


def _crashed(source: str, chain: LLMChain, exc: Exception) -> Failed:
    return Failed(
        chain=chain,
        error=ChainError(
            "step_error",
            f"The {source} step raised {type(exc).__name__}: {exc}",
            retryable=False,
        ),
    )


def _counting(result: PipelineResult, children: Sequence[Trace]) -> PipelineResult:
    """``result`` with its child runs' model calls counted in its chain's ``run_count``:
    ``max_runs`` bounds a run and the runs it started together."""
    calls = sum(get_run_count(c.transitions[-1].chain) for c in children if c.transitions)
    if not calls:
        return result
    chain = result.chain
    mode_state = chain.custom_context.get("mode_state") or {}
    counted = {**mode_state, "run_count": get_run_count(chain) + calls}
    return attrs.evolve(result, chain=chain.update_custom_context({"mode_state": counted}))


class Run:
    """One run of a machine over a chain, from the working state ``entry``.

    ``opts`` (a mapping, or options of the table's class, :attr:`MachineTable.options`)
    are checked once, here; every step of the run is given them. ``extra_steps``
    (``{state: [step, ...]}``) run after a state's own, as ``opts.extra_steps`` do.
    ``await run.step()`` does one state's work and returns the transition;
    ``await run.run()`` steps to the end and returns the result. ``run.trace``
    is the path so far, ``run.chain`` the chain as the last step left it.
    ``hooks`` observe it (see :mod:`agentfsm.hooks`): the global ones first, then these.
    A step that starts child runs (:func:`agentfsm.run_machine`, a subagent) nests their
    traces under its transition (:meth:`adopt`, :func:`current_run`), and the run counts
    their model calls and tokens as its own.
    """

    def __init__(
        self,
        table: MachineTable,
        chain: LLMChain,
        entry: str,
        opts: Mapping[str, Any] | None = None,
        *,
        extra_steps: Mapping[str, Sequence[Step]] | None = None,
        hooks: Iterable[Hook] = (),
    ) -> None:
        if entry not in table.steps:
            raise ValueError(
                f"A run starts in a working state of the {table.name} machine, not {entry!r}; "
                f"working states: {list(table.working)}"
            )
        self.table = table
        self.chain = chain
        self.result: Terminal | None = None
        self.trace = Trace(
            entry=entry,
            machine=table.name,
            machine_version=table.version,
            machine_fingerprint=table.fingerprint,
        )
        # Replaced whole when a hook is added: a run without hooks allocates nothing here.
        self._hooks: tuple[Hook, ...] = ()
        self._on_transition: tuple[Callable[[Run, Transition], None], ...] = ()
        self._on_end: tuple[Callable[[Run], None], ...] = ()
        options = table.options.of(opts)
        if extra_steps:
            options = table.options.of(options, extra_steps={**options.extra_steps, **extra_steps})
        #: The options every step of this run is given, checked once.
        self.opts: Options = options
        #: Why the run paused, when it ended paused with a cause: ``Paused.reason``, or
        #: the ``custom_context["pause_reason"]`` a step set before its plain ``Paused``.
        self.pause_reason: Any = None
        self._work = table.work(options.extra_steps)
        self._exits = table.exits
        self._terminals = table.terminals  # a few names: a tuple is as quick, and shared
        self._machine = table.machine
        self._cursor = _Cursor()
        self._requested_pause: Any = None
        self._carried: Continue | None = None
        #: When the work being awaited started, and the chain it was given (its state is
        #: the run's until it lands): a parked run holds no record of its own for them.
        self._started = 0.0
        self._given = chain
        self._busy = False
        self._bridge: SyncBridge | None = None  # made by the first *_sync call
        self._usage = _NO_USAGE  # of the transitions counted so far
        self._counted = 0
        self._ended = 0.0  # when the last step ended (``time.perf_counter()``)
        self._children: list[Trace] | None = None  # child runs the next transition carries
        self._machine.add_model(self._cursor, initial=entry)
        attached = current_global_hooks()
        if hooks:
            attached = (*attached, *hooks)
        if attached:
            for hook in attached:
                self.add_hook(hook)
            for hook in attached:
                started = getattr(hook, "run_started", None)
                if started is not None:
                    started(self)

    # ------------------------------------------------------------ hooks

    @property
    def hooks(self) -> tuple[Hook, ...]:
        """The run's hooks, in the order they hear each event."""
        return self._hooks

    def add_hook(self, hook: Hook, *, first: bool = False) -> None:
        """Let ``hook`` hear this run's transitions and end from now on: after the hooks
        it has, or, with ``first``, before all of them."""
        heard = getattr(hook, "transition", None)
        ended = getattr(hook, "run_ended", None)
        if heard is None and ended is None and getattr(hook, "run_started", None) is None:
            raise TypeError(
                f"{hook!r} is not a run hook: it has none of run_started, transition, run_ended"
            )
        if first:
            self._hooks = (hook, *self._hooks)
            if heard is not None:
                self._on_transition = (heard, *self._on_transition)
            if ended is not None:
                self._on_end = (ended, *self._on_end)
        else:
            self._hooks = (*self._hooks, hook)
            if heard is not None:
                self._on_transition = (*self._on_transition, heard)
            if ended is not None:
                self._on_end = (*self._on_end, ended)

    # ------------------------------------------------------------ state

    @property
    def state(self) -> str:
        return self._cursor.state

    @property
    def token_budget(self) -> int | None:
        """Tokens this run may use (input and output, summed over its model calls);
        past it, the run ends in ``exceeded_token_budget``. None: no bound."""
        return self.opts.token_budget

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def busy(self) -> bool:
        """Whether a state's work is in flight (a model call or a tool, say); between
        steps a run is idle, however long its host waits before the next one."""
        return self._busy

    def request_pause(self, reason: Any) -> None:
        """Make the next step pause the run with ``reason`` instead of doing its work."""
        self._requested_pause = reason

    def adopt(self, child: Trace) -> None:
        """Nest ``child`` (a child run's trace) under the transition this run takes next:
        the one whose work started the child, or, for a child resumed before this run
        started, its first. Children keep the order they were adopted in."""
        if self._children is None:
            self._children = [child]
        else:
            self._children.append(child)

    # ------------------------------------------------------------ stepping

    async def step(self) -> Transition:
        """Do the current state's work and take the one transition it leads to."""
        moved = self._advance(time.perf_counter())
        if moved.__class__ is Transition:
            return moved
        outer = _RUNNING.get()
        _RUNNING.set(self)  # the token is not kept: a parked run holds one object less
        try:
            try:  # as in ``run``: the work is awaited here, in no coroutine of its own
                result = await moved  # type: ignore[misc]
            except asyncio.CancelledError:
                self._cancelled()
                raise
            except Exception as exc:  # a step's bug ends the run, it does not crash the host
                return self._broke(exc)
            return self._landed(result)
        finally:
            _RUNNING.set(outer)

    def _advance(self, started: float) -> Transition | Awaitable[PipelineResult]:
        """Start the current state's work (at ``started``): its transition when no step
        awaited anything, else the awaitable the caller awaits and hands to
        :meth:`_landed` (what it needs to finish is kept in ``_started`` and ``_given``). Most
        states' steps are plain functions, so a run pays for awaiting only where a
        step awaits (a model call, tools)."""
        if self.result is not None:
            raise RuntimeError(f"The run is over (it ended in {self.state!r}); nothing to step.")
        source = self._cursor.state
        chain = self.chain
        self._busy = True
        if self._requested_pause is not None:
            reason, self._requested_pause = self._requested_pause, None
            paused = Paused(chain=chain, reason=reason)
            return self._finish(source, chain, started, paused, {"requested": True}, worked=False)
        carried = self._carried  # the last state's Continue, when it is still the run's chain
        if carried is None or carried.chain is not chain:
            carried = Continue(chain=chain)
        work = self._work[source]
        try:
            out = work(carried, self.opts)
            done = out.__class__ in RESULTS
            if not done and out.__class__ is not COROUTINE and not inspect.isawaitable(out):
                raise TypeError(not_a_result(work, out))
        except Exception as exc:  # a step's bug ends the run, it does not crash the host
            return self._finish(source, chain, started, _crashed(source, chain, exc), worked=False)
        if done:  # an illegal result raises from here, to the host: a machine's bug
            return self._finish(source, chain, started, out, worked=True)  # type: ignore[arg-type]
        self._started = started
        self._given = chain
        return out  # type: ignore[return-value]

    def _landed(self, result: Any) -> Transition:
        """Finish the state whose work's awaitable gave ``result``."""
        source = self._cursor.state
        if result.__class__ not in RESULTS:  # a state of one step: the step's own value
            return self._broke(TypeError(not_a_result(self._work[source], result)))
        return self._finish(source, self._given, self._started, result, worked=True)

    def _broke(self, exc: Exception) -> Transition:
        """Finish the state whose awaited work raised ``exc``: the run fails."""
        source, chain = self._cursor.state, self._given
        crashed = _crashed(source, chain, exc)
        return self._finish(source, chain, self._started, crashed, worked=False)

    def _cancelled(self) -> None:
        """Finish the state whose awaited work was cancelled: the run pauses."""
        source, chain = self._cursor.state, self._given
        cancelled = Paused(chain=chain, reason="cancelled")
        self._finish(source, chain, self._started, cancelled, {"cancelled": True}, worked=False)

    def _count_tokens(self, result: PipelineResult) -> tuple[PipelineResult, dict[str, int] | None]:
        """A new last message's usage, when it is a reply (the step's detail records it,
        the trace sums them). A reply that takes the run past its token budget and asks
        for tools fails the run before they run; a final answer past it is kept."""
        reply = result.chain.last_message
        if reply is None or reply.role != "assistant":
            return result, None
        usage = Usage.of(reply)
        if usage is None:
            return result, None
        counts = usage.to_dict()
        budget = self.opts.token_budget
        if budget is None or not reply.tool_calls or not isinstance(result, Continue):
            return result, counts
        total = self._recorded_usage() + usage
        if total.total_tokens > budget:
            error = ChainError(
                "exceeded_token_budget",
                f"The run used {total.total_tokens} tokens, more than its token_budget "
                f"of {budget}; the last reply is kept, its tool calls were not run. Raise "
                "token_budget to go on.",
                retryable=False,
                details={"usage": total.to_dict(), "token_budget": budget},
            )
            result = Failed(chain=result.chain, error=error)
        return result, counts

    def _recorded_usage(self) -> Usage:
        """The trace's usage so far (a restored run's earlier steps too), summed once."""
        transitions = self.trace.transitions
        if self._counted < len(transitions):
            self._usage += total_usage(transitions[self._counted :])
            self._counted = len(transitions)
        return self._usage

    def _finish(
        self,
        source: str,
        chain: LLMChain,
        started: float,
        result: PipelineResult,
        detail: Mapping[str, Any] | None = None,
        *,
        worked: bool,
    ) -> Transition:
        """Take the transition ``result`` leads to (from ``chain``), and record it.

        When the state's steps ``worked`` (they did not crash, and no pause stopped
        them), the transition's detail is the state's :attr:`MachineTable.details`
        of their result, built when first read; else it is ``detail``.
        """
        ended = time.perf_counter()
        self._busy = False
        if self._children is not None:
            result = _counting(result, self._children)
        worked_out = result  # what the steps returned, before a token budget fails it
        usage = None
        if result.chain.last_message is not chain.last_message and self._children is None:
            result, usage = self._count_tokens(result)  # a reply, maybe; a child's is its own
        way_out = self._exits[source].get(result.__class__)
        if way_out is None:
            raise IllegalTransitionError(
                f"The {source} step returned {type(result).__name__}, which is not a way out "
                f"of {source!r}: the {self.table.name} machine has no edge on it from there."
            )
        trigger, event, describe = way_out
        try:
            event.fire(self._cursor)
        except KeyError as exc:  # _fsm.Refused: no such trigger from here
            raise IllegalTransitionError(
                f"The {source} step asked for {trigger!r}, which the {self.table.name} machine "
                f"does not have from {source!r}: {type(result).__name__} is not a way out "
                "of this state."
            ) from exc
        dest = self._cursor.state
        if (describe is None or not worked) and usage is None:
            transition = Transition(source, trigger, dest, result.chain, ended - started, detail)
        else:
            transition = Transition(
                source,
                trigger,
                dest,
                result.chain,
                ended - started,
                describe=describe if worked else None,
                before=chain,
                # A Continue is rebuilt from the record's chain (its own) when asked.
                worked=None if worked_out.__class__ is Continue else worked_out,
                usage=usage,
            )
        if self._children is not None:
            transition.with_children(self._children)
            self._children = None
        self._ended = ended
        self.trace.transitions.append(transition)
        self.chain = result.chain
        self._carried = result if result.__class__ is Continue else None
        if dest in self._terminals:
            if result.__class__ is Paused:
                # A step-level cause, or one a step wrote into the chain itself and
                # returned the plain ``Paused(chain)`` (the seed allows both).
                reason = result.reason
                if reason is None:
                    reason = result.chain.custom_context.get("pause_reason")
                self.pause_reason = reason
            elif result.__class__ is Interrupted and result.state is None:
                # The state that asked is where the answer enters the machine.
                result = Interrupted(chain=result.chain, data=result.data, state=source)
            terminal = normalize_pause(result)
            assert not isinstance(terminal, Continue)
            self.result = terminal = self._settle(terminal)
            self.chain = terminal.chain
            self._machine.remove_model(self._cursor)
            for heard in self._on_transition:
                heard(self, transition)
            for run_ended in self._on_end:
                run_ended(self)
            return transition
        if self._on_transition:
            for heard in self._on_transition:
                heard(self, transition)
            self._ended = time.perf_counter()  # the hooks' time is no step's
        return transition

    def _settle(self, result: Terminal) -> Terminal:
        """The result a run ends with; a subclass may act on it before the hooks hear."""
        return result

    async def run(self) -> Terminal:
        """Step until a terminal; the result.

        Steps run back to back, so each starts when the last one ended: one clock
        reading per step.
        """
        self._ended = time.perf_counter()
        outer = _RUNNING.get()
        _RUNNING.set(self)  # once for every step (current_run); as in ``step``, no token kept
        try:
            while self.result is None:
                moved = self._advance(self._ended)
                if moved.__class__ is Transition:
                    continue
                try:  # awaited here: a coroutine per awaiting state would cost more
                    result = await moved  # type: ignore[misc]
                except asyncio.CancelledError:
                    self._cancelled()
                    raise
                except Exception as exc:  # a step's bug ends the run, it does not crash the host
                    self._broke(exc)
                else:
                    self._landed(result)
        finally:
            _RUNNING.set(outer)
        return self.result

    def __aiter__(self) -> AsyncIterator[Transition]:
        return self._transitions()

    async def _transitions(self) -> AsyncIterator[Transition]:
        while self.result is None:
            yield await self.step()

    # ------------------------------------------------------------ sync doors

    def step_sync(self) -> Transition:
        """``step`` for scripts and tests: runs on this run's own event loop."""
        return self._sync(self.step())

    def run_sync(self) -> Terminal:
        """``run`` for scripts and tests."""
        return self._sync(self.run())

    def _sync(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        if self._bridge is None:
            self._bridge = SyncBridge()
        return self._bridge.run(coroutine, self.chain.llm, lambda: self.result is not None)

    def __repr__(self) -> str:
        return f"<Run {self.table.name} state={self.state!r} steps={len(self.trace)}>"
