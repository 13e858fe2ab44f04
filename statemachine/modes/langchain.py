"""The original chain's built-in modes, each a declared machine run by :class:`~agentfsm.run.Run`.

Every mode is a :class:`~agentfsm.machine.MachineTable` whose states' work is
steps of :mod:`agentfsm.steps` (and the few loop conditions written here), so a
run of any of them is stepped, traced, drawn and checked like the standard
mode's: its loop is an edge of its table, never a ``while`` inside a step.

- mode ``""`` (None): :class:`SingleCall`, the :data:`SINGLE_CALL` machine (``single_call``);
- ``step``: :class:`Step`, :data:`STEP` (``step``);
- ``while_needs_response``: :class:`WhileNeedsResponse`, :data:`WHILE_NEEDS_RESPONSE`;
- ``until_success``: :class:`UntilSuccess`, :data:`UNTIL_SUCCESS`;
- ``until_tool_used``: :class:`UntilToolUsed`, :data:`UNTIL_TOOL_USED`.

Each class has ``start(chain, opts) -> Run`` (a run at its entry, not yet
stepped) and ``async run(chain, opts) -> Terminal`` (that run, to its end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from ..chain import LLMChain
from ..errors import ChainError
from ..machine import Edge, MachineTable
from ..results import Continue, Failed, Ok, Paused, PipelineResult, Terminal
from ..run import Run
from ..steps import (
    call_llm,
    check_max_runs,
    check_until_tool,
    ensure_mode_state,
    execute_step,
    execute_tools,
    expand_tool_results,
    pending_calls,
    reset_run_count,
)

__all__ = [
    "LANGCHAIN_MACHINES",
    "SINGLE_CALL",
    "STEP",
    "UNTIL_SUCCESS",
    "UNTIL_TOOL_USED",
    "WHILE_NEEDS_RESPONSE",
    "SingleCall",
    "Step",
    "UntilSuccess",
    "UntilToolUsed",
    "WhileNeedsResponse",
    "call_model",
    "check_needs_response",
    "check_should_continue",
    "check_success",
    "check_tool_names",
    "finish",
    "start_mode_state",
    "tools_else_model",
]

Opts = Mapping[str, Any] | None

#: The situation every LangChain mode's run starts in, as its table's entries name it.
_FRESH = "fresh"
_TERMINALS = ("ok", "paused", "error")


# ---------------------------------------------------------------- the modes' own steps


async def call_model(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """One model call that leaves ``run_count`` alone (``execute_step``): the modes that
    count no runs (single call, step, until_success) call the model this way."""
    if not isinstance(result, Continue):
        return result
    return await execute_step(result.chain)


def finish(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """``Continue`` becomes ``Ok``: the mode's work is done once this step is reached."""
    if not isinstance(result, Continue):
        return result
    return Ok(result.chain)


def check_needs_response(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """The loop's condition (``continue_or_done`` without the recursion): a chain that
    needs a response goes round again (``Continue``), any other is done (``Ok``)."""
    if not isinstance(result, Continue):
        return result
    if result.chain.needs_response:
        return result
    return Ok(result.chain)


async def tools_else_model(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """One step of the chain: its pending tool calls when the last reply asked for
    tools, else one (uncounted) model call."""
    if not isinstance(result, Continue):
        return result
    if pending_calls(result.chain.last_message):
        return await execute_tools(result, opts)
    return await call_model(result, opts)


def check_should_continue(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Option ``should_continue(chain)`` true asks for another step; absent or false, done."""
    if not isinstance(result, Continue):
        return result
    should_continue = (opts or {}).get("should_continue")
    if callable(should_continue) and should_continue(result.chain):
        return result
    return Ok(result.chain)


def check_success(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """until_success's condition: a reply, or a tool message without errors, stands
    (``Ok``); ``max_retry_count`` consecutive failures end the run; else try again.

    Failures are checked first, so a spent budget fails even a standing message.
    """
    if not isinstance(result, Continue):
        return result
    chain = result.chain
    last = chain.last_message
    if last is None:
        return result
    if chain.current_failure_count >= chain.max_retry_count:
        return Failed(chain, ChainError("exceeded_failure_count", "Exceeded max failure count"))
    if last.role == "tool" and not any(r.is_error for r in last.tool_results):
        return Ok(chain)
    if last.role == "assistant":
        return Ok(chain)
    return result


def check_tool_names(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Every name of option ``tool_names`` is one of the chain's tools, or the run fails
    with ``invalid_tool_name`` before any model call."""
    if not isinstance(result, Continue):
        return result
    names = (opts or {}).get("tool_names") or ()
    missing = [n for n in names if result.chain.tool(n) is None]
    if not missing:
        return result
    quoted = ", ".join(missing)
    label = "Tool names" if len(missing) > 1 else "Tool name"
    return Failed(
        result.chain,
        ChainError("invalid_tool_name", f"{label} '{quoted}' not found in available tools"),
    )


def start_mode_state(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """``ensure_mode_state`` as a step: ``run_count`` starts at 0 unless the chain has one."""
    if not isinstance(result, Continue):
        return result
    chain = ensure_mode_state(result.chain)
    return result if chain is result.chain else Continue(chain)


# ---------------------------------------------------------------- the tables


def _stops(states: Iterable[str]) -> list[Edge]:
    """Each working state's ways out when a pause is requested or a step raises."""
    return [
        Edge(trigger="paused", source=s, dest="paused", why="a pause was requested", on=Paused)
        for s in states
    ]


def _failures(states: Iterable[str], why: str) -> list[Edge]:
    """Each of ``states``' way to ``error``, for ``why``."""
    return [Edge(trigger="failed", source=s, dest="error", why=why, on=Failed) for s in states]


_RAISED = "a step or a callback raised"

SINGLE_CALL = MachineTable(
    name="single_call",
    steps={"calling": (call_model, finish)},
    terminals=_TERMINALS,
    entries={_FRESH: "calling"},
    edges=(
        Edge(
            trigger="answered",
            source="calling",
            dest="ok",
            why="the model replied; tool calls in it are left for the host",
            on=Ok,
        ),
        Edge(
            trigger="failed",
            source="calling",
            dest="error",
            why="the model call failed or the failure budget is spent",
            on=Failed,
        ),
        *_stops(["calling"]),
    ),
)
"""Mode ``""`` (None): one model call, no tools, no run count."""

STEP = MachineTable(
    name="step",
    steps={"stepping": (tools_else_model,), "deciding": (check_should_continue,)},
    terminals=_TERMINALS,
    entries={_FRESH: "stepping"},
    edges=(
        Edge(
            trigger="stepped",
            source="stepping",
            dest="deciding",
            why="the pending tools ran, or else the model replied",
            on=Continue,
        ),
        Edge(
            trigger="failed",
            source="stepping",
            dest="error",
            why="the model call failed, the failure budget is spent, or a callback raised",
            on=Failed,
        ),
        Edge(
            trigger="loop",
            source="deciding",
            dest="stepping",
            why="should_continue(chain) asked for another step",
            on=Continue,
        ),
        Edge(
            trigger="done",
            source="deciding",
            dest="ok",
            why="no should_continue, or it said no",
            on=Ok,
        ),
        *_failures(["deciding"], "should_continue raised"),
        *_stops(["stepping", "deciding"]),
    ),
)
"""Mode ``step``: pending tools if any, else one model call; again while ``should_continue``."""

_WNR_STEPS = {
    "deciding": (check_needs_response, check_max_runs),
    "executing": (execute_tools,),
    "expanding": (expand_tool_results,),
    "calling": (call_llm,),
}

WHILE_NEEDS_RESPONSE = MachineTable(
    name="while_needs_response",
    steps=_WNR_STEPS,
    terminals=_TERMINALS,
    entries={_FRESH: "deciding"},
    edges=(
        Edge(
            trigger="executed",
            source="executing",
            dest="expanding",
            why="every pending call has its result (or none was pending)",
            on=Continue,
        ),
        Edge(
            trigger="expanded",
            source="expanding",
            dest="calling",
            why="last turn's tool-result expansions are in the conversation",
            on=Continue,
        ),
        Edge(
            trigger="called",
            source="calling",
            dest="deciding",
            why="the model replied",
            on=Continue,
        ),
        Edge(
            trigger="failed",
            source="calling",
            dest="error",
            why="the model call failed or the failure budget is spent",
            on=Failed,
        ),
        Edge(
            trigger="loop",
            source="deciding",
            dest="executing",
            why="the chain needs a response, within max_runs",
            on=Continue,
        ),
        Edge(
            trigger="done",
            source="deciding",
            dest="ok",
            why="the chain needs no response",
            on=Ok,
        ),
        Edge(
            trigger="failed",
            source="deciding",
            dest="error",
            why="max_runs model calls were made and the chain still needs a response",
            on=Failed,
        ),
        *_failures(["executing", "expanding"], _RAISED),
        *_stops(_WNR_STEPS),
    ),
)
"""Mode ``while_needs_response``: tools, expansions, a model call, while a response is needed."""

_US_STEPS = {
    "checking": (check_success,),
    "calling": (call_model,),
    "executing": (execute_tools,),
}

UNTIL_SUCCESS = MachineTable(
    name="until_success",
    steps=_US_STEPS,
    terminals=_TERMINALS,
    entries={_FRESH: "checking", "forced": "calling"},
    edges=(
        Edge(
            trigger="retry",
            source="checking",
            dest="calling",
            why="no reply or clean tool message stands yet, within max_retry_count",
            on=Continue,
        ),
        Edge(
            trigger="succeeded",
            source="checking",
            dest="ok",
            why="a reply, or a tool message without errors, stands",
            on=Ok,
        ),
        Edge(
            trigger="failed",
            source="checking",
            dest="error",
            why="max_retry_count failures in a row",
            on=Failed,
        ),
        Edge(
            trigger="called",
            source="calling",
            dest="executing",
            why="the model replied",
            on=Continue,
        ),
        Edge(
            trigger="failed",
            source="calling",
            dest="error",
            why="the model call failed or the failure budget is spent",
            on=Failed,
        ),
        Edge(
            trigger="loop",
            source="executing",
            dest="checking",
            why="every pending call has its result (or none was pending)",
            on=Continue,
        ),
        *_failures(["executing"], _RAISED),
        *_stops(_US_STEPS),
    ),
)
"""Mode ``until_success``: call and run tools until a reply or a clean tool message stands.

A run enters at ``checking``, or, with ``force_recurse``, at ``calling``.
"""

_UTU_STEPS = {
    "checking_tools": (check_tool_names, start_mode_state),
    "expanding": (expand_tool_results,),
    "calling": (call_llm,),
    "executing": (execute_tools,),
    "until_check": (check_until_tool,),
    "deciding": (check_max_runs, check_needs_response),
}

UNTIL_TOOL_USED = MachineTable(
    name="until_tool_used",
    steps=_UTU_STEPS,
    terminals=_TERMINALS,
    entries={_FRESH: "checking_tools"},
    edges=(
        Edge(
            trigger="checked",
            source="checking_tools",
            dest="expanding",
            why="every target tool is among the chain's tools",
            on=Continue,
        ),
        Edge(
            trigger="failed",
            source="checking_tools",
            dest="error",
            why="a target tool is not among the chain's tools",
            on=Failed,
        ),
        Edge(
            trigger="expanded",
            source="expanding",
            dest="calling",
            why="last turn's tool-result expansions are in the conversation",
            on=Continue,
        ),
        Edge(
            trigger="called",
            source="calling",
            dest="executing",
            why="the model replied",
            on=Continue,
        ),
        Edge(
            trigger="failed",
            source="calling",
            dest="error",
            why="the model call failed or the failure budget is spent",
            on=Failed,
        ),
        Edge(
            trigger="executed",
            source="executing",
            dest="until_check",
            why="every pending call has its result (or none was pending)",
            on=Continue,
        ),
        Edge(
            trigger="satisfied",
            source="until_check",
            dest="ok",
            why="a target tool was called; Ok carries its result",
            on=Ok,
        ),
        Edge(
            trigger="unsatisfied",
            source="until_check",
            dest="deciding",
            why="no target tool result this turn",
            on=Continue,
        ),
        Edge(
            trigger="loop",
            source="deciding",
            dest="expanding",
            why="the chain needs a response, within max_runs",
            on=Continue,
        ),
        Edge(
            trigger="done",
            source="deciding",
            dest="ok",
            why="the chain needs no response",
            on=Ok,
        ),
        Edge(
            trigger="failed",
            source="deciding",
            dest="error",
            why="max_runs model calls were made",
            on=Failed,
        ),
        *_failures(["expanding", "executing", "until_check"], _RAISED),
        *_stops(_UTU_STEPS),
    ),
)
"""Mode ``until_tool_used``: loop until one of ``tool_names`` is called (``max_runs`` 25)."""

#: The LangChain modes' machines, in the order of the table above.
LANGCHAIN_MACHINES: tuple[MachineTable, ...] = (
    SINGLE_CALL,
    STEP,
    WHILE_NEEDS_RESPONSE,
    UNTIL_SUCCESS,
    UNTIL_TOOL_USED,
)


# ---------------------------------------------------------------- the mode classes


class _MachineMode:
    """A mode that runs its :attr:`table` from the ``fresh`` entry with ``opts`` as given."""

    table: ClassVar[MachineTable]

    def start(self, chain: LLMChain, opts: Opts = None) -> Run:
        """A run over ``chain``, at its entry state, not yet stepped."""
        return Run(self.table, chain, self.table.entries[_FRESH], dict(opts or {}))

    async def run(self, chain: LLMChain, opts: Opts = None) -> Terminal:
        """Run to the end; a step-level pause reason is folded into ``custom_context``."""
        return await self.start(chain, opts).run()


class SingleCall(_MachineMode):
    """One model call; tool calls in the reply are left for the host."""

    table = SINGLE_CALL


class Step(_MachineMode):
    """One step: run pending tool calls if there are any, else call the model once.

    ``should_continue(chain)`` (option) asks for another step.
    """

    table = STEP


class WhileNeedsResponse(_MachineMode):
    """Call the model and run its tools until it answers without asking for any.

    Bounded by ``max_runs`` (default 25) model calls per run.
    """

    table = WHILE_NEEDS_RESPONSE

    def start(self, chain: LLMChain, opts: Opts = None) -> Run:
        """A run over ``chain`` with its run count reset: each run counts its own calls."""
        return super().start(reset_run_count(chain), opts)


class UntilSuccess(_MachineMode):
    """Call the model until a reply, or a tool message without errors, stands.

    Bounded by the chain's ``max_retry_count`` consecutive failures. Option
    ``force_recurse`` makes the first call whatever the last message is.
    """

    table = UNTIL_SUCCESS

    def start(self, chain: LLMChain, opts: Opts = None) -> Run:
        """A run at ``checking``, or at ``calling`` with ``force_recurse``."""
        opts = dict(opts or {})
        entry = "forced" if opts.get("force_recurse") else _FRESH
        return Run(self.table, chain, self.table.entries[entry], opts)


class UntilToolUsed(_MachineMode):
    """Loop until one of ``tool_names`` is called; Ok carries that tool's result.

    The names are given here or as option ``tool_names`` (one name or a list);
    ``max_runs`` defaults to 25.
    """

    table = UNTIL_TOOL_USED

    def __init__(self, tool_names: str | Sequence[str] | None = None) -> None:
        self.tool_names = [tool_names] if isinstance(tool_names, str) else tool_names

    def start(self, chain: LLMChain, opts: Opts = None) -> Run:
        """A run over ``chain``; without any tool name, a ``ValueError`` before it starts."""
        given = dict(opts or {})
        names = self.tool_names if self.tool_names is not None else given.get("tool_names")
        if isinstance(names, str):
            names = [names]
        if not names:
            raise ValueError("until_tool_used needs tool_names: one tool name or a list")
        return super().start(chain, {"max_runs": 25, **given, "tool_names": list(names)})
