"""Middleware: hooks an agent runs around the machine, and human approval of tool calls."""

from __future__ import annotations

from .base import Middleware
from .human_in_the_loop import HumanInTheLoop, check_decisions, check_pre_tool_hitl, request_digest

__all__ = [
    "HumanInTheLoop",
    "Middleware",
    "check_decisions",
    "check_pre_tool_hitl",
    "request_digest",
]
