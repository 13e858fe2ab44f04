"""AgentState: what a host keeps between runs.

The conversation (without the system prompt), the agent's own state, and how
the last run ended. It is plain data, so the serializer and the stores read it
without knowing the agent that produced it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from .errors import ChainError
from .messages import Message, ToolResult, message_tuple

__all__ = ["AgentState", "Status"]

Status = Literal["new", "ok", "paused", "interrupted", "error"]


@attrs.frozen
class AgentState:
    """The conversation, the agent's state, and how the last run ended."""

    messages: tuple[Message, ...] = attrs.field(default=(), converter=message_tuple)
    state: Mapping[str, Any] = attrs.field(factory=dict)
    status: Status = "new"
    interrupt_data: Mapping[str, Any] | None = None
    pause_reason: Any = None
    error: ChainError | None = None
    tool_result: ToolResult | None = None

    @classmethod
    def of(cls, prompt: str, **state: Any) -> AgentState:
        """A new conversation starting with the user's ``prompt``."""
        return cls((Message.user(prompt),), state)

    def add_user_message(self, text: str) -> AgentState:
        return attrs.evolve(self, messages=(*self.messages, Message.user(text)))

    def interrupt(self, data: Mapping[str, Any]) -> AgentState:
        """This state, interrupted with ``data`` (for an ``after_model`` hook)."""
        return attrs.evolve(self, status="interrupted", interrupt_data=dict(data))
