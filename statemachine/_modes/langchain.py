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

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .._chain import LLMChain
from .._effects import effects
from .._errors import ChainError
from .._machine import Edge, MachineTable
from .._options import LangChainOptions, options_of
from .._options import check_tool_names as _tool_names
from .._results import Continue, Failed, Ok, PipelineResult, Terminal
from .._run import Run
from .._steps import (
    call_llm,
    check_max_runs,
    check_until_tool,
    ensure_mode_state,
    execute_step,
    execute_tools,
    expand_tool_results,
    failure_budget_spent,
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


@effects("model")
async def call_model(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """One model call that leaves ``run_count`` alone (``execute_step``): the modes that
    count no runs (single call, step, until_success) call the model this way."""
    if not isinstance(result, Continue):
        return result
    return await execute_step(result.chain)


@effects()
def finish(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """``Continue`` becomes ``Ok``: the mode's work is done once this step is reached."""
    if not isinstance(result, Continue):
        return result
    return Ok(result.chain)


@effects()
def check_needs_response(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """The loop's condition (``continue_or_done`` without the recursion): a chain that
    needs a response goes round again (``Continue``), any other is done (``Ok``)."""
    if not isinstance(result, Continue):
        return result
    if result.chain.needs_response:
        return result
    return Ok(result.chain)


@effects("model", "tools")
async def tools_else_model(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """One step of the chain: its pending tool calls when the last reply asked for
    tools, else one (uncounted) model call."""
    if not isinstance(result, Continue):
        return result
    if pending_calls(result.chain.last_message):
        return await execute_tools(result, opts)
    return await call_model(result, opts)


@effects("bound")
def check_should_continue(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Option ``should_continue(chain)`` true asks for another step; absent or false, done."""
    if not isinstance(result, Continue):
        return result
    should_continue = options_of(opts).get("should_continue")
    if should_continue is not None and should_continue(result.chain):
        return result
    return Ok(result.chain)


@effects("bound")
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
        return Failed(chain, failure_budget_spent(chain))
    if last.role == "tool" and not any(r.is_error for r in last.tool_results):
        return Ok(chain)
    if last.role == "assistant":
        return Ok(chain)
    return result


@effects()
def check_tool_names(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Every name of option ``tool_names`` is one of the chain's tools, or the run fails
    with ``invalid_tool_name`` before any model call."""
    if not isinstance(result, Continue):
        return result
    names = options_of(opts).tool_names or ()
    missing = [n for n in names if result.chain.tool(n) is None]
    if not missing:
        return result
    quoted = ", ".join(missing)
    label = "Tool names" if len(missing) > 1 else "Tool name"
    return Failed(
        result.chain,
        ChainError("invalid_tool_name", f"{label} '{quoted}' not found in available tools"),
    )


@effects()
def start_mode_state(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """``ensure_mode_state`` as a step: ``run_count`` starts at 0 unless the chain has one."""
    if not isinstance(result, Continue):
        return result
    chain = ensure_mode_state(result.chain)
    return result if chain is result.chain else Continue(chain)


# ---------------------------------------------------------------- the tables
# Each working state also pauses and fails by the default edges (to ``paused`` and
# ``error``); the edges below are the ones a state takes by its own work.

_FAILED_CALL = "the model call failed or the failure budget is spent"
_EXECUTED = "every pending call has its result (or none was pending)"
_EXPANDED = "last turn's tool-result expansions are in the conversation"

SINGLE_CALL = MachineTable(
    name="single_call",
    steps={"calling": (call_model, finish)},
    terminals=_TERMINALS,
    entries={_FRESH: "calling"},
    edges=(
        Edge(
            "calling",
            "ok",
            on=Ok,
            trigger="answered",
            why="the model replied; tool calls in it are left for the host",
        ),
        Edge("calling", "error", on=Failed, trigger="failed", why=_FAILED_CALL),
    ),
    options=LangChainOptions,
)
"""Mode ``""`` (None): one model call, no tools, no run count."""

STEP = MachineTable(
    name="step",
    steps={"stepping": (tools_else_model,), "deciding": (check_should_continue,)},
    terminals=_TERMINALS,
    entries={_FRESH: "stepping"},
    edges=(
        Edge(
            "stepping",
            "deciding",
            on=Continue,
            trigger="stepped",
            why="the pending tools ran, or else the model replied",
        ),
        Edge(
            "stepping",
            "error",
            on=Failed,
            trigger="failed",
            why="the model call failed, the failure budget is spent, or a callback raised",
        ),
        Edge(
            "deciding",
            "stepping",
            on=Continue,
            trigger="loop",
            why="should_continue(chain) asked for another step",
        ),
        Edge("deciding", "ok", on=Ok, trigger="done", why="no should_continue, or it said no"),
    ),
    options=LangChainOptions,
)
"""Mode ``step``: pending tools if any, else one model call; again while ``should_continue``."""

WHILE_NEEDS_RESPONSE = MachineTable(
    name="while_needs_response",
    steps={
        "deciding": (check_needs_response, check_max_runs),
        "executing": (execute_tools,),
        "expanding": (expand_tool_results,),
        "calling": (call_llm,),
    },
    terminals=_TERMINALS,
    entries={_FRESH: "deciding"},
    edges=(
        Edge("executing", "expanding", on=Continue, trigger="executed", why=_EXECUTED),
        Edge("expanding", "calling", on=Continue, trigger="expanded", why=_EXPANDED),
        Edge("calling", "deciding", on=Continue, trigger="called", why="the model replied"),
        Edge("calling", "error", on=Failed, trigger="failed", why=_FAILED_CALL),
        Edge(
            "deciding",
            "executing",
            on=Continue,
            trigger="loop",
            why="the chain needs a response, within max_runs",
        ),
        Edge("deciding", "ok", on=Ok, trigger="done", why="the chain needs no response"),
        Edge(
            "deciding",
            "error",
            on=Failed,
            trigger="failed",
            why="max_runs model calls were made and the chain still needs a response",
        ),
    ),
    options=LangChainOptions,
)
"""Mode ``while_needs_response``: tools, expansions, a model call, while a response is needed."""

UNTIL_SUCCESS = MachineTable(
    name="until_success",
    steps={
        "checking": (check_success,),
        "calling": (call_model,),
        "executing": (execute_tools,),
    },
    terminals=_TERMINALS,
    entries={_FRESH: "checking", "forced": "calling"},
    edges=(
        Edge(
            "checking",
            "calling",
            on=Continue,
            trigger="retry",
            why="no reply or clean tool message stands yet, within max_retry_count",
        ),
        Edge(
            "checking",
            "ok",
            on=Ok,
            trigger="succeeded",
            why="a reply, or a tool message without errors, stands",
        ),
        Edge(
            "checking",
            "error",
            on=Failed,
            trigger="failed",
            why="max_retry_count failures in a row",
        ),
        Edge("calling", "executing", on=Continue, trigger="called", why="the model replied"),
        Edge("calling", "error", on=Failed, trigger="failed", why=_FAILED_CALL),
        Edge("executing", "checking", on=Continue, trigger="loop", why=_EXECUTED),
    ),
    options=LangChainOptions,
)
"""Mode ``until_success``: call and run tools until a reply or a clean tool message stands.

A run enters at ``checking``, or, with ``force_recurse``, at ``calling``.
"""

UNTIL_TOOL_USED = MachineTable(
    name="until_tool_used",
    steps={
        "checking_tools": (check_tool_names, start_mode_state),
        "expanding": (expand_tool_results,),
        "calling": (call_llm,),
        "executing": (execute_tools,),
        "until_check": (check_until_tool,),
        "deciding": (check_max_runs, check_needs_response),
    },
    terminals=_TERMINALS,
    entries={_FRESH: "checking_tools"},
    edges=(
        Edge(
            "checking_tools",
            "expanding",
            on=Continue,
            trigger="checked",
            why="every target tool is among the chain's tools",
        ),
        Edge(
            "checking_tools",
            "error",
            on=Failed,
            trigger="failed",
            why="a target tool is not among the chain's tools",
        ),
        Edge("expanding", "calling", on=Continue, trigger="expanded", why=_EXPANDED),
        Edge("calling", "executing", on=Continue, trigger="called", why="the model replied"),
        Edge("calling", "error", on=Failed, trigger="failed", why=_FAILED_CALL),
        Edge("executing", "until_check", on=Continue, trigger="executed", why=_EXECUTED),
        Edge(
            "until_check",
            "ok",
            on=Ok,
            trigger="satisfied",
            why="a target tool was called; Ok carries its result",
        ),
        Edge(
            "until_check",
            "deciding",
            on=Continue,
            trigger="unsatisfied",
            why="no target tool result this turn",
        ),
        Edge(
            "deciding",
            "expanding",
            on=Continue,
            trigger="loop",
            why="the chain needs a response, within max_runs",
        ),
        Edge("deciding", "ok", on=Ok, trigger="done", why="the chain needs no response"),
        Edge(
            "deciding", "error", on=Failed, trigger="failed", why="max_runs model calls were made"
        ),
    ),
    options=LangChainOptions,
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
        return Run(self.table, chain, self.table.entries[_FRESH], opts)

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
        entry = "forced" if (opts or {}).get("force_recurse") else _FRESH
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
        names = _tool_names(
            self.tool_names if self.tool_names is not None else given.get("tool_names")
        )
        if not names:
            raise ValueError("until_tool_used needs tool_names: one tool name or a list")
        return super().start(chain, {**given, "tool_names": list(names)})
