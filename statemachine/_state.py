"""AgentState: what a host keeps between runs.

The conversation (without the system prompt), the agent's own state, and how
the last run ended. It is plain data, so the serializer and the stores read it
without knowing the agent that produced it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from ._errors import ChainError
from ._messages import Message, ToolResult, Usage, message_tuple

__all__ = ["AgentState", "Status"]

Status = Literal["new", "ok", "paused", "interrupted", "error"]


@attrs.frozen
class AgentState:
    """The conversation, the agent's state, and how the last run ended."""

    messages: tuple[Message, ...] = attrs.field(default=(), converter=message_tuple)
    state: Mapping[str, Any] = attrs.field(factory=dict)
    status: Status = "new"
    interrupt_data: Mapping[str, Any] | None = None
    #: The working state that asked, when the run ended interrupted: an answer enters
    #: the machine there (:meth:`agentfsm.Agent.resume`).
    interrupted_at: str | None = None
    pause_reason: Any = None
    error: ChainError | None = None
    tool_result: ToolResult | None = None
    #: The tokens the last run used, summed over its model calls.
    usage: Usage = attrs.field(factory=Usage)
    #: The typed final answer of a run that ended ``ok``, for an agent with an
    #: ``output_type`` (a state loaded from a store holds its plain JSON form).
    output: Any = None

    @classmethod
    def of(cls, prompt: str, **state: Any) -> AgentState:
        """A new conversation starting with the user's ``prompt``."""
        if not isinstance(prompt, str):
            raise TypeError(
                f"AgentState.of takes the user's prompt as text, got {type(prompt).__name__}"
            )
        return cls(messages=(Message.user(prompt),), state=state)

    @classmethod
    def given(cls, value: AgentState | str | Sequence[Message]) -> AgentState:
        """What an agent runs on: a state as it is, a prompt (``"What is 1+2?"``) as a new
        conversation, or a list of messages as the conversation so far."""
        if isinstance(value, AgentState):
            return value
        if isinstance(value, str):
            return cls.of(value)
        if isinstance(value, list | tuple) and all(isinstance(m, Message) for m in value):
            return cls(messages=tuple(value))
        raise TypeError(
            "An agent runs on an AgentState, a prompt (str) or a list of Messages; "
            f"got {type(value).__name__}"
        )

    def add_user_message(self, text: str) -> AgentState:
        return attrs.evolve(self, messages=(*self.messages, Message.user(text)))

    def interrupt(self, data: Mapping[str, Any]) -> AgentState:
        """This state, interrupted with ``data`` (for an ``after_model`` hook)."""
        return attrs.evolve(self, status="interrupted", interrupt_data=dict(data))

    def replace_tool_result(self, result: ToolResult) -> AgentState:
        """This state with the result for ``result.tool_call_id`` replaced by ``result``.

        How a middleware answers a tool's interrupt: the answer becomes the
        result the model reads. ValueError when no tool message holds that call.
        """
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            ids = [r.tool_call_id for r in message.tool_results]
            if message.role == "tool" and result.tool_call_id in ids:
                results = tuple(
                    result if r.tool_call_id == result.tool_call_id else r
                    for r in message.tool_results
                )
                replaced = attrs.evolve(message, tool_results=results)
                messages = (*self.messages[:index], replaced, *self.messages[index + 1 :])
                return attrs.evolve(self, messages=messages)
        raise ValueError(f"No tool result for call {result.tool_call_id!r} in the conversation")
