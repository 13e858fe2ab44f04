"""The steps a machine's states are made of, and the effects they declare.

A state of a :class:`~agentfsm.MachineTable` lists its work as steps: each takes a
:data:`PipelineResult` and the run's options and gives the next result
(``Continue`` to go on, a terminal to stop). These are the built-in steps of the
standard machine and the LangChain modes, to reuse in a table of your own;
:func:`effects` declares what a step of yours does (calls the model, runs tools,
asks for approval, spends the budget), which migrations, ``agentfsm check`` and
the studio read from the table.
"""

from ._effects import effects, state_effects
from ._moved import forward, show_at
from ._results import Continue, PipelineResult
from ._steps import (
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
    take_tool_answers,
)

__all__ = [
    "Continue",
    "PipelineResult",
    "Step",
    "call_llm",
    "check_max_runs",
    "check_pause",
    "check_response_complete",
    "check_tool_interrupts",
    "check_until_tool",
    "check_until_tool_success",
    "effects",
    "execute_tools",
    "expand_tool_results",
    "propagate_state",
    "state_effects",
    "take_tool_answers",
]

#: The last release's step-pipe helpers (a table replaced them) and the mode counters'
#: internals, kept one more release.
__getattr__ = forward(
    __name__,
    ("agentfsm._steps", "agentfsm._effects"),
    frozenset(
        {
            "Effect",
            "add_tool_message",
            "continue_or_done",
            "deep_merge",
            "ensure_mode_state",
            "execute_step",
            "execute_tool_calls",
            "failure_budget_spent",
            "get_run_count",
            "normalize_pause",
            "pending_calls",
            "pipe",
            "reset_run_count",
            "run_tool_calls",
        }
    ),
)

show_at(__name__, globals())
