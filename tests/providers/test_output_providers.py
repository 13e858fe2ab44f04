"""Typed output over real HTTP: each provider asks for it in its own way.

OpenAI's Chat Completions and Responses APIs take the output type's schema as
native structured output (``response_format``, ``text.format``) and answer with
the JSON text; Anthropic is offered the ``final_result`` tool. Every request body
is validated against the SDK's own request types, unknown keys rejected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

from agentfsm import Agent, AgentState
from agentfsm.providers import AnthropicChat, OpenAIChat, OpenAIResponses
from tests.providers import anthropic_wire
from tests.providers.fake_server import FakeServer, Reply, request_validator
from tests.providers.openai_wire import completion
from tests.providers.responses_wire import NON_STREAMING, STREAMING, response, text_item
from tests.support import add


@attrs.frozen
class Forecast:
    city: str
    celsius: int


FORECAST_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
    "required": ["city", "celsius"],
    "additionalProperties": False,
}


@pytest.fixture
def serve(
    make_server: Callable[[str], FakeServer], closing: Callable[[Any], Any]
) -> Callable[..., tuple[FakeServer, Any]]:
    """``serve(Model, prefix)``: a loopback server and a model calling it."""

    def make(cls: Any, prefix: str, name: str = "gpt-test") -> tuple[FakeServer, Any]:
        server = make_server(prefix)
        return server, closing(cls(name, api_key="sk-test", base_url=server.url, timeout=2.0))

    return make


async def test_openai_chat_asks_for_the_schema_as_response_format(
    serve: Callable[..., tuple[FakeServer, Any]],
) -> None:
    server, model = serve(OpenAIChat, "/v1")
    server.push(
        Reply(
            200, completion(None, [("c1", "add", '{"a": 20, "b": 1}')], finish_reason="tool_calls")
        ),
        Reply(200, completion("not json")),
        Reply(200, completion('{"city": "Oslo", "celsius": 21}')),
    )
    state = await Agent(model, [add], output_type=Forecast).execute(AgentState.of("Oslo?"))
    assert state.status == "ok", state.error
    assert state.output == Forecast(city="Oslo", celsius=21)
    server.check_requests(
        "/v1/chat/completions",
        request_validator(CompletionCreateParamsStreaming, CompletionCreateParamsNonStreaming),
    )
    first, _, third = server.bodies
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "final_result", "schema": FORECAST_SCHEMA, "strict": True},
    }
    assert [t["function"]["name"] for t in first["tools"]] == ["add"]
    # the answer that was not JSON went back with what was wrong
    assert third["messages"][-1]["role"] == "user"
    assert "not JSON" in third["messages"][-1]["content"]


async def test_openai_responses_asks_for_the_schema_as_text_format(
    serve: Callable[..., tuple[FakeServer, Any]],
) -> None:
    server, model = serve(OpenAIResponses, "/v1")
    server.push(Reply(200, response(text_item('{"result": [3, 1, 2]}'))))
    state = await Agent(model, output_type=list[int]).execute(AgentState.of("three numbers"))
    assert state.status == "ok", state.error
    assert state.output == [3, 1, 2]
    server.check_requests("/v1/responses", request_validator(STREAMING, NON_STREAMING))
    [body] = server.bodies
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "final_result",
            "schema": {
                "type": "object",
                "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
                "required": ["result"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    }
    assert "tools" not in body


async def test_anthropic_is_offered_the_final_result_tool(
    serve: Callable[..., tuple[FakeServer, Any]],
) -> None:
    server, model = serve(AnthropicChat, "", "claude-test-1")
    server.push(
        Reply(200, anthropic_wire.message(None, [("t1", "final_result", {"city": "Rome"})])),
        Reply(
            200,
            anthropic_wire.message(None, [("t2", "final_result", {"city": "Rome", "celsius": 30})]),
        ),
    )
    agent = Agent(model, output_type=Forecast, name="forecaster")
    state = await agent.execute(AgentState.of("Rome?"))
    assert state.status == "ok", state.error
    assert state.output == Forecast(city="Rome", celsius=30)
    server.check_requests(
        "/v1/messages",
        request_validator(
            MessageCreateParamsStreaming,
            MessageCreateParamsNonStreaming,
            unchecked=frozenset({"temperature", "top_p", "top_k"}),
        ),
    )
    first, second = server.bodies
    assert first["tools"] == [
        {
            "name": "final_result",
            "description": first["tools"][0]["description"],
            "input_schema": FORECAST_SCHEMA,
        }
    ]
    told = second["messages"][-1]["content"][0]
    assert told["type"] == "tool_result" and told["tool_use_id"] == "t1"
    assert told.get("is_error") is True
    assert "celsius" in json.dumps(told["content"])
