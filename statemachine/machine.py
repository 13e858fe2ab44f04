"""Machines: a table of states, entries, edges and each state's steps.

A :class:`MachineTable` is the single source of truth of a machine: the shared
``transitions.Machine`` is built from it (once), runs move along it, each working
state's work is its steps, and the diagrams are drawn from it, so every trace is
a path of the published diagram. A table that is not a machine is refused when
it is declared (:class:`MachineDefinitionError`, naming the state at fault); a
declared machine is found again by its name (:func:`machine_named`), which is how
a saved run finds the machine it ran on. :data:`STANDARD`, Sagents' standard
mode, is declared this way.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
import types
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs
from transitions import Machine

from ._fsm import SharedMachine
from .chain import LLMChain
from .errors import AgentfsmError, ChainError
from .middleware.human_in_the_loop import check_pre_tool_hitl
from .results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult
from .steps import (
    Step,
    call_llm,
    check_max_runs,
    check_pause,
    check_response_complete,
    check_tool_interrupts,
    check_until_tool,
    check_until_tool_success,
    execute_tools,
    expand_tool_results,
    propagate_state,
)

__all__ = [
    "STANDARD",
    "Detail",
    "Edge",
    "MachineDefinitionError",
    "MachineTable",
    "Outcome",
    "UnknownMachineError",
    "Work",
    "machine_named",
]

#: What a state's work gives the run: the result, and a detail for its transition.
Outcome: TypeAlias = tuple[PipelineResult, Mapping[str, Any] | None]
#: A state's work, its steps piped: ``Continue(chain)`` and the run's options in, an
#: outcome out (directly when no step awaited anything).
Work: TypeAlias = Callable[[Continue, Mapping[str, Any]], Outcome | Awaitable[Outcome]]
#: What a state's transition records about its work (``Transition.detail``), from the
#: chain the state started with and the result its steps gave.
Detail: TypeAlias = Callable[[LLMChain, PipelineResult], Mapping[str, Any] | None]

_RESULTS: Final[frozenset[type[Any]]] = frozenset({Continue, Ok, Paused, Interrupted, Failed})
_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")
_COROUTINE: Final[type[Any]] = types.CoroutineType
_NO_STEPS: Final[Iterator[Step]] = iter(())


class MachineDefinitionError(AgentfsmError, ValueError):
    """A table that is not a machine; the message names the state or edge at fault."""


class UnknownMachineError(AgentfsmError, LookupError):
    """A name no declared machine has (a saved run made on a machine not declared here)."""


@attrs.frozen
class Edge:
    """One transition: when ``source``'s work returns an ``on`` result, ``trigger``
    moves the run to ``dest``, because ``why``."""

    trigger: str
    source: str
    dest: str
    why: str
    #: The result type of ``source``'s work that fires this edge.
    on: type[PipelineResult] = attrs.field(kw_only=True)


def _steps(value: Mapping[str, Iterable[Step]]) -> dict[str, tuple[Step, ...]]:
    for state, steps in value.items():
        if callable(steps) or isinstance(steps, str):
            raise MachineDefinitionError(
                f"The steps of state {state!r} are a sequence of steps: write ({steps!r},)"
            )
    return {state: tuple(steps) for state, steps in value.items()}


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _edges(value: Iterable[Edge]) -> tuple[Edge, ...]:
    return tuple(value)


def _entries(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def _details(value: Mapping[str, Detail]) -> dict[str, Detail]:
    return dict(value)


@attrs.frozen
class MachineTable:
    """A machine: each working state's steps, the terminals, the entries and the edges.

    Declaring one checks that it is a machine (see :class:`MachineDefinitionError`)
    and makes it findable by name. A run in a working state pipes the state's
    steps (each ``step(result, opts)``, async or not) until one returns a result
    that is not ``Continue``, or none is left; the type of that result picks the
    edge out (:attr:`Edge.on`). Any state can pause (``Run.request_pause``, a
    cancelled task) and fail (a step that raises), so each has an edge on
    ``Paused`` and one on ``Failed``.
    """

    #: Names the machine in saved runs and diagrams; snake_case, unique per process.
    name: str
    #: Each working state's steps, in the order they run; the order of the states
    #: is the order diagrams read them in.
    steps: Mapping[str, tuple[Step, ...]] = attrs.field(converter=_steps)
    terminals: tuple[str, ...] = attrs.field(converter=_names)
    #: Where a run starts, by the situation its chain is in.
    entries: Mapping[str, str] = attrs.field(converter=_entries)
    edges: tuple[Edge, ...] = attrs.field(converter=_edges)
    #: What each state's transitions record about its work, for the states that say.
    details: Mapping[str, Detail] = attrs.field(factory=dict, converter=_details)

    def __attrs_post_init__(self) -> None:
        _check(self)
        _declare(self)

    @functools.cached_property
    def working(self) -> tuple[str, ...]:
        return tuple(self.steps)

    @functools.cached_property
    def states(self) -> tuple[str, ...]:
        return (*self.working, *self.terminals)

    @functools.cached_property
    def machine(self) -> Machine:
        """The one ``transitions.Machine`` of this table; runs are added to it as models."""
        return SharedMachine(
            model=None,
            states=list(self.states),
            transitions=[
                {"trigger": e.trigger, "source": e.source, "dest": e.dest} for e in self.edges
            ],
            initial=None,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )

    @functools.cached_property
    def triggers(self) -> Mapping[str, Mapping[type[PipelineResult], str]]:
        """``{state: {result type: trigger}}``: the trigger each result of a state fires."""
        out: dict[str, dict[type[PipelineResult], str]] = {s: {} for s in self.working}
        for e in self.edges:
            out[e.source][e.on] = e.trigger
        return out

    @functools.cached_property
    def exits(self) -> Mapping[str, Mapping[type[PipelineResult], tuple[str, Any]]]:
        """``{state: {result type: (trigger, event)}}``: :attr:`triggers` with the shared
        machine's event of each, so a run's step looks its way out up once."""
        events = self.machine.events
        return {
            state: {kind: (trigger, events[trigger]) for kind, trigger in by_kind.items()}
            for state, by_kind in self.triggers.items()
        }

    @functools.cached_property
    def _work(self) -> Mapping[str, Work]:
        return {s: _pipe(steps, self.details.get(s)) for s, steps in self.steps.items()}

    def work(self, extra_steps: Mapping[str, Sequence[Step]] | None = None) -> Mapping[str, Work]:
        """Each working state's steps as one callable, ``work[state](chain, opts)``.

        ``extra_steps`` (``{"calling": [my_check]}``) run after a state's own steps.
        """
        if not extra_steps:
            return self._work
        unknown = sorted(set(extra_steps) - set(self.steps))
        if unknown:
            raise ValueError(
                f"extra_steps names unknown state(s) {unknown}; states: {list(self.steps)}"
            )
        work = dict(self._work)
        for state, extra in extra_steps.items():
            added = tuple(extra)
            for step in added:
                if not callable(step):
                    raise ValueError(f"extra_steps[{state!r}]: {step!r} is not a step")
            work[state] = _pipe((*self.steps[state], *added), self.details.get(state))
        return work

    @functools.cached_property
    def successors(self) -> Mapping[str, Mapping[str, str]]:
        """``{source: {trigger: dest}}``."""
        out: dict[str, dict[str, str]] = {s: {} for s in self.states}
        for e in self.edges:
            out[e.source][e.trigger] = e.dest
        return out

    def edge(self, source: str, trigger: str) -> Edge | None:
        for e in self.edges:
            if e.source == source and e.trigger == trigger:
                return e
        return None

    def is_path(self, states: Sequence[str], triggers: Iterable[str] | None = None) -> bool:
        """Whether ``states`` starts at an entry and follows edges of the table."""
        if not states or states[0] not in self.entries.values():
            return False
        pairs = list(itertools.pairwise(states))
        if triggers is None:
            return all(b in self.successors[a].values() for a, b in pairs)
        return all(
            self.successors[a].get(t) == b for (a, b), t in zip(pairs, triggers, strict=True)
        )


# ---------------------------------------------------------------- a state's steps, piped


def _pipe(steps: tuple[Step, ...], detail: Detail | None) -> Work:
    """``steps`` as one state's work: each in turn, until a result is not ``Continue``.

    Steps that return their result directly run without a coroutine; from the
    first one that returns an awaitable on, the work goes on in one.
    """

    def work(start: Continue, opts: Mapping[str, Any]) -> Outcome | Awaitable[Outcome]:
        result: Any = start
        rest = iter(steps)
        for step in rest:
            result = step(result, opts)
            if result.__class__ is not Continue:
                if result.__class__ not in _RESULTS:
                    return _awaiting(start.chain, result, step, rest, opts, detail)
                break
        return result, None if detail is None else detail(start.chain, result)

    if len(steps) != 1:
        return work
    (only,) = steps

    def one_step(start: Continue, opts: Mapping[str, Any]) -> Outcome | Awaitable[Outcome]:
        result: Any = only(start, opts)
        if result.__class__ not in _RESULTS:
            return _awaiting(start.chain, result, only, _NO_STEPS, opts, detail)
        return result, None if detail is None else detail(start.chain, result)

    return one_step


async def _awaiting(
    chain: LLMChain,
    out: Any,
    step: Step,
    rest: Iterator[Step],
    opts: Mapping[str, Any],
    detail: Detail | None,
) -> Outcome:
    """The rest of a state's work, from the awaitable ``step`` returned."""
    while True:
        if out.__class__ is not _COROUTINE and not inspect.isawaitable(out):
            raise TypeError(_not_a_result(step, out))
        result = await out
        if result.__class__ not in _RESULTS:
            raise TypeError(_not_a_result(step, result))
        awaiting = False
        if result.__class__ is Continue:
            for step in rest:
                out = step(result, opts)
                if out.__class__ is Continue:
                    result = out
                    continue
                if out.__class__ in _RESULTS:
                    result = out
                else:
                    awaiting = True
                break
        if not awaiting:
            return result, None if detail is None else detail(chain, result)


def _not_a_result(step: Step, value: Any) -> str:
    name = getattr(step, "__qualname__", repr(step))
    return (
        f"the step {name} returned {type(value).__name__}, not a pipeline result "
        "(Continue, Ok, Paused, Interrupted or Failed)"
    )


# ---------------------------------------------------------------- checks and names


_DECLARED: dict[str, MachineTable] = {}


def machine_named(name: str) -> MachineTable:
    """The declared machine called ``name``: how a saved run finds the machine it ran on."""
    try:
        return _DECLARED[name]
    except KeyError:
        raise UnknownMachineError(
            f"No machine named {name!r} is declared in this process (declared: "
            f"{sorted(_DECLARED)}). Import the module that declares it before loading "
            "or resuming runs made on it."
        ) from None


def _shape(table: MachineTable) -> tuple[Any, ...]:
    return table.working, table.terminals, table.entries, table.edges


def _declare(table: MachineTable) -> None:
    """Make ``table`` findable by name; a table of the same shape (a reload) replaces its twin."""
    known = _DECLARED.get(table.name)
    if known is not None and _shape(known) != _shape(table):
        raise MachineDefinitionError(
            f"Another machine named {table.name!r} is already declared, with other states "
            "or edges; give this one a name of its own (saved runs find their machine by name)."
        )
    _DECLARED[table.name] = table


def _check(table: MachineTable) -> None:
    """Refuse a table that is not a machine, naming the state or edge at fault."""
    if not isinstance(table.name, str) or not _NAME.fullmatch(table.name):
        raise MachineDefinitionError(
            f"A machine's name is snake_case ([a-z][a-z0-9_]*): it names the machine in "
            f"saved runs and diagrams; got {table.name!r}."
        )

    def fail(message: str) -> MachineDefinitionError:
        return MachineDefinitionError(f"The {table.name} machine: {message}.")

    _check_states(table, fail)
    _check_edges(table, fail)
    _check_graph(table, fail)


_Fail: TypeAlias = Callable[[str], MachineDefinitionError]


def _check_states(table: MachineTable, fail: _Fail) -> None:
    if not table.steps:
        raise fail("it has no working state; declare each one with its steps")
    if not table.terminals:
        raise fail("it has no terminal; a run must be able to end")
    if not table.entries:
        raise fail("it has no entry; name the state a run starts in")
    for state, count in Counter(table.states).items():
        if not isinstance(state, str) or not _NAME.fullmatch(state):
            raise fail(f"state {state!r} is not snake_case ([a-z][a-z0-9_]*)")
        if count > 1:
            raise fail(f"state {state!r} is declared twice; a state is working or terminal, once")
    for state, steps in table.steps.items():
        for step in steps:
            if not callable(step):
                raise fail(f"state {state!r} has {step!r} among its steps, which is not callable")
    for state, detail in table.details.items():
        if state not in table.steps or not callable(detail):
            raise fail(f"details[{state!r}] must be a callable for a working state")
    for situation, state in table.entries.items():
        if state not in table.steps:
            raise fail(f"entry {situation!r} leads to {state!r}, which is not a working state")


def _check_edges(table: MachineTable, fail: _Fail) -> None:
    by_trigger: dict[tuple[str, str], Edge] = {}
    by_result: dict[tuple[str, type[PipelineResult]], Edge] = {}
    for e in table.edges:
        if not isinstance(e, Edge):
            raise fail(f"{e!r} among the edges is not an Edge")
        named = f"edge {e.source} --{e.trigger}--> {e.dest}"
        if e.source in table.terminals:
            raise fail(f"terminal {e.source!r} has an edge out ({named}); a terminal ends the run")
        if e.source not in table.steps:
            raise fail(f"{named} leaves {e.source!r}, which is not a state of this machine")
        if e.dest not in table.states:
            raise fail(f"{named} enters {e.dest!r}, which is not a state of this machine")
        if not isinstance(e.trigger, str) or not _NAME.fullmatch(e.trigger):
            raise fail(f"{named}: the trigger is not snake_case ([a-z][a-z0-9_]*)")
        if e.on not in _RESULTS:
            raise fail(
                f"{named} fires on {e.on!r}, which is not a pipeline result type "
                "(Continue, Ok, Paused, Interrupted, Failed)"
            )
        if not isinstance(e.why, str) or not e.why.strip() or "\n" in e.why:
            raise fail(f"{named} needs a one-line why")
        if e.on is Continue and e.dest in table.terminals:
            raise fail(
                f"{named} ends the run on Continue; a run ends on Ok, Paused, Interrupted or Failed"
            )
        twin = by_trigger.setdefault((e.source, e.trigger), e)
        if twin is not e:
            raise fail(
                f"state {e.source!r} has the trigger {e.trigger!r} twice (to {twin.dest!r} "
                f"and to {e.dest!r})"
            )
        twin = by_result.setdefault((e.source, e.on), e)
        if twin is not e:
            raise fail(
                f"state {e.source!r} has two edges on {e.on.__name__} ({twin.trigger!r} and "
                f"{e.trigger!r}); one result type fires one edge"
            )


def _reached(starts: Iterable[str], links: Mapping[str, set[str]]) -> set[str]:
    seen = set(starts)
    frontier = list(seen)
    while frontier:
        for state in links.get(frontier.pop(), ()):
            if state not in seen:
                seen.add(state)
                frontier.append(state)
    return seen


def _check_graph(table: MachineTable, fail: _Fail) -> None:
    forward: dict[str, set[str]] = {}
    backward: dict[str, set[str]] = {}
    for e in table.edges:
        forward.setdefault(e.source, set()).add(e.dest)
        backward.setdefault(e.dest, set()).add(e.source)
    for state in table.working:
        if state not in forward:
            raise fail(f"state {state!r} has no way out: no edge leaves it")
    reachable = _reached(table.entries.values(), forward)
    for state in table.states:
        if state not in reachable:
            raise fail(f"state {state!r} is unreachable: no entry or edge leads to it")
    ending = _reached(table.terminals, backward)
    for state in table.working:
        if state not in ending:
            raise fail(f"state {state!r} has no path to a terminal: a run there never ends")
    for state in table.working:
        has = {e.on for e in table.edges if e.source == state}
        for kind, cause in ((Paused, "a pause is requested"), (Failed, "a step raises")):
            if kind not in has:
                raise fail(
                    f"state {state!r} has no edge on {kind.__name__}; a run takes it from "
                    f"any state when {cause}"
                )


# ---------------------------------------------------------------- the standard machine


def _this_turns_interrupts(
    result: PipelineResult, opts: Mapping[str, Any] | None = None
) -> PipelineResult:
    """``check_tool_interrupts`` on this turn's tool message; a turn without tools has none."""
    if not isinstance(result, Continue):
        return result
    last = result.chain.last_message
    if last is None or last.role != "tool":
        return result
    for tool_result in last.tool_results:
        if tool_result.is_interrupt:
            return check_tool_interrupts(result, opts)
    return result


def _check_until(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """The until-tool contract: any target result, or a successful one when required."""
    if not opts or not opts.get("tool_names"):
        return result
    if opts.get("require_tool_success"):
        return check_until_tool_success(result, opts)
    return check_until_tool(result, opts)


def _decide(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """Loop while the chain needs a response (within ``max_runs``); else the run is done,
    unless a target tool was never called."""
    if not isinstance(result, Continue):
        return result
    if result.chain.needs_response:
        return check_max_runs(result, opts)
    names = (opts or {}).get("tool_names")
    if names:
        return Failed(
            result.chain,
            ChainError(
                "until_tool_not_called",
                f"Agent completed without calling target tool(s): {list(names)}. "
                "The LLM stopped responding before invoking the required tool.",
            ),
        )
    return Ok(result.chain)


def _expanded(chain: LLMChain, result: PipelineResult) -> Mapping[str, Any] | None:
    inserted = len(result.chain.messages) - len(chain.messages)
    return {"inserted": inserted} if inserted else None


def _called(chain: LLMChain, result: PipelineResult) -> Mapping[str, Any]:
    reply = result.chain.last_message
    if reply is None or reply is chain.last_message or reply.role != "assistant":
        return {"model": chain.llm.name}
    detail = {
        "model": reply.metadata.get("model", chain.llm.name),
        "tool_calls": [c.name for c in reply.tool_calls],
    }
    if "fallback_errors" in reply.metadata:
        detail["fallback_errors"] = reply.metadata["fallback_errors"]
    return detail


def _executed(chain: LLMChain, result: PipelineResult) -> Mapping[str, Any] | None:
    last = result.chain.last_message
    if last is None or last is chain.last_message or last.role != "tool":
        return None
    return {
        "tools": [r.name for r in last.tool_results],
        "errors": sum(r.is_error for r in last.tool_results),
    }


def _from_each(
    trigger: str, sources: Iterable[str], dest: str, why: str, on: type[PipelineResult]
) -> list[Edge]:
    return [Edge(trigger, s, dest, why, on=on) for s in sources]


_STEPS: Mapping[str, tuple[Step, ...]] = {
    "expanding": (expand_tool_results,),
    "calling": (call_llm, check_response_complete, check_pause),
    "interrupt_check": (check_pre_tool_hitl,),
    "executing": (execute_tools,),
    "propagating": (propagate_state, _this_turns_interrupts),
    "until_check": (_check_until,),
    "deciding": (_decide,),
}

STANDARD = MachineTable(
    name="standard",
    steps=_STEPS,
    terminals=("ok", "paused", "interrupted", "error"),
    entries={
        "fresh": "expanding",
        "pending tool calls": "interrupt_check",
        "tool results": "propagating",
    },
    edges=(
        Edge(
            "expanded",
            "expanding",
            "calling",
            "last turn's tool-result expansions are in the conversation",
            on=Continue,
        ),
        Edge("called", "calling", "interrupt_check", "the model replied in full", on=Continue),
        Edge(
            "failed",
            "calling",
            "error",
            "the model call failed, the reply was cut off or filtered, "
            "or the failure budget is spent",
            on=Failed,
        ),
        Edge(
            "paused", "calling", "paused", "should_pause() asked to stop after the reply", on=Paused
        ),
        Edge(
            "clear", "interrupt_check", "executing", "no pending call needs approval", on=Continue
        ),
        Edge(
            "interrupted",
            "interrupt_check",
            "interrupted",
            "the model asked for a tool that needs approval",
            on=Interrupted,
        ),
        Edge(
            "executed", "executing", "propagating", "every pending call has its result", on=Continue
        ),
        Edge(
            "propagated",
            "propagating",
            "until_check",
            "this turn's state updates are merged",
            on=Continue,
        ),
        Edge(
            "interrupted",
            "propagating",
            "interrupted",
            "a tool asked to interrupt the run",
            on=Interrupted,
        ),
        Edge("satisfied", "until_check", "ok", "a target tool was called", on=Ok),
        Edge(
            "unsatisfied",
            "until_check",
            "deciding",
            "no target tool result (or no target)",
            on=Continue,
        ),
        Edge(
            "loop",
            "deciding",
            "expanding",
            "the chain needs a response, within max_runs",
            on=Continue,
        ),
        Edge("done", "deciding", "ok", "the model answered without asking for tools", on=Ok),
        Edge(
            "failed",
            "deciding",
            "error",
            "max_runs reached, or the model stopped without calling the target tool",
            on=Failed,
        ),
        *_from_each(
            "paused",
            [s for s in _STEPS if s != "calling"],
            "paused",
            "a step paused with a cause",
            Paused,
        ),
        *_from_each(
            "failed",
            [s for s in _STEPS if s not in ("calling", "deciding")],
            "error",
            "a callback or an added step failed",
            Failed,
        ),
    ),
    details={"expanding": _expanded, "calling": _called, "executing": _executed},
)
