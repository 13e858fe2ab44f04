"""A model built or called wrong says what happened and what to do, in one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentfsm import ChainError, Message
from agentfsm.providers import AnthropicChat, OpenAIChat, OpenAIResponses
from tests.providers.fake_server import FakeServer, Reply

MODELS = [OpenAIChat, AnthropicChat, OpenAIResponses]


@pytest.mark.parametrize("cls", MODELS)
def test_a_call_setting_given_to_the_constructor_points_at_settings(cls: Any) -> None:
    with pytest.raises(TypeError) as info:
        cls("m", api_key="k", temperature=0.1)
    assert str(info.value) == (
        f"{cls.__name__}() got unknown option(s): temperature is a call setting: "
        "settings=ModelSettings(temperature=...)"
    )


@pytest.mark.parametrize("cls", MODELS)
def test_a_misspelt_option_gets_a_suggestion(cls: Any) -> None:
    with pytest.raises(
        TypeError, match=r"got unknown option\(s\): base_ur: did you mean base_url\?$"
    ):
        cls("m", api_key="k", base_ur="http://localhost")


@pytest.mark.parametrize("cls", MODELS)
def test_a_base_url_without_a_scheme_is_refused_before_any_run(cls: Any) -> None:
    with pytest.raises(ValueError) as info:
        cls("m", api_key="k", base_url="localhost:8000/v1")
    assert str(info.value) == (
        "base_url 'localhost:8000/v1' is not an http(s) URL: did you mean "
        "'http://localhost:8000/v1'?"
    )


async def test_a_provider_key_withheld_from_another_server_is_named_with_the_fix(
    server: FakeServer,
    closing: Callable[[Any], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OPENAI_API_KEY goes to api.openai.com only: an OpenAI-compatible server (OpenRouter,
    vLLM, Azure) that answers 401 is told apart from a wrong key."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-openai-only")
    monkeypatch.delenv("AGENTFSM_API_KEY", raising=False)
    server.default = Reply(401, {"error": {"message": "Incorrect API key provided: None"}})
    model = closing(OpenAIChat("m", base_url=server.url, timeout=2.0))
    with pytest.raises(ChainError) as info:
        await model.complete([Message.user("hi")], [])
    assert info.value.type == "authentication"
    assert info.value.message.endswith(
        "(OPENAI_API_KEY is set, but it is sent to api.openai.com only, never to 127.0.0.1: "
        "pass api_key=... or set AGENTFSM_API_KEY for this server)"
    )
    assert "sk-for-openai-only" not in info.value.message
    assert "authorization" not in {k.lower() for k in server.requests[0].headers}
