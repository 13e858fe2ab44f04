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

from ._answers import check_approval
from ._state import AgentState
from .approval import ANSWER, Approval, Decision
from .chain import LLMChain
from .errors import ChainError
from .machine import MachineTable
from .messages import ToolResult
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
    "answer_subagents",
    "check_answer",
    "child_run_id",
    "check_subagents",
    "children_run_by",
    "nested",
    "resume_subagents",
    "run_machine",
]

#: How deep runs may nest (a parent, its child, the child's child...): past it a child
#: is refused at run time, whatever the tools say.
MAX_DEPTH: Final = 8
#: The interrupt type of a subagent's request, as the parent's interrupt data names it.
SUBAGENT: Final = "subagent"
#: The key of the answers a resume carries to waiting subagents (``{call_id: ...}``).
SUBAGENT_ANSWERS: Final = "subagents"

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("agentfsm_depth", default=0)


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
            return await _run_subagent(name, agent, task, context)

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


async def _run_subagent(
    name: str, agent: Agent, task: str, context: ToolContext | None = None
) -> str | ToolOutput:
    parent = current_run()
    waiting = _waiting_answer(context)
    saved = _saved_child(parent, context)
    if waiting is not None or saved is not None:
        return await _resume_child(name, agent, parent, waiting, saved)
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
    _save_child(child, parent, context)
    _adopt(parent, child.trace)
    await _run_child(child)
    return _outcome(name, child.agent_state)


# ---------------------------------------------------------------- children in the parent's store


def _parent_store(parent: Run | None) -> tuple[Any, str] | None:
    """The store and run id the parent run checkpoints to, if it does."""
    if parent is None:
        return None
    from .store.checkpointer import Checkpointer  # only a checkpointed parent reaches here

    for hook in parent.hooks:
        if isinstance(hook, Checkpointer):
            return hook.store, hook.run_id
    return None


def child_run_id(parent_run_id: str, tool_call_id: str) -> str:
    """The id a subagent's child run is saved under, in its parent's store."""
    return f"{parent_run_id}/{tool_call_id}"


def _save_child(child: Run, parent: Run | None, context: ToolContext | None) -> None:
    """Checkpoint ``child`` beside its checkpointed parent, so a resume after a crash goes
    on where the child was instead of running its calls again."""
    where = _parent_store(parent)
    if where is None or context is None:
        return
    from .store.checkpointer import checkpoint

    store, run_id = where
    checkpoint(child, store, run_id=child_run_id(run_id, context.tool_call_id))


def _saved_child(parent: Run | None, context: ToolContext | None) -> Any:
    """The saved child run of this call, when the parent saves its runs and has one."""
    where = _parent_store(parent)
    if where is None or context is None:
        return None
    from .store.base import RunNotFoundError
    from .store.load import load_run

    store, run_id = where
    try:
        return load_run(store, child_run_id(run_id, context.tool_call_id), strict=False)
    except RunNotFoundError:
        return None


def _waiting_answer(context: ToolContext | None) -> Mapping[str, Any] | None:
    """The answer a resume brought this call's waiting child, if it did."""
    if context is None:
        return None
    carried = context.custom_context.get(ANSWER)
    if not isinstance(carried, Mapping):
        return None
    waiting = carried.get(SUBAGENT_ANSWERS)
    if not isinstance(waiting, Mapping):
        return None
    found = waiting.get(context.tool_call_id)
    return found if isinstance(found, Mapping) else None


async def _resume_child(
    name: str,
    agent: Agent,
    parent: Run | None,
    waiting: Mapping[str, Any] | None,
    saved: Any,
) -> str | ToolOutput:
    """Go on with this call's child: from its saved run when the parent's store has it
    (a resume after a crash redoes nothing the child checkpointed), else from the state
    its interrupt carried, with the answer the resume brought."""
    answer = None if waiting is None else waiting.get("answer")
    unbound = bool(waiting and waiting.get("unbound"))
    if saved is not None:
        if saved.status in ("ok", "error") or (saved.status == "interrupted" and answer is None):
            for trace in saved.traces:
                _adopt(parent, trace)
            state = saved.agent_state
            assert state is not None, "an ended saved run keeps its agent state"
            return _outcome(name, state)
        from ._resume import restore_run

        where = _parent_store(parent)
        assert where is not None, "a saved child is found through its parent's store"
        store = where[0]
        given = answer if saved.status == "interrupted" else None
        child = await restore_run(agent, saved.run_id, store, given, unbound=unbound)
    else:
        assert waiting is not None
        state = _unpacked(waiting.get("state"), name)
        child = await agent.start_resume(state, answer, unbound=unbound)
    _adopt(parent, child.trace)
    await _run_child(child)
    return _outcome(name, child.agent_state)


def _adopt(parent: Run | None, trace: Trace) -> None:
    """Nest a child's ``trace`` under ``parent``'s step."""
    if parent is not None:
        parent.adopt(trace)


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
    agent: Agent, state: AgentState, answer: Any, *, unbound: bool = False
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
    answers = _answers_each(interrupts, answer)
    waiting = [
        _waiting(agent, i, given, unbound) for i, given in zip(interrupts, answers, strict=True)
    ]
    children: list[Trace] = []
    for interrupt, (name, child_agent, child_state), given in zip(
        interrupts, waiting, answers, strict=True
    ):
        child = await child_agent.start_resume(child_state, given, unbound=unbound)
        await _run_child(child)
        children.append(child.trace)
        outcome = _outcome(name, child.agent_state)
        call_id = str(interrupt.get("tool_call_id"))
        state = state.replace_tool_result(_result(call_id, name, outcome))
    return state, tuple(children)


def answer_subagents(
    agent: Agent, state: AgentState, answer: Any, *, unbound: bool = False
) -> tuple[AgentState, dict[str, Any]] | None:
    """The state and answer that re-enter the machine at ``executing`` for the subagents
    ``state`` waits on (None for another interrupt): each waiting call's result is taken
    out of the last tool message, so the call runs again, and the answer carries, per
    call, what its child takes and the state it waited in. Checked first: an answer that
    does not fit raises and nothing runs."""
    interrupts = _subagent_interrupts(state.interrupt_data or {})
    if interrupts is None:
        return None
    answers = _answers_each(interrupts, answer)
    carried: dict[str, Any] = {}
    for interrupt, given in zip(interrupts, answers, strict=True):
        _waiting(agent, interrupt, given, unbound)
        carried[str(interrupt.get("tool_call_id"))] = {
            "answer": _plain(given),
            "state": interrupt.get("state"),
            "unbound": unbound,
        }
    last = state.messages[-1] if state.messages else None
    waiting_ids = {r.tool_call_id for r in (last.tool_results if last else ()) if r.is_interrupt}
    if last is None or last.role != "tool" or not set(carried) <= waiting_ids:
        raise ValueError(
            "The run waits on a subagent call that has no waiting result in the last tool "
            "message: the state was edited or belongs to another conversation. Nothing was run."
        )
    kept = tuple(r for r in last.tool_results if r.tool_call_id not in carried)
    messages = state.messages[:-1]
    if kept:
        messages = (*messages, attrs.evolve(last, tool_results=kept))
    return attrs.evolve(state, messages=messages), {SUBAGENT_ANSWERS: carried}


def _answers_each(interrupts: Sequence[Mapping[str, Any]], answer: Any) -> list[Any]:
    if len(interrupts) == 1:
        return [answer]
    if not isinstance(answer, list | tuple) or len(answer) != len(interrupts):
        raise ValueError(
            f"{len(interrupts)} subagents wait: answer with a list of one answer each, "
            "in the order of the interrupt's 'interrupts'"
        )
    return list(answer)


def _plain(value: Any) -> Any:
    """An answer as data (a checkpoint saves it): typed decisions in their wire form."""
    if isinstance(value, Decision):
        return value.to_data()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def check_answer(
    agent: Agent, interrupt: Mapping[str, Any], answer: Any, *, unbound: bool = False
) -> None:
    """Refuse ``answer`` (ValueError) unless it answers the request the subagent
    ``interrupt`` of ``agent``'s run waits on, as a resume checks it: for a host that
    takes answers before it resumes (a durable run's engine)."""
    _waiting(agent, interrupt, answer, unbound)


def _waiting(
    agent: Agent, interrupt: Mapping[str, Any], answer: Any, unbound: bool
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
    _check_answer(tool.agent, state, data, answer, unbound)
    return name, tool.agent, state


def _check_answer(
    agent: Agent, state: AgentState, data: Mapping[str, Any], answer: Any, unbound: bool
) -> None:
    """Refuse an answer that does not fit the child's request as it stands."""
    if Approval.is_approval(data):
        check_approval(state, agent.tools, agent.middleware, answer, unbound=unbound)
        return
    inner = _subagent_interrupts(data)
    if inner is not None and len(inner) == 1:
        _waiting(agent, inner[0], answer, unbound)


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
