"""The middleware base class: an agent's hooks around the machine, each a no-op by default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._results import PipelineResult

if TYPE_CHECKING:
    from .._agent import Agent
    from .._state import AgentState

__all__ = ["Middleware"]


class Middleware:
    """Subclass and override the hooks you need; the others leave the state as it is.

    The agent calls them in stack order (``after_model`` in reverse). A hook
    that raises :class:`~agentfsm.errors.ChainError` ends the execute as an
    error, with the state as it was; ``handle_resume`` raises ``ValueError``
    for an answer that does not fit, and nothing changes. ``approval_gate`` runs
    inside the machine, before each batch of tool calls.
    """

    def approval_gate(
        self, result: PipelineResult, opts: Mapping[str, Any] | None = None
    ) -> PipelineResult:
        """Before a batch of tool calls runs: ``result`` to let it run, or the run's end
        (``Interrupted`` with the data a human answers). The first gate that ends the
        batch wins; the answer comes back through :meth:`handle_resume`."""
        return result

    def before_model(self, state: AgentState) -> AgentState:
        """Before every run the agent starts (execute and resume alike)."""
        return state

    def after_model(self, state: AgentState) -> AgentState:
        """After a run that ended ok; ``state.interrupt(data)`` interrupts it instead."""
        return state

    async def handle_resume(
        self, agent: Agent, state: AgentState, answer: Any
    ) -> AgentState | None:
        """Answer the interrupt in ``state`` if it is this middleware's; None if not.

        The state returned is run as an execute would run it: a conversation
        that ends with tool results enters the machine at ``propagating``, so an
        answered tool call reaches the model on its next call. The first
        middleware that returns a state wins; none does, the resume is refused.
        """
        return None
