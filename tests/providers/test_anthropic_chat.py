"""AnthropicChat over real HTTP against a loopback server speaking the Messages API.

Canned replies and stream events come from :mod:`tests.providers.anthropic_wire`,
and every request body we send is validated against the SDK's request
TypedDicts (unknown keys rejected).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("anthropic")

from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)

from agentfsm import ChainError, ContentPart, Message, MessageDelta, ToolCall, ToolResult, tool
from agentfsm.providers import AnthropicChat, ModelSettings, RetryPolicy
from tests.providers.anthropic_wire import (
    PING,
    StopReason,
    block_stop,
    error_body,
    json_delta,
    message,
    message_delta,
    start,
    stop,
    text_delta,
    text_events,
    text_start,
    tool_start,
)
from tests.providers.conftest import checked_server, model_fixture
from tests.providers.fake_server import FakeServer, Reply, named_sse, request_validator


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@tool
def get_time(zone: str) -> str:
    """Current time in a zone."""
    return "noon"


# ---------------------------------------------------------------- fixtures


#: The SDK's request types follow API version 2026-10-21, which dropped the
#: sampling parameters; the 2023-06-01 version we send still takes them for the
#: models that support them, so they are the one exception to the check.
_SAMPLING = frozenset({"temperature", "top_p", "top_k"})

#: Fails when a body is not a Messages API request as the SDK types it.
validate_request = request_validator(
    MessageCreateParamsStreaming, MessageCreateParamsNonStreaming, unchecked=_SAMPLING
)


server = checked_server("/v1/messages", validate_request)
chat = model_fixture(AnthropicChat, "claude-test", "sk-ant-test")


HELLO = [Message.system("Be brief."), Message.user("Hi")]


# ---------------------------------------------------------------- plain replies


async def test_a_text_reply(server: FakeServer, chat: Callable[..., AnthropicChat]) -> None:
    server.push(Reply(json=message("Hello!", cache_read=4)))
    reply = await chat().complete(HELLO, [])
    assert reply == Message.assistant(
        "Hello!",
        metadata={
            "model": "anthropic:claude-test",
            # cached input counted in input_tokens too
            "usage": {"input_tokens": 25, "output_tokens": 9, "cache_read_tokens": 4},
            "stop_reason": "end_turn",
            "response_id": "msg_01",
            "response_model": "claude-test-1",
        },
    )
    request = server.requests[0]
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-test",
        "max_tokens": 16000,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
    }


def test_name_and_max_tokens() -> None:
    assert AnthropicChat("claude-x", api_key="k").name == "anthropic:claude-x"
    # room for an agent's long tool inputs; older models get their own maximum
    assert AnthropicChat("m", api_key="k").max_tokens == 16000
    assert AnthropicChat("claude-3-haiku-20240307", api_key="k").max_tokens == 4096
    assert AnthropicChat("claude-3-5-sonnet-latest", api_key="k").max_tokens == 8192
    assert AnthropicChat("claude-opus-4-1", api_key="k").max_tokens == 8192
    assert AnthropicChat("claude-opus-4-5", api_key="k").max_tokens == 16000
    thinking = ModelSettings(thinking=20000)
    assert AnthropicChat("m", api_key="k", settings=thinking).max_tokens == 24096
    with pytest.raises(ValueError, match="larger than the thinking budget"):
        AnthropicChat("m", api_key="k", max_tokens=2000, settings=ModelSettings(thinking=4000))
    assert AnthropicChat("m", api_key="k", settings=ModelSettings(max_tokens=50)).max_tokens == 50
    explicit = AnthropicChat("m", api_key="k", max_tokens=9, settings=ModelSettings(max_tokens=50))
    assert explicit.max_tokens == 9


@pytest.mark.parametrize(
    ("stop_reason", "status"),
    [
        ("end_turn", "complete"),
        ("tool_use", "complete"),
        ("stop_sequence", "complete"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "filtered"),
    ],
)
async def test_stop_reason_sets_the_status(
    server: FakeServer, chat: Callable[..., AnthropicChat], stop_reason: StopReason, status: str
) -> None:
    server.push(Reply(json=message("partial", stop_reason=stop_reason)))
    reply = await chat().complete(HELLO, [])
    assert reply.status == status
    assert reply.metadata["stop_reason"] == stop_reason


# ---------------------------------------------------------------- requests


CONVERSATION = [
    Message.system("You report the weather."),
    Message.system("Answer in English."),
    Message.user(
        [
            ContentPart.text("Where is this?"),
            ContentPart("image_url", "https://example.test/paris.jpg"),
            ContentPart("image", "aGVsbG8=", {"media_type": "image/jpeg"}),
        ]
    ),
    Message.assistant(
        "Checking.",
        [
            ToolCall("toolu_1", "get_weather", {"city": "Paris"}),
            ToolCall("toolu_2", "get_time", {"zone": "CET"}),
        ],
    ),
    Message.tool(
        [
            ToolResult("toolu_1", "get_weather", "sunny in Paris"),
            ToolResult("toolu_2", "get_time", "ERROR: unknown zone", is_error=True),
        ]
    ),
    Message.user("And tomorrow?"),
    Message.assistant(None, [ToolCall("toolu_3", "get_weather", {"city": "Paris"})]),
    Message.tool([ToolResult("toolu_3", "get_weather", (ContentPart.text("rain"),))]),
]


async def test_the_request_carries_the_conversation_tools_and_settings(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(Reply(json=message("Rain.")))
    settings = ModelSettings(
        temperature=0.5, tool_choice="any", parallel_tool_calls=False, extra={"top_k": 5}
    )
    await chat(settings=settings, max_tokens=200).complete(CONVERSATION, [get_weather, get_time])
    assert server.requests[0].json == {
        "model": "claude-test",
        "max_tokens": 200,
        "system": "You report the weather.\n\nAnswer in English.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Where is this?"},
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.test/paris.jpg"},
                    },
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/jpeg",
                            "data": "aGVsbG8=",
                        },
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "get_time",
                        "input": {"zone": "CET"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [  # both results in one user turn, the next user text after them
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny in Paris"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "ERROR: unknown zone",
                        "is_error": True,
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_3",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_3",
                        "content": [{"type": "text", "text": "rain"}],
                    }
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
            {
                "name": "get_time",
                "description": "Current time in a zone.",
                "input_schema": {
                    "type": "object",
                    "properties": {"zone": {"type": "string"}},
                    "required": ["zone"],
                },
            },
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "temperature": 0.5,
        "top_k": 5,
    }


@pytest.mark.parametrize(
    ("choice", "parallel", "wire_choice"),
    [
        (None, None, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("auto", None, {"type": "auto"}),
        ("none", False, {"type": "none"}),
        ("required", None, {"type": "any"}),
        ("get_weather", None, {"type": "tool", "name": "get_weather"}),
    ],
)
def test_tool_choice(choice: Any, parallel: bool | None, wire_choice: Any) -> None:
    settings = ModelSettings(tool_choice=choice, parallel_tool_calls=parallel)
    body = AnthropicChat("m", api_key="k", settings=settings).request_body(HELLO, [get_weather])
    assert body.get("tool_choice") == wire_choice
    validate_request(body)


def test_an_unsupported_content_part() -> None:
    with pytest.raises(ChainError) as caught:
        AnthropicChat("m", api_key="k").request_body([Message.user([ContentPart("audio", "")])], [])
    assert caught.value.type == "unsupported_content"


# ---------------------------------------------------------------- tool calls


async def test_tool_use_blocks(server: FakeServer, chat: Callable[..., AnthropicChat]) -> None:
    server.push(
        Reply(
            json=message(
                "Let me check.",
                [("toolu_1", "get_weather", {"city": "Paris"}), ("toolu_2", "get_time", {})],
                stop_reason="tool_use",
            )
        )
    )
    reply = await chat().complete(HELLO, [get_weather, get_time])
    assert reply.text == "Let me check."
    assert reply.status == "complete"
    assert reply.tool_calls == (
        ToolCall("toolu_1", "get_weather", {"city": "Paris"}),
        ToolCall("toolu_2", "get_time", {}),
    )


async def test_tool_input_that_is_not_an_object(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    body = message(None, [("toolu_1", "get_weather", {})], stop_reason="tool_use")
    body["content"][0]["input"] = '{"city": Par'  # what a compatible gateway may send
    server.push(Reply(json=body))
    (call,) = (await chat().complete(HELLO, [get_weather])).tool_calls
    assert call.arguments == {}
    assert call.invalid_arguments is not None
    assert call.invalid_arguments.startswith('{"city": Par (Expecting value')


# ---------------------------------------------------------------- streaming


async def test_streaming_assembles_text_and_tool_input(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(
        Reply(
            events=named_sse(
                start(input_tokens=30),
                text_start(0),
                PING,
                text_delta(0, "Let me "),
                text_delta(0, "check."),
                block_stop(0),
                tool_start(1, "toolu_a", "get_weather"),
                json_delta(1, ""),
                json_delta(1, '{"city"'),
                json_delta(1, ': "Paris"}'),
                block_stop(1),
                tool_start(2, "toolu_b", "get_time"),
                block_stop(2),
                message_delta("tool_use", output_tokens=15),
                stop(),
            )
        )
    )
    deltas: list[MessageDelta] = []
    model = chat(stream=True)
    reply = await model.complete(HELLO, [get_weather, get_time], on_delta=deltas.append)
    assert reply.text == "Let me check."
    assert reply.tool_calls == (
        ToolCall("toolu_a", "get_weather", {"city": "Paris"}),
        ToolCall("toolu_b", "get_time", {}),
    )
    assert reply.status == "complete"
    assert reply.metadata["usage"] == {"input_tokens": 30, "output_tokens": 15}
    assert reply.metadata["model"] == "anthropic:claude-test"
    assert reply.metadata["response_id"] == "msg_02"
    assert deltas == [
        MessageDelta(content="Let me "),
        MessageDelta(content="check."),
        MessageDelta(tool_call_index=0, tool_call_id="toolu_a", tool_name="get_weather"),
        MessageDelta(tool_call_index=0, tool_call_id="toolu_a", arguments='{"city"'),
        MessageDelta(tool_call_index=0, tool_call_id="toolu_a", arguments=': "Paris"}'),
        MessageDelta(tool_call_index=1, tool_call_id="toolu_b", tool_name="get_time"),
    ]
    assert server.requests[0].json["stream"] is True


async def test_streamed_tool_input_that_is_not_json(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(
        Reply(
            events=named_sse(
                start(),
                tool_start(0, "toolu_a", "get_weather"),
                json_delta(0, '{"city": '),
                block_stop(0),
                message_delta("tool_use"),
                stop(),
            )
        )
    )
    (call,) = (await chat(stream=True).complete(HELLO, [get_weather])).tool_calls
    assert call.arguments == {}
    assert call.invalid_arguments is not None
    assert call.invalid_arguments.startswith('{"city":  (Expecting value')


@pytest.mark.parametrize(
    ("stop_reason", "status"), [("max_tokens", "length"), ("refusal", "filtered")]
)
async def test_streamed_stop_reason_sets_the_status(
    server: FakeServer, chat: Callable[..., AnthropicChat], stop_reason: StopReason, status: str
) -> None:
    server.push(Reply(events=text_events("cut", message_delta(stop_reason), stop())))
    assert (await chat(stream=True).complete(HELLO, [])).status == status


async def test_an_error_event_mid_stream(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(Reply(events=text_events("Hel", error_body("overloaded_error", "Overloaded"))))
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "overloaded"
    assert caught.value.retryable
    assert "Overloaded" in caught.value.message


async def test_a_stream_cut_mid_way(server: FakeServer, chat: Callable[..., AnthropicChat]) -> None:
    events = text_events("Hel")
    server.push(
        Reply(events=[*events, 'event: content_block_delta\ndata: {"type": "con'], cut=True)
    )
    deltas: list[MessageDelta] = []
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [], on_delta=deltas.append)
    assert caught.value.type == "invalid_response"
    assert deltas == [MessageDelta(content="Hel")]


async def test_a_stream_that_ends_before_message_stop(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(Reply(events=text_events("Hel")))
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "invalid_response"
    assert "message_stop" in caught.value.message


async def test_streams_reuse_the_connection(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.default = Reply(events=text_events("ok", message_delta("end_turn"), stop()))
    model = chat(stream=True)
    for _ in range(3):
        assert (await model.complete(HELLO, [])).text == "ok"
    assert len({r.client_port for r in server.requests}) == 1


# ---------------------------------------------------------------- failures


async def test_401_with_the_providers_error_body(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.default = Reply(401, error_body("authentication_error", "invalid x-api-key"))
    with pytest.raises(ChainError) as caught:
        await chat().complete(HELLO, [])
    assert caught.value.type == "authentication"
    assert not caught.value.retryable
    assert "invalid x-api-key" in caught.value.message
    assert caught.value.details["provider_type"] == "authentication_error"
    assert len(server.requests) == 1


async def test_529_overloaded_then_success(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(Reply(529, error_body("overloaded_error", "Overloaded")), Reply(json=message("Hi")))
    assert (await chat().complete(HELLO, [])).text == "Hi"
    assert len(server.requests) == 2


async def test_overloaded_until_retries_run_out(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.default = Reply(529, error_body("overloaded_error", "Overloaded"))
    with pytest.raises(ChainError) as caught:
        await chat(retry=RetryPolicy(attempts=2, backoff=0.01)).complete(HELLO, [])
    assert caught.value.type == "overloaded"
    assert caught.value.retryable
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "first",
    [
        Reply(
            429,
            error_body("rate_limit_error", "Number of requests has exceeded your rate limit"),
            headers={"retry-after": "0.05"},
        ),
        Reply(500, error_body("api_error", "Internal server error")),
        Reply(200, json=message("late"), delay=5),
    ],
    ids=["429-retry-after", "500", "read-timeout"],
)
async def test_a_failure_then_success(
    server: FakeServer, chat: Callable[..., AnthropicChat], first: Reply
) -> None:
    server.push(first, Reply(json=message("Hello!")))
    assert (await chat(timeout=0.2).complete(HELLO, [])).text == "Hello!"
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, body=b'{"type": "message", "content": [{"type": "te'),
        Reply(200, json={"type": "message", "role": "assistant"}),
        Reply(200, json={"type": "message", "content": [{"type": "tool_use", "id": "t"}]}),
    ],
    ids=["truncated-json", "no-content", "nameless-tool"],
)
async def test_a_malformed_body(
    server: FakeServer, chat: Callable[..., AnthropicChat], reply: Reply
) -> None:
    server.default = reply
    with pytest.raises(ChainError) as caught:
        await chat().complete(HELLO, [])
    assert caught.value.type == "invalid_response"


async def test_no_key_for_the_official_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ChainError) as caught:
        await AnthropicChat("claude-x").complete(HELLO, [])
    assert caught.value.type == "authentication"
    assert "ANTHROPIC_API_KEY" in caught.value.message


async def test_the_key_from_the_environment(
    server: FakeServer, chat: Callable[..., AnthropicChat], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.delenv("AGENTFSM_API_KEY", raising=False)
    assert AnthropicChat("claude-x")._http.headers["x-api-key"] == "sk-ant-env"
    server.default = Reply(json=message("hi"))
    await chat(api_key=None).complete(HELLO, [])
    assert "x-api-key" not in server.requests[0].headers
    monkeypatch.setenv("AGENTFSM_API_KEY", "sk-ant-gateway")
    await chat(api_key=None).complete(HELLO, [])
    assert server.requests[1].headers["x-api-key"] == "sk-ant-gateway"
