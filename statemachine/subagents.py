"""Machines inside machines: a state's work may be a child run, a tool may be an agent.

:func:`run_machine` is a step that runs a child machine on the parent's chain to its
end; the child's terminal picks the parent's way on (``Ok`` continues, ``Interrupted``
interrupts the parent with the child's request, ``Paused`` pauses it, ``Failed`` fails
it with an error naming the child). :class:`SubAgent` is a tool the parent's model
calls with a task; a child agent does the task on a conversation of its own and its
final answer is the tool's result. Several subagent calls of one reply run at once.

Either way the child's trace nests under the parent's transition that ran it
(:attr:`Transition.children <agentfsm.trace.Transition.children>`), its tokens count
in the parent's usage and token budget, and it starts with what its parent has left
of ``max_runs`` and ``token_budget``: a child that never ends is stopped by the
tree's budget. A subagent's approval request interrupts the parent (interrupt type
``"subagent"``, naming it); ``agent.resume(state, answer)`` hands the answer to the
waiting child, innermost first, and the parent goes on with its final answer.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._invariants import check_decisions_fit
from ._state import AgentState
from .chain import LLMChain
from .errors import ChainError
from .machine import MachineTable
from .messages import ToolResult
from .middleware.human_in_the_loop import HumanInTheLoop, check_decisions
from .options import Options
from .results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult, Terminal
from .run import Run, current_run
from .steps import get_run_count
from .tools import Tool, ToolContext, ToolOutput
from .trace import Trace

if TYPE_CHECKING:
    from .agent import Agent

__all__ = [
    "MAX_DEPTH",
    "SUBAGENT",
    "ChildRunner",
    "MachineStep",
    "SubAgent",
    "check_answer",
    "check_subagents",
    "children_run_by",
    "collecting",
    "nested",
    "resume_subagents",
    "run_machine",
]

#: How deep runs may nest (a parent, its child, the child's child...): past it a child
#: is refused at run time, whatever the tools say.
MAX_DEPTH: Final = 8
#: The interrupt type of a subagent's request, as the parent's interrupt data names it.
SUBAGENT: Final = "subagent"

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("agentfsm_depth", default=0)
#: Where subagents started outside any run's step leave their traces (see :func:`collecting`).
_STARTED: contextvars.ContextVar[list[Trace] | None] = contextvars.ContextVar(
    "agentfsm_started", default=None
)


#: How a host runs a subagent's child elsewhere (a durable engine: as a workflow of its
#: own): ``runner(name, agent, task, max_runs, token_budget, depth)`` returns the child's
#: end state and its traces, or raises the ChainError of a child that could not start.
ChildRunner = Callable[
    [str, "Agent", str, int, "int | None", int], Awaitable[tuple[AgentState, Sequence[Trace]]]
]
_RUNNER: contextvars.ContextVar[ChildRunner | None] = contextvars.ContextVar(
    "agentfsm_child_runner", default=None
)


@contextlib.contextmanager
def children_run_by(runner: ChildRunner | None) -> Iterator[None]:
    """Subagents started in the block run through ``runner`` (None: here, in the step);
    their limits and depth are still decided here, and their traces adopted here."""
    token = _RUNNER.set(runner)
    try:
        yield
    finally:
        _RUNNER.reset(token)


@contextlib.contextmanager
def nested(depth: int) -> Iterator[None]:
    """Run the block ``depth`` runs deep: a host running a child elsewhere keeps the
    tree's :data:`MAX_DEPTH` across it."""
    token = _DEPTH.set(depth)
    try:
        yield
    finally:
        _DEPTH.reset(token)


@contextlib.contextmanager
def collecting() -> Iterator[list[Trace]]:
    """The traces of the subagents started in the block outside a run's step (approved
    calls a middleware runs to answer an interrupt), for the run that goes on to adopt."""
    started: list[Trace] = []
    token = _STARTED.set(started)
    try:
        yield started
    finally:
        _STARTED.reset(token)


# ---------------------------------------------------------------- the tree's budget


def _limits(parent: Run | None, options: Options) -> tuple[int, int | None] | ChainError:
    """The child's ``max_runs`` and ``token_budget``: its own, at most what ``parent``
    has left (its model calls and tokens so far, earlier children's included); or the
    error of a parent with nothing left."""
    runs, tokens = options.max_runs, options.token_budget
    if parent is None:
        return runs, tokens
    left = parent.opts.max_runs - get_run_count(parent.chain)
    if left < 1:
        return ChainError(
            "exceeded_max_runs",
            f"The run has no model call left of its max_runs ({parent.opts.max_runs}) "
            "for a child run",
            retryable=False,
        )
    budget = parent.token_budget
    if budget is not None:
        spent = parent.trace.usage.total_tokens
        if budget - spent < 1:
            return ChainError(
                "exceeded_token_budget",
                f"The run used {spent} tokens of its token_budget ({budget}); none is "
                "left for a child run",
                retryable=False,
            )
        tokens = budget - spent if tokens is None else min(tokens, budget - spent)
    return min(runs, left), tokens


def _too_deep(name: str) -> ChainError | None:
    if _DEPTH.get() < MAX_DEPTH:
        return None
    return ChainError(
        "child_too_deep",
        f"The child {name!r} would nest runs {MAX_DEPTH + 1} deep (at most {MAX_DEPTH}): "
        "machines or agents that run each other?",
        retryable=False,
    )


async def _run_child(child: Run) -> Terminal:
    """Run ``child`` to its end one level deeper than the run that started it."""
    depth = _DEPTH.set(_DEPTH.get() + 1)
    try:
        return await child.run()
    finally:
        _DEPTH.reset(depth)


# ---------------------------------------------------------------- a child machine as a step


def _named(error: ChainError, name: str, table: MachineTable, state: str) -> ChainError:
    return ChainError(
        error.type,
        f"The child machine {name!r} ({table.name}) failed in {state!r}: {error.message}",
        retryable=error.retryable,
        details={**error.details, "child": name, "child_state": state},
    )


def _parent_count(merged: LLMChain, parent: LLMChain) -> LLMChain:
    """``merged`` with the parent's own ``run_count`` (the child's chain has the child's);
    the parent's run adds its children's calls to it when the step ends."""
    calls = get_run_count(parent)
    mode_state = merged.custom_context.get("mode_state") or {}
    if mode_state.get("run_count") == calls:
        return merged
    return merged.update_custom_context({"mode_state": {**mode_state, "run_count": calls}})


class MachineStep:
    """The step :func:`run_machine` returns: ``step(result, opts)`` like any step, with
    ``machine`` (the child table, which :attr:`MachineTable.children` reads) and ``name``."""

    def __init__(
        self,
        machine: MachineTable,
        *,
        name: str,
        entry: str,
        options: Mapping[str, Any],
        prepare: Callable[[LLMChain], LLMChain] | None,
        merge: Callable[[LLMChain, LLMChain], LLMChain] | None,
    ) -> None:
        self.machine = machine
        self.name = name
        self.entry = entry
        self.options = options
        self.prepare = prepare
        self.merge = merge
        #: The step's name in its table's fingerprint.
        self.__qualname__ = f"run_machine[{machine.name}]"

    def __repr__(self) -> str:
        return f"run_machine({self.machine.name!r}, name={self.name!r}, entry={self.entry!r})"

    async def __call__(self, result: PipelineResult, opts: Mapping[str, Any]) -> PipelineResult:
        if not isinstance(result, Continue):
            return result
        parent_chain = result.chain
        parent = current_run()
        table = self.machine
        options = table.options.of(self.options)
        if parent is not None and "middleware" not in self.options:
            options = table.options.of(options, middleware=parent.opts.middleware)
        limits = _too_deep(self.name) or _limits(parent, options)
        if isinstance(limits, ChainError):
            return Failed(parent_chain, _named(limits, self.name, table, self.entry))
        max_runs, tokens = limits
        options = table.options.of(options, max_runs=max_runs, token_budget=tokens)
        chain = parent_chain if self.prepare is None else self.prepare(parent_chain)
        mode_state = chain.custom_context.get("mode_state") or {}
        chain = chain.update_custom_context({"mode_state": {**mode_state, "run_count": 0}})
        child = Run(table, chain, self.entry, options)
        if parent is not None:
            parent.adopt(child.trace)
        end = await _run_child(child)
        merged = end.chain if self.merge is None else self.merge(parent_chain, end.chain)
        merged = _parent_count(merged, parent_chain)
        match end:
            case Ok():
                return Continue(merged)
            case Interrupted(_, data):
                path = [self.name, *data.get("child_path", ())]
                return Interrupted(merged, {**data, "child_path": path})
            case Paused():
                return Paused(merged, child.pause_reason)
            case Failed(_, error):
                state = child.trace.transitions[-1].source
                return Failed(merged, _named(error, self.name, table, state))
        raise AssertionError(f"unexpected result {end!r}")


def run_machine(
    table: MachineTable,
    *,
    name: str | None = None,
    entry: str | None = None,
    prepare: Callable[[LLMChain], LLMChain] | None = None,
    merge: Callable[[LLMChain, LLMChain], LLMChain] | None = None,
    options: Mapping[str, Any] | None = None,
) -> MachineStep:
    """A step that runs ``table`` as a child machine on the parent's chain, to its end.

    The child starts at ``entry`` (default: the state of the table's first entry) on
    ``prepare(chain)`` (default: the parent's chain), with ``options`` (the table's
    defaults, the parent's middleware) bounded by what the parent has left. Its end
    picks the parent's way on: ``Ok`` continues on ``merge(parent_chain, child_chain)``
    (default: the child's chain), ``Interrupted`` interrupts the parent with the
    child's request (``"child_path"`` added: the children it waits in), ``Paused``
    pauses it with the child's reason, ``Failed`` fails it with the child's error,
    named: ``name`` (default: the table's name) and the state it failed in. The
    parent's model calls count the child's. The step's ``machine`` is ``table``, so
    :attr:`MachineTable.children <agentfsm.machine.MachineTable.children>` finds it.
    """
    if not isinstance(table, MachineTable):
        raise TypeError(f"run_machine runs a MachineTable, got {type(table).__name__}")
    start = entry if entry is not None else next(iter(table.entries.values()))
    if start not in table.steps:
        raise ValueError(
            f"run_machine: the {table.name} machine has no working state {start!r}; "
            f"working states: {list(table.working)}"
        )
    table.options.of(options)  # refused now, not when the parent runs
    return MachineStep(
        table,
        name=name or table.name,
        entry=start,
        options=dict(options or {}),
        prepare=prepare,
        merge=merge,
    )


# ---------------------------------------------------------------- subagents


_TASK: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The task, in full: the subagent sees nothing else of this "
            "conversation.",
        }
    },
    "required": ["task"],
}


def _answer_of(state: AgentState) -> str:
    """A child's final answer: its target tool's result, or its last reply's text."""
    if state.tool_result is not None:
        return state.tool_result.text
    for message in reversed(state.messages):
        if message.role == "assistant":
            return message.text
    return ""


def _requests(data: Mapping[str, Any]) -> list[Any]:
    """The innermost approval requests of an interrupt, for a reviewer to read."""
    requests = data.get("action_requests")
    return list(requests) if isinstance(requests, list | tuple) else []


#: What a subagent's call does: its child calls a model and runs tools.
_CHILD_EFFECTS: Final = frozenset({"model", "tools"})


@attrs.frozen(init=False)
class SubAgent(Tool):
    """A tool that hands a task to ``agent``: the parent's model calls it by ``name``.

    The child starts on a fresh conversation holding the task alone; its final answer
    is the tool's result, its failure an error result naming it. Its approval request
    interrupts the parent (see :func:`resume_subagents`). Its :attr:`~Tool.effects` are
    ``model`` and ``tools``: the child does both inside the parent's tool call.
    """

    agent: Agent = attrs.field(kw_only=True, eq=False, repr=False)

    def __init__(self, name: str, description: str, agent: Agent) -> None:
        if not all(callable(getattr(agent, m, None)) for m in ("start", "start_resume")):
            raise TypeError(f"SubAgent {name!r}: the agent is {type(agent).__name__}, not Agent")

        async def task(task: str, context: ToolContext) -> str | ToolOutput:
            return await _run_subagent(name, agent, task)

        self.__attrs_init__(
            name=name,
            description=description,
            function=task,
            parameters=_TASK,
            context_param="context",
            is_async=True,
            effects=_CHILD_EFFECTS,
            agent=agent,
        )


async def _run_subagent(name: str, agent: Agent, task: str) -> str | ToolOutput:
    parent = current_run()
    options = agent.options()
    limits = _too_deep(name) or _limits(parent, options)
    if isinstance(limits, ChainError):
        return ToolOutput(f"The {name} subagent was not started: {limits.message}", is_error=True)
    max_runs, tokens = limits
    runner = _RUNNER.get()
    if runner is not None:
        try:
            end, traces = await runner(name, agent, task, max_runs, tokens, _DEPTH.get() + 1)
        except ChainError as error:
            return ToolOutput(f"The {name} subagent was not started: {error}", is_error=True)
        for trace in traces:
            _adopt(parent, trace)
        return _outcome(name, end)
    try:
        child = agent.start(AgentState.of(task), max_runs=max_runs, token_budget=tokens)
    except ChainError as error:
        return ToolOutput(f"The {name} subagent was not started: {error}", is_error=True)
    _adopt(parent, child.trace)
    await _run_child(child)
    return _outcome(name, child.agent_state)


def _adopt(parent: Run | None, trace: Trace) -> None:
    """Nest a child's ``trace`` under ``parent``'s step (or where :func:`collecting` asks)."""
    if parent is not None:
        parent.adopt(trace)
    else:
        started = _STARTED.get()
        if started is not None:
            started.append(trace)


def _outcome(name: str, state: AgentState) -> str | ToolOutput:
    """The tool's result of a child that ended in ``state``."""
    match state.status:
        case "ok":
            return _answer_of(state)
        case "interrupted":
            data = dict(state.interrupt_data or {})
            interrupt = {
                "type": SUBAGENT,
                "subagent": name,
                "action_requests": _requests(data),
                "request": data,
                "state": _packed(state),
            }
            return ToolOutput(f"The {name} subagent waits for an answer.", interrupt=interrupt)
        case "paused":
            return ToolOutput(
                f"The {name} subagent paused ({state.pause_reason}) before it finished.",
                is_error=True,
            )
    error = state.error
    return ToolOutput(f"The {name} subagent failed: {error}", is_error=True)


def _packed(state: AgentState) -> Any:
    from .serialization import converter

    return converter.unstructure(state, AgentState)


def _unpacked(value: Any, name: str) -> AgentState:
    from .serialization import FormatError, converter

    try:
        state = converter.structure(value, AgentState)
    except Exception as exc:
        raise FormatError(f"The {name} subagent's saved state is not one: {exc}") from exc
    return state


def _subagent_interrupts(data: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The subagent interrupts of ``data``, in order; None when it is not all of them."""
    if data.get("type") == SUBAGENT:
        return [data]
    if data.get("type") != "multiple_interrupts":
        return None
    found = [i for i in data.get("interrupts") or () if isinstance(i, Mapping)]
    if not found or any(i.get("type") != SUBAGENT for i in found):
        return None
    return found


async def resume_subagents(
    agent: Agent, state: AgentState, answer: Any
) -> tuple[AgentState, tuple[Trace, ...]] | None:
    """Hand ``answer`` to the subagent(s) ``state`` waits on; None for another interrupt.

    One waiting subagent takes ``answer`` as its own resume takes it (its approval
    decisions, checked against its request); several take one answer each, in the
    order of the interrupt's ``interrupts``. Each child goes on where it waited (a
    child waiting on its own subagent hands the answer down), and its answer replaces
    the waiting tool result. The state returned runs on from its tool results; the
    traces are the resumed children's, for the parent's next transition.
    """
    interrupts = _subagent_interrupts(state.interrupt_data or {})
    if interrupts is None:
        return None
    answers: Sequence[Any]
    if len(interrupts) == 1:
        answers = [answer]
    else:
        if not isinstance(answer, list | tuple) or len(answer) != len(interrupts):
            raise ValueError(
                f"{len(interrupts)} subagents wait: answer with a list of one answer each, "
                "in the order of the interrupt's 'interrupts'"
            )
        answers = list(answer)
    waiting = [_waiting(agent, i, given) for i, given in zip(interrupts, answers, strict=True)]
    children: list[Trace] = []
    for interrupt, (name, child_agent, child_state), given in zip(
        interrupts, waiting, answers, strict=True
    ):
        child = await child_agent.start_resume(child_state, given)
        await _run_child(child)
        children.append(child.trace)
        outcome = _outcome(name, child.agent_state)
        call_id = str(interrupt.get("tool_call_id"))
        state = state.replace_tool_result(_result(call_id, name, outcome))
    return state, tuple(children)


def check_answer(agent: Agent, interrupt: Mapping[str, Any], answer: Any) -> None:
    """Refuse ``answer`` (ValueError) unless it answers the request the subagent
    ``interrupt`` of ``agent``'s run waits on, as a resume checks it: for a host that
    takes answers before it resumes (a durable run's engine)."""
    _waiting(agent, interrupt, answer)


def _waiting(
    agent: Agent, interrupt: Mapping[str, Any], answer: Any
) -> tuple[str, Agent, AgentState]:
    """The subagent ``interrupt`` waits on, its agent and its saved state, once ``answer``
    is checked against its request (ValueError before any child runs anything)."""
    name = str(interrupt.get("subagent"))
    tools = {t.name: t for t in agent.tools if isinstance(t, SubAgent)}
    tool = tools.get(name)
    if tool is None:
        raise ValueError(
            f"The run waits on the subagent {name!r}, which this agent does not have "
            f"(its subagents: {sorted(tools)})"
        )
    state = _unpacked(interrupt.get("state"), name)
    data = state.interrupt_data
    if (
        state.status != "interrupted"
        or not data
        or data != interrupt.get("request")
        or interrupt.get("action_requests") != _requests(data)
    ):
        raise ValueError(
            f"The {name} subagent's saved state is not the one its request came from; "
            "nothing was run"
        )
    _check_answer(tool.agent, state, data, answer)
    return name, tool.agent, state


def _check_answer(agent: Agent, state: AgentState, data: Mapping[str, Any], answer: Any) -> None:
    """Refuse an approval answer that does not fit the child's request as it stands."""
    check_decisions_fit(state.messages, data, agent.middleware)
    if "hitl_tool_call_ids" in data:
        for middleware in agent.middleware:
            if isinstance(middleware, HumanInTheLoop):
                check_decisions(data, answer, middleware.configs)
                return
        return
    inner = _subagent_interrupts(data)
    if inner is not None and len(inner) == 1:
        _waiting(agent, inner[0], answer)


def _result(call_id: str, name: str, outcome: str | ToolOutput) -> ToolResult:
    if isinstance(outcome, str):
        return ToolResult(call_id, name, outcome)
    interrupt = outcome.interrupt
    return ToolResult(
        call_id,
        name,
        outcome.content,
        is_error=outcome.is_error,
        is_interrupt=interrupt is not None,
        interrupt_data=None if interrupt is None else dict(interrupt),
    )


def check_subagents(agent: Agent, tools: Sequence[Tool]) -> None:
    """Refuse ``tools`` when a subagent among them runs ``agent`` (directly or through
    its own subagents): a run of it would never end."""

    seen: set[int] = set()

    def walk(tools: Sequence[Tool], path: tuple[str, ...]) -> None:
        for tool in tools:
            if not isinstance(tool, SubAgent) or id(tool) in seen:
                continue
            seen.add(id(tool))
            route = (*path, tool.name)
            if tool.agent is agent:
                raise ValueError(
                    f"The subagent {' -> '.join(route)} runs the agent it is given to: "
                    "a run of it would call itself without end"
                )
            walk(tool.agent.tools, route)

    walk(tools, ())
