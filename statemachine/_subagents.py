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

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._chain import LLMChain
from ._child_runs import (
    _DEPTH,
    _RUNNER,
    MAX_DEPTH,
    ChildRunner,
    _adopt,
    _limits,
    _run_child,
    _too_deep,
    children_run_by,
    nested,
)
from ._errors import ChainError
from ._machine import MachineTable
from ._results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult
from ._run import Run, current_run
from ._state import AgentState
from ._steps import get_run_count
from ._tools import Tool, ToolContext, ToolOutput
from ._waiting_children import (
    SUBAGENT,
    _outcome,
    _resume_child,
    _save_child,
    _saved_child,
    _waiting_answer,
    answer_subagents,
    check_answer,
    child_run_id,
    resume_subagents,
)

if TYPE_CHECKING:
    from ._agent import Agent

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
