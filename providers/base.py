"""What the engine needs of a model: one async call from a conversation to a reply."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from agentfsm.messages import Message, MessageDelta
from agentfsm.tools import Tool

__all__ = ["ChatModel", "DeltaHandler", "ModelSettings", "Usage"]

DeltaHandler = Callable[[MessageDelta], None]


@runtime_checkable
class ChatModel(Protocol):
    """A chat model the engine can call.

    ``complete`` returns the assistant reply; it raises
    :class:`~agentfsm.errors.ChainError` on failure, with ``retryable`` set
    when another model (a fallback) may succeed where this one failed. The
    reply's ``metadata`` may carry ``usage`` (see :class:`Usage`) and ``model``
    (who answered). ``on_delta`` receives streamed pieces as they arrive.
    """

    @property
    def name(self) -> str: ...

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message: ...


@attrs.frozen
class Usage:
    """Tokens one call used; stored in a reply's metadata as a plain mapping."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    @classmethod
    def of(cls, message: Message) -> Usage | None:
        """The usage a reply reports, if any."""
        raw = message.metadata.get("usage")
        if not isinstance(raw, Mapping):
            return None
        return cls(int(raw.get("input_tokens", 0)), int(raw.get("output_tokens", 0)))


@attrs.frozen
class ModelSettings:
    """Sampling and tool options common to the providers; ``extra`` goes to the body as is."""

    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    extra: Mapping[str, Any] = attrs.field(factory=dict)
