"""create_model: a model from a provider's name, as the command line gives it."""

from __future__ import annotations

import pytest

from agentfsm import Message
from agentfsm.providers import AnthropicChat, OpenAIChat, ScriptedModel, create_model


def test_openai() -> None:
    model = create_model("openai", "gpt-4o-mini", api_key="k", stream=True)
    assert isinstance(model, OpenAIChat)
    assert model.name == "openai:gpt-4o-mini"
    assert model.stream
    assert model.base_url == "https://api.openai.com/v1"


def test_openai_compatible_local_server() -> None:
    model = create_model("openai", "qwen2.5", base_url="http://127.0.0.1:11434/v1/")
    assert isinstance(model, OpenAIChat)
    assert model.base_url == "http://127.0.0.1:11434/v1"


def test_anthropic() -> None:
    model = create_model("Anthropic", "claude-x", api_key="k", base_url="http://127.0.0.1:9")
    assert isinstance(model, AnthropicChat)
    assert model.name == "anthropic:claude-x"
    assert model.base_url == "http://127.0.0.1:9"
    assert not model.stream


async def test_scripted_echoes_offline() -> None:
    model = create_model("scripted", "echo")
    assert isinstance(model, ScriptedModel)
    assert model.name == "scripted:echo"
    reply = await model.complete([Message.user("ping")], [])
    assert reply.text == "You said: ping"


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="Unknown provider 'mistral'") as caught:
        create_model("mistral", "large")
    for name in ("openai", "anthropic", "scripted"):
        assert name in str(caught.value)


def test_models_say_who_serves_them_and_where() -> None:
    official = create_model("anthropic", "claude-x", api_key="k")
    assert isinstance(official, AnthropicChat)
    assert (official.provider_name, official.server_address, official.server_port) == (
        "anthropic",
        "api.anthropic.com",
        443,
    )
    local = create_model("openai", "qwen", base_url="http://127.0.0.1:11434/v1")
    assert isinstance(local, OpenAIChat)
    assert (local.provider_name, local.server_address, local.server_port) == (
        "openai",
        "127.0.0.1",
        11434,
    )
    responses = create_model("openai-responses", "gpt-5", api_key="k")
    assert getattr(responses, "provider_name", None) == "openai"
