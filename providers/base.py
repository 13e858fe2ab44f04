"""What the engine needs of a model: one async call from a conversation to a reply."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from agentfsm.messages import Message, MessageDelta, Usage
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
class ModelSettings:
    """Options of a model call; ``extra`` goes to the body as is, last.

    Not every provider honours every setting, and some models refuse some (the
    README's "Models" section has the table); a setting a model refuses is left
    out of its request rather than failing the call.

    ``thinking`` turns on Anthropic extended thinking: a token budget, or
    ``"adaptive"`` (the model decides; models that take adaptive thinking only get
    it for a budget too). ``effort`` (``low``, ``medium``, ``high``, ``xhigh``,
    ``max``) goes to the models that take it (Anthropic's ``output_config``;
    OpenAI reasoning models read it as ``reasoning_effort`` unless that is
    given). ``reasoning_effort`` (``low``,
    ``medium``, ``high``...) goes to OpenAI reasoning models. ``send_reasoning``
    sends earlier turns' reasoning back to an OpenAI-compatible server as
    ``reasoning_content`` (DeepSeek wants it in a tool loop; the official API
    refuses it). ``cache_system`` and ``cache_tools`` put Anthropic prompt-cache
    breakpoints after the system prompt and after the tools (``cache_ttl``:
    ``5m`` or ``1h``).
    """

    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    thinking: int | Literal["adaptive"] | None = None
    effort: str | None = None
    reasoning_effort: str | None = None
    send_reasoning: bool = False
    cache_system: bool = False
    cache_tools: bool = False
    cache_ttl: Literal["5m", "1h"] | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict)
