"""The standard mode: Sagents' pipeline as a machine of explicit states.

One loop is ``expanding -> calling -> interrupt_check -> executing ->
propagating -> until_check -> deciding``; each state's work is a few steps of
:mod:`agentfsm.steps`, and which terminal a run reaches is decided by the
step that produced it. :data:`STANDARD` is the table. The mode runs any machine
with the standard entries and options: the standard one, or one derived from it
(a state added to the loop, say: ``STANDARD.insert(...)``). :data:`STANDARD_OUTPUT`
is the standard machine with the final answer checked against an output type
(:mod:`agentfsm.output`), which an agent with an ``output_type`` runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._approval import DECIDED
from .._chain import LLMChain
from .._effects import effects
from .._errors import ChainError
from .._hooks import Hook
from .._machine import Edge, MachineTable
from .._options import StandardOptions, options_of
from .._output import answered_by_tool, check_output
from .._results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult, Terminal
from .._run import Run
from .._steps import (
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
    reset_run_count,
    take_tool_answers,
)
from .._trace import Trace

__all__ = [
    "STANDARD",
    "STANDARD_OUTPUT",
    "StandardMode",
    "StandardOptions",
    "check_approvals",
    "entry_state",
]


# ---------------------------------------------------------------- the standard machine's steps


@effects("approval")
def check_approvals(
    result: PipelineResult, opts: Mapping[str, Any] | None = None
) -> PipelineResult:
    """Ask each middleware with an ``approval_gate`` whether this turn's calls may run.

    ``gate(result, opts)`` returns the result to go on with, or ends the state
    (``Interrupted`` while a call waits for approval); the first that ends it
    wins, so no tool of the batch runs. The engine names no middleware: any can
    gate (:class:`~agentfsm.HumanInTheLoop` does).
    """
    if not isinstance(result, Continue):
        return result
    for middleware in options_of(opts).middleware:
        gate = getattr(middleware, "approval_gate", None)
        if gate is None:
            continue
        result = gate(result, opts)
        if not isinstance(result, Continue):
            return result
    return result


@effects()
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


@effects()
def _check_until(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """The until-tool contract: any target result, or a successful one when required."""
    options = options_of(opts)
    if not options.tool_names:
        return result
    if options.require_tool_success:
        return check_until_tool_success(result, opts)
    return check_until_tool(result, opts)


@effects("bound")
def _decide(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """Loop while the chain needs a response (within ``max_runs``); else the run is done,
    unless a target tool was never called."""
    if not isinstance(result, Continue):
        return result
    if result.chain.needs_response:
        return check_max_runs(result, opts)
    names = options_of(opts).tool_names
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
    # A call a reviewer rejected got its result without running: not one of the tools run.
    decided = chain.custom_context.get(DECIDED) or {}
    refused = [r for r in last.tool_results if decided.get(r.tool_call_id) == "reject"]
    ran = [r for r in last.tool_results if decided.get(r.tool_call_id) != "reject"]
    detail: dict[str, Any] = {
        "tools": [r.name for r in ran],
        "errors": sum(r.is_error for r in ran),
    }
    if refused:
        detail["rejected"] = [r.name for r in refused]
    if decided:  # a reviewer's decisions, which the approval state applied to this batch
        detail["decisions"] = dict(decided)
    return detail


# ---------------------------------------------------------------- the standard machine

#: Sagents' standard mode as a machine. Every state but ``calling`` pauses and fails
#: by the table's default edges, and ``deciding`` fails by its own.
STANDARD = MachineTable(
    name="standard",
    steps={
        "expanding": (expand_tool_results,),
        "calling": (call_llm, check_response_complete, check_pause),
        "interrupt_check": (check_approvals,),
        "executing": (execute_tools,),
        "propagating": (take_tool_answers, propagate_state, _this_turns_interrupts),
        "until_check": (_check_until,),
        "deciding": (_decide,),
    },
    terminals=("ok", "paused", "interrupted", "error"),
    entries={
        "fresh": "expanding",
        "pending tool calls": "interrupt_check",
        "tool results": "propagating",
    },
    edges=(
        Edge(
            "expanding",
            "calling",
            on=Continue,
            trigger="expanded",
            why="last turn's tool-result expansions are in the conversation",
        ),
        Edge(
            "calling",
            "interrupt_check",
            on=Continue,
            trigger="called",
            why="the model replied in full",
        ),
        Edge(
            "calling",
            "error",
            on=Failed,
            trigger="failed",
            why="the model call failed, the reply was cut off or filtered, "
            "or the failure budget is spent",
        ),
        Edge(
            "calling",
            "paused",
            on=Paused,
            trigger="paused",
            why="should_pause() asked to stop after the reply",
        ),
        Edge(
            "interrupt_check",
            "executing",
            on=Continue,
            trigger="clear",
            why="no pending call needs approval",
        ),
        Edge(
            "interrupt_check",
            "interrupted",
            on=Interrupted,
            trigger="interrupted",
            why="the model asked for a tool that needs approval",
        ),
        Edge(
            "executing",
            "propagating",
            on=Continue,
            trigger="executed",
            why="every pending call has its result",
        ),
        Edge(
            "propagating",
            "until_check",
            on=Continue,
            trigger="propagated",
            why="this turn's state updates are merged",
        ),
        Edge(
            "propagating",
            "interrupted",
            on=Interrupted,
            trigger="interrupted",
            why="a tool asked to interrupt the run",
        ),
        Edge("until_check", "ok", on=Ok, trigger="satisfied", why="a target tool was called"),
        Edge(
            "until_check",
            "deciding",
            on=Continue,
            trigger="unsatisfied",
            why="no target tool result (or no target)",
        ),
        Edge(
            "deciding",
            "expanding",
            on=Continue,
            trigger="loop",
            why="the chain needs a response, within max_runs",
        ),
        Edge(
            "deciding",
            "ok",
            on=Ok,
            trigger="done",
            why="the model answered without asking for tools",
        ),
        Edge(
            "deciding",
            "error",
            on=Failed,
            trigger="failed",
            why="max_runs reached, or the model stopped without calling the target tool",
        ),
    ),
    details={"expanding": _expanded, "calling": _called, "executing": _executed},
    options=StandardOptions,
)


def _decide_output(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """:func:`_decide`, except that a reply that gave its final answer to ``final_result``
    is the run's answer (it is checked next), not a turn to loop on."""
    if isinstance(result, Continue) and answered_by_tool(result.chain.messages):
        return Ok(result.chain)
    return _decide(result, opts)


#: The standard machine with a typed final answer: ``deciding`` hands the model's final
#: answer to ``validating_output``, which ends the run ``ok`` when it fits the output
#: type, or sends what was wrong back to the model (``calling``), within the output
#: tool's retries. Runs that never answer (a pause, an interrupt, an error, an
#: ``until_tool`` target) take the standard machine's paths.
STANDARD_OUTPUT = MachineTable(
    name="standard_output",
    steps={**STANDARD.steps, "deciding": (_decide_output,), "validating_output": (check_output,)},
    terminals=STANDARD.terminals,
    entries=STANDARD.entries,
    edges=(
        *(e for e in STANDARD.edges if not (e.source == "deciding" and e.on is Ok)),
        Edge(
            "deciding",
            "validating_output",
            on=Ok,
            trigger="done",
            why="the model gave its final answer",
        ),
        Edge(
            "validating_output",
            "ok",
            on=Ok,
            trigger="valid",
            why="the final answer fits the output type",
        ),
        Edge(
            "validating_output",
            "calling",
            on=Continue,
            trigger="invalid",
            why="the final answer does not fit; what was wrong goes back to the model",
        ),
        Edge(
            "validating_output",
            "error",
            on=Failed,
            trigger="failed",
            why="the final answer did not fit, output_retries times over",
        ),
    ),
    details=STANDARD.details,
    options=StandardOptions,
)


# ---------------------------------------------------------------- the standard mode

#: The situations a run over a chain can start in, as the machine's entries name them.
_FRESH, _PENDING, _RESULTS = "fresh", "pending tool calls", "tool results"


def _situation(chain: LLMChain) -> str:
    last = chain.last_message
    if last is not None and last.role == "tool":
        return _RESULTS
    if last is not None and last.is_tool_call and last.status == "complete":
        return _PENDING
    return _FRESH


def entry_state(chain: LLMChain, table: MachineTable = STANDARD) -> str:
    """Where a run over ``chain`` enters the machine.

    Tool results at the end (a resume) are propagated and checked before any
    model call; an assistant message whose calls have not run (a paused run)
    goes to the approval check and runs them; anything else starts fresh.
    """
    return table.entries[_situation(chain)]


class StandardMode:
    """Sagents' standard execution mode, run as the :data:`STANDARD` machine or ``table``.

    ``table`` is any machine whose entries are the standard ones (``fresh``,
    ``pending tool calls``, ``tool results``) and whose runs take
    :class:`~agentfsm.options.StandardOptions`.
    """

    def __init__(self, table: MachineTable = STANDARD) -> None:
        missing = [s for s in (_FRESH, _PENDING, _RESULTS) if s not in table.entries]
        if missing:
            raise ValueError(
                f"The standard mode starts runs at the entries {[_FRESH, _PENDING, _RESULTS]}; "
                f"the {table.name} machine has no {missing}"
            )
        self.table = table
        #: The class of its runs' options: the table's, when it refines the standard ones.
        self.options_class = (
            table.options if issubclass(table.options, StandardOptions) else StandardOptions
        )

    def options(self, opts: Mapping[str, Any] | None = None, **kw: Any) -> StandardOptions:
        """``opts`` checked for this mode and its machine, before anything runs."""
        options = self.options_class.of(opts, **kw)
        assert isinstance(options, StandardOptions)
        self.table.work(options.extra_steps)  # refuses steps for states the machine lacks
        return options

    def start(
        self,
        chain: LLMChain,
        opts: Mapping[str, Any] | None = None,
        *,
        run_class: type[Run] = Run,
        hooks: Iterable[Hook] = (),
        at: str | None = None,
        **kw: Any,
    ) -> Run:
        """A run over ``chain``, at its entry state, not yet stepped; ``hooks`` observe it.

        ``at`` enters another working state: the one that asked what the chain now
        carries the answer to (a resume).
        """
        options = self.options(opts, **kw)
        if at is not None and at not in self.table.steps:
            raise ValueError(
                f"The run was interrupted at {at!r}, which is no working state of the "
                f"{self.table.name} machine (its working states: {list(self.table.working)})"
            )
        if options.middleware:
            # here: the middleware package loads with the first run that has any
            from .._middleware.human_in_the_loop import check_gates

            check_gates(options.middleware, chain.tools, self.table)
        situation = _situation(chain)
        chain = reset_run_count(chain)  # creates mode_state when there is none
        if situation == _PENDING and chain.last_message not in chain.exchanged_messages:
            # The pending reply is this run's to approve and execute.
            assert chain.last_message is not None
            chain = attrs.evolve(
                chain, exchanged_messages=(*chain.exchanged_messages, chain.last_message)
            )
        return self._run(run_class, chain, at or self.table.entries[situation], options, hooks)

    def restore(
        self,
        chain: LLMChain,
        state: str,
        trace: Trace,
        opts: Mapping[str, Any] | None = None,
        *,
        run_class: type[Run] = Run,
        hooks: Iterable[Hook] = (),
    ) -> Run:
        """A run at working ``state`` over ``chain``, with ``trace`` behind it: a checkpoint's.

        No entry logic and no run-count reset: the run goes on where it stopped.
        """
        if trace.machine != self.table.name:
            raise ValueError(
                f"The trace is of the {trace.machine!r} machine; this mode runs "
                f"the {self.table.name!r} one"
            )
        if state not in self.table.steps:
            raise ValueError(
                f"Cannot restore a run at {state!r}; working states: {list(self.table.working)}"
            )
        run = self._run(run_class, chain, state, self.options(opts), hooks)
        run.trace = trace
        return run

    def _run(
        self,
        run_class: type[Run],
        chain: LLMChain,
        entry: str,
        options: StandardOptions,
        hooks: Iterable[Hook],
    ) -> Run:
        return run_class(self.table, chain, entry, options, hooks=hooks)

    async def run(
        self, chain: LLMChain, opts: Mapping[str, Any] | None = None, **kw: Any
    ) -> Terminal:
        """Run to the end; a step-level pause reason is folded into ``custom_context``."""
        return await self.start(chain, opts, **kw).run()
