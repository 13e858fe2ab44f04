"""Middleware: hooks an agent runs around the machine, and human approval of tool calls."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .human_in_the_loop import HumanInTheLoop, check_pre_tool_hitl

__all__ = ["HumanInTheLoop", "Middleware", "check_pre_tool_hitl"]


@runtime_checkable
class Middleware(Protocol):
    """An agent's middleware. Every hook is optional; define the ones you need.

    ``before_model(state)`` runs once per execute, in stack order, before the
    machine starts; ``after_model(state)`` in reverse order once the run ended
    ok, and may interrupt it (return ``state.interrupt(data)``). A hook that
    raises :class:`~agentfsm.errors.ChainError` ends the execute as an error.
    """
