"""Make a model from a provider's name, as a command line or a config file names it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from agentfsm._messages import Message

from .._chat_model import ChatModel
from ._anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL
from ._anthropic import AnthropicChat
from ._openai import DEFAULT_BASE_URL as OPENAI_BASE_URL
from ._openai import OpenAIChat
from ._responses import OpenAIResponses
from ._scripted import ScriptedModel

__all__ = ["PROVIDERS", "create_model"]


def _openai(model: str, base_url: str | None, api_key: str | None, stream: bool) -> ChatModel:
    return OpenAIChat(model, api_key=api_key, base_url=base_url or OPENAI_BASE_URL, stream=stream)


def _openai_responses(
    model: str, base_url: str | None, api_key: str | None, stream: bool
) -> ChatModel:
    return OpenAIResponses(
        model, api_key=api_key, base_url=base_url or OPENAI_BASE_URL, stream=stream
    )


def _anthropic(model: str, base_url: str | None, api_key: str | None, stream: bool) -> ChatModel:
    return AnthropicChat(
        model, api_key=api_key, base_url=base_url or ANTHROPIC_BASE_URL, stream=stream
    )


def _echo(messages: Sequence[Message]) -> str:
    """The scripted provider's answer: the last user message, echoed."""
    for message in reversed(messages):
        if message.role == "user":
            return f"You said: {message.text}"
    return "Nothing to answer."


def _scripted(model: str, base_url: str | None, api_key: str | None, stream: bool) -> ChatModel:
    return ScriptedModel(_echo, model_name=f"scripted:{model}", stream=stream)


#: Provider name -> factory of (model, base_url, api_key, stream).
PROVIDERS: Final[Mapping[str, Callable[[str, str | None, str | None, bool], ChatModel]]] = {
    "openai": _openai,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
    "scripted": _scripted,
}


def create_model(
    provider: str,
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    stream: bool = False,
) -> ChatModel:
    """A model of ``provider``: ``openai`` (any compatible server via ``base_url``),
    ``openai-responses`` (OpenAI's Responses API), ``anthropic``, or ``scripted``
    (offline: echoes the last user message).

    Unknown providers raise ValueError naming the known ones.
    """
    factory = PROVIDERS.get(provider.strip().lower())
    if factory is None:
        raise ValueError(f"Unknown provider {provider!r}. Known providers: {', '.join(PROVIDERS)}")
    return factory(model, base_url, api_key, stream)
