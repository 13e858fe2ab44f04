"""Modes: how a chain is run. The built-ins register here by name."""

from __future__ import annotations

from .._registry import MODES, Mode, ModeLike, register_mode, resolve_mode, run_chain
from .langchain import (
    LANGCHAIN_MACHINES,
    SINGLE_CALL,
    STEP,
    UNTIL_SUCCESS,
    UNTIL_TOOL_USED,
    WHILE_NEEDS_RESPONSE,
    SingleCall,
    Step,
    UntilSuccess,
    UntilToolUsed,
    WhileNeedsResponse,
)
from .standard import StandardMode

__all__ = [
    "LANGCHAIN_MACHINES",
    "MODES",
    "SINGLE_CALL",
    "STEP",
    "UNTIL_SUCCESS",
    "UNTIL_TOOL_USED",
    "WHILE_NEEDS_RESPONSE",
    "Mode",
    "ModeLike",
    "SingleCall",
    "StandardMode",
    "Step",
    "UntilSuccess",
    "UntilToolUsed",
    "WhileNeedsResponse",
    "register_mode",
    "resolve_mode",
    "run_chain",
]

register_mode("", SingleCall)
register_mode("step", Step)
register_mode("while_needs_response", WhileNeedsResponse)
register_mode("until_success", UntilSuccess)
register_mode("until_tool_used", UntilToolUsed)
register_mode("standard", StandardMode)
