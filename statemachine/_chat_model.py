"""What the engine needs of a model: one async call from a conversation to a reply."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, runtime_checkable

import attrs

from agentfsm._messages import Message, MessageDelta, Usage
from agentfsm._tools import Tool

__all__ = [
    "CUSTOM_PROVIDER",
    "ChatModel",
    "DeltaHandler",
    "ModelSettings",
    "Usage",
    "native_output",
    "provider_of",
    "split_model_name",
]

#: The provider a model reports when it names none and its name is not ``provider:model``.
CUSTOM_PROVIDER: Final = "agentfsm.custom"
_PROVIDER_MODEL: Final = re.compile(r"([a-z][a-z0-9_.-]*):([^:\s]+)")

DeltaHandler = Callable[[MessageDelta], None]


@runtime_checkable
class ChatModel(Protocol):
    """A chat model the engine can call.

    ``complete`` returns the assistant reply; it raises
    :class:`~agentfsm.errors.ChainError` on failure, with ``retryable`` set
    when another model (a fallback) may succeed where this one failed. The
    reply's ``metadata`` may carry ``usage`` (see :class:`Usage`) and ``model``
    (who answered). ``on_delta`` receives streamed pieces as they arrive.

    A model may also have a ``provider_name`` (who serves it, as telemetry's
    ``gen_ai.provider.name`` says), and ``server_address`` / ``server_port`` when
    it is called over the network; they are optional, so a model written before
    them still is one: :func:`provider_of` reads the provider of any model.
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


def provider_of(model: ChatModel) -> str:
    """Who serves ``model``: its ``provider_name``; else the ``provider`` of a name
    spelled ``provider:model``; else :data:`CUSTOM_PROVIDER`."""
    own = getattr(model, "provider_name", None)
    if isinstance(own, str) and own:
        return own
    return split_model_name(model.name)[0] or CUSTOM_PROVIDER


def split_model_name(name: str) -> tuple[str | None, str]:
    """``(provider, model)`` of a name spelled ``provider:model``; ``(None, name)`` otherwise."""
    named = _PROVIDER_MODEL.fullmatch(name)
    return (named[1], named[2]) if named else (None, name)


def native_output(tools: Sequence[Tool]) -> tuple[list[Tool], Mapping[str, Any] | None]:
    """``tools`` less the run's output tool (:class:`agentfsm.output.OutputTool`, wrapped
    or not), and that tool's ``output_format``: for a provider that asks for the final
    answer in its own structured-output form rather than as a tool call."""
    kept: list[Tool] = []
    found: Mapping[str, Any] | None = None
    for tool in tools:
        inner: Any = tool
        while getattr(inner, "output_format", None) is None and isinstance(
            getattr(inner, "wrapped", None), Tool
        ):
            inner = inner.wrapped
        form = getattr(inner, "output_format", None)
        if found is None and isinstance(form, Mapping):
            found = form
        else:
            kept.append(tool)
    return kept, found
