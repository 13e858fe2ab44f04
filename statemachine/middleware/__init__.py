"""Middleware: hooks an agent runs around the machine, and human approval of tool calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .human_in_the_loop import HumanInTheLoop, check_pre_tool_hitl

if TYPE_CHECKING:
    from ..agent import AgentState

__all__ = ["HumanInTheLoop", "Middleware", "check_pre_tool_hitl"]


@runtime_checkable
class Middleware(Protocol):
    """An agent's middleware. Every hook is optional; define the ones you need.

    ``before_model(state)`` runs once per execute, in stack order, before the
    machine starts; ``after_model(state)`` in reverse order once the run ended
    ok, and may interrupt it (return ``state.interrupt(data)``). A hook that
    raises :class:`~statemachine.errors.ChainError` ends the execute as an error.
    """


class BeforeModel(Protocol):
    def before_model(self, state: AgentState) -> AgentState: ...


class AfterModel(Protocol):
    def after_model(self, state: AgentState) -> AgentState: ...
