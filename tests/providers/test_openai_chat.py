"""OpenAIChat over real HTTP against a loopback server speaking Chat Completions.

Canned replies come from :mod:`tests.providers.openai_wire`, and every request
body we send is validated against the SDK's request TypedDicts (unknown keys
rejected), so a field name we get wrong fails here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import pytest

pytest.importorskip("openai")

from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

from agentfsm import (
    ChainError,
    ContentPart,
    Message,
    MessageDelta,
    ToolCall,
    ToolContext,
    ToolResult,
    tool,
)
from agentfsm.providers import ModelSettings, OpenAIChat, RetryPolicy
from tests.providers.conftest import checked_server, model_fixture
from tests.providers.fake_server import FakeServer, Reply, request_validator, sse
from tests.providers.openai_wire import FinishReason, chunk, completion, error_body, stream


@tool
def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Current weather for a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


# ---------------------------------------------------------------- fixtures


#: Fails when a body is not a Chat Completions request as the SDK types it.
validate_request = request_validator(
    CompletionCreateParamsStreaming, CompletionCreateParamsNonStreaming
)


server = checked_server("/v1/chat/completions", validate_request, prefix="/v1")
chat = model_fixture(OpenAIChat, "gpt-test", "sk-test")


HELLO = [Message.system("Be brief."), Message.user("Hi")]


# ---------------------------------------------------------------- files


async def test_file_parts_are_sent_as_file_content(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(json=completion("Read.")))
    message = Message.user(
        [
            ContentPart.text("Summarize."),
            ContentPart("file", "JVBERi0=", {"filename": "report.pdf"}),
            ContentPart("file", "aGk=", {"media_type": "text/plain"}),
            ContentPart("file", "", {"file_id": "file-abc"}),
        ]
    )
    await chat().complete([message], [])
    assert server.bodies[0]["messages"][0]["content"][1:] == [
        {
            "type": "file",
            "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
        },
        {
            "type": "file",
            "file": {"filename": "document.txt", "file_data": "data:text/plain;base64,aGk="},
        },
        {"type": "file", "file": {"file_id": "file-abc"}},
    ]


# ---------------------------------------------------------------- plain replies


async def test_a_text_reply(server: FakeServer, chat: Callable[..., OpenAIChat]) -> None:
    server.push(Reply(json=completion("Hello!")))
    reply = await chat().complete(HELLO, [])
    assert reply == Message.assistant(
        "Hello!",
        metadata={
            "model": "openai:gpt-test",
            "usage": {"input_tokens": 11, "output_tokens": 7},
            "finish_reason": "stop",
            "response_id": "chatcmpl-1",
            "response_model": "gpt-test-2025-01-01",
        },
    )
    request = server.requests[0]
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.json == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
    }


def test_name() -> None:
    model = OpenAIChat("gpt-4o-mini", api_key="k")
    assert model.name == "openai:gpt-4o-mini"
    assert "gpt-4o-mini" in repr(model)


@pytest.mark.parametrize(
    ("finish_reason", "status"),
    [
        ("stop", "complete"),
        ("tool_calls", "complete"),
        ("length", "length"),
        ("content_filter", "filtered"),
    ],
)
async def test_finish_reason_sets_the_status(
    server: FakeServer, chat: Callable[..., OpenAIChat], finish_reason: FinishReason, status: str
) -> None:
    server.push(Reply(json=completion("partial", finish_reason=finish_reason)))
    reply = await chat().complete(HELLO, [])
    assert reply.status == status
    assert reply.metadata["finish_reason"] == finish_reason


# ---------------------------------------------------------------- requests


CONVERSATION = [
    Message.system("You report the weather."),
    Message.user(
        [
            ContentPart.text("What is the weather where this photo was taken?"),
            ContentPart("image_url", "https://example.test/paris.jpg", {"detail": "low"}),
            ContentPart("image", "aGVsbG8=", {"media_type": "image/jpeg"}),
        ]
    ),
    Message.assistant(
        "Checking.",
        [ToolCall("call_1", "get_weather", {"city": "Paris"}), ToolCall("call_2", "get_weather")],
    ),
    Message.tool(
        [
            ToolResult("call_1", "get_weather", "sunny in Paris"),
            ToolResult("call_2", "get_weather", "missing city", is_error=True),
        ]
    ),
    Message.user("Thanks"),
]


async def test_the_request_carries_the_conversation_tools_and_settings(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(json=completion("Sunny.")))
    settings = ModelSettings(
        temperature=0.2,
        max_tokens=300,
        tool_choice="get_weather",
        parallel_tool_calls=False,
        extra={"seed": 7},
    )
    await chat(settings=settings).complete(CONVERSATION, [get_weather])
    assert server.requests[0].json == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You report the weather."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is the weather where this photo was taken?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.test/paris.jpg", "detail": "low"},
                    },
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,aGVsbG8="}},
                ],
            },
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"},
            {"role": "tool", "tool_call_id": "call_2", "content": "missing city"},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "description": "The city's name."},
                            "unit": {"enum": ["c", "f"], "type": "string", "default": "c"},
                        },
                        "required": ["city"],
                    },
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "temperature": 0.2,
        "max_tokens": 300,
        "seed": 7,
    }


def test_the_official_endpoint_gets_max_completion_tokens() -> None:
    model = OpenAIChat("gpt-4o", api_key="k", settings=ModelSettings(max_tokens=50))
    body = model.request_body(HELLO, [get_weather])
    assert body["max_completion_tokens"] == 50
    assert "max_tokens" not in body
    validate_request(body)


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("any", "required"),
        (
            {"type": "function", "function": {"name": "x"}},
            {"type": "function", "function": {"name": "x"}},
        ),
    ],
)
def test_tool_choice(choice: Any, wire: Any) -> None:
    model = OpenAIChat("gpt-4o", api_key="k", settings=ModelSettings(tool_choice=choice))
    assert model.request_body(HELLO, [get_weather])["tool_choice"] == wire
    assert "tool_choice" not in model.request_body(HELLO, [])  # only offered with tools


def test_an_assistant_message_without_text_or_calls_still_fits() -> None:
    body = OpenAIChat("m", api_key="k").request_body([Message.user("a"), Message.assistant()], [])
    assert body["messages"][1] == {"role": "assistant", "content": ""}
    validate_request(body)


def test_an_unsupported_content_part() -> None:
    message = Message.user([ContentPart("audio", "...")])
    with pytest.raises(ChainError) as caught:
        OpenAIChat("m", api_key="k").request_body([message], [])
    assert caught.value.type == "unsupported_content"
    assert not caught.value.retryable


# ---------------------------------------------------------------- tool calls


async def test_tool_calls_and_arguments_that_are_not_json(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(
        Reply(
            json=completion(
                None,
                [
                    ("call_1", "get_weather", '{"city": "Paris"}'),
                    ("call_2", "get_weather", '{"city": Paris}'),
                    ("call_3", "get_weather", "[1, 2]"),
                    ("call_4", "get_weather", ""),
                ],
                finish_reason="tool_calls",
            )
        )
    )
    reply = await chat().complete(HELLO, [get_weather])
    assert reply.status == "complete"
    assert reply.content is None
    first, second, third, fourth = reply.tool_calls
    assert first == ToolCall("call_1", "get_weather", {"city": "Paris"})
    assert second.arguments == {}
    assert second.invalid_arguments is not None
    assert second.invalid_arguments.startswith('{"city": Paris} (Expecting value')
    assert third.invalid_arguments == "[1, 2] (not a JSON object: got array)"
    assert fourth == ToolCall("call_4", "get_weather", {})


async def test_invalid_arguments_become_an_error_result_the_model_reads(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(json=completion(None, [("c1", "get_weather", "{oops")])))
    reply = await chat().complete(HELLO, [get_weather])
    call = reply.tool_calls[0]
    result = await get_weather.invoke(call, ToolContext({}, {}, "c1"))
    assert result.is_error
    assert "{oops" in result.text


# ---------------------------------------------------------------- streaming


async def test_streaming_assembles_text_and_tool_call_deltas(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(
        Reply(
            events=stream(
                chunk(role="assistant", content=""),
                chunk(content="Let me "),
                chunk(content="check."),
                chunk(tool_calls=[(0, "call_a", "get_weather", "")]),
                chunk(tool_calls=[(0, None, None, '{"ci')]),
                chunk(tool_calls=[(1, "call_b", "get_weather", '{"city": ')]),
                chunk(tool_calls=[(0, None, None, 'ty": "Paris"}')]),
                chunk(tool_calls=[(1, None, None, '"Oslo", "unit": "f"}')]),
                chunk(finish_reason="tool_calls"),
                chunk(usage=(40, 12)),
            )
        )
    )
    deltas: list[MessageDelta] = []
    reply = await chat(stream=True).complete(HELLO, [get_weather], on_delta=deltas.append)
    assert reply.text == "Let me check."
    assert reply.tool_calls == (
        ToolCall("call_a", "get_weather", {"city": "Paris"}),
        ToolCall("call_b", "get_weather", {"city": "Oslo", "unit": "f"}),
    )
    assert reply.status == "complete"
    assert reply.metadata["usage"] == {"input_tokens": 40, "output_tokens": 12}
    assert reply.metadata["model"] == "openai:gpt-test"
    assert reply.metadata["finish_reason"] == "tool_calls"
    assert deltas == [
        MessageDelta(content="Let me "),
        MessageDelta(content="check."),
        MessageDelta(tool_call_index=0, tool_call_id="call_a", tool_name="get_weather"),
        MessageDelta(tool_call_index=0, arguments='{"ci'),
        MessageDelta(
            tool_call_index=1, tool_call_id="call_b", tool_name="get_weather", arguments='{"city": '
        ),
        MessageDelta(tool_call_index=0, arguments='ty": "Paris"}'),
        MessageDelta(tool_call_index=1, arguments='"Oslo", "unit": "f"}'),
    ]
    body = server.requests[0].json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_streamed_arguments_that_are_not_json(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(
        Reply(
            events=stream(
                chunk(tool_calls=[(0, "call_a", "get_weather", '{"city": "Par')]),
                chunk(finish_reason="tool_calls"),
            )
        )
    )
    reply = await chat(stream=True).complete(HELLO, [get_weather])
    (call,) = reply.tool_calls
    assert call.arguments == {}
    assert call.invalid_arguments is not None
    assert call.invalid_arguments.startswith('{"city": "Par (Unterminated string')


@pytest.mark.parametrize(
    ("finish_reason", "status"), [("length", "length"), ("content_filter", "filtered")]
)
async def test_streamed_finish_reason_sets_the_status(
    server: FakeServer, chat: Callable[..., OpenAIChat], finish_reason: FinishReason, status: str
) -> None:
    server.push(Reply(events=stream(chunk(content="cut"), chunk(finish_reason=finish_reason))))
    reply = await chat(stream=True).complete(HELLO, [])
    assert reply.status == status


async def test_a_stream_cut_mid_way(server: FakeServer, chat: Callable[..., OpenAIChat]) -> None:
    server.push(
        Reply(events=[*sse(chunk(content="Hel")), 'data: {"id": "chatcmpl-2", "cho'], cut=True)
    )
    deltas: list[MessageDelta] = []
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [], on_delta=deltas.append)
    assert caught.value.type == "invalid_response"
    assert deltas == [MessageDelta(content="Hel")]
    assert len(server.requests) == 1


async def test_a_stream_that_ends_before_done(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(events=stream(chunk(content="Hel"), done=False)))
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "invalid_response"
    assert "[DONE]" in caught.value.message


async def test_an_error_inside_the_stream(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(
        Reply(
            events=sse(
                chunk(content="Hel"),
                error_body(
                    "The server had an error while processing your request.", "server_error"
                ),
            )
        )
    )
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "server_error"
    assert caught.value.retryable
    assert "The server had an error" in caught.value.message


async def test_a_malformed_stream_event(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(events=["data: {not json}\n\n", "data: [DONE]\n\n"]))
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "invalid_response"
    assert "{not json}" in caught.value.message


async def test_streams_reuse_the_connection(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.default = Reply(events=stream(chunk(content="ok"), chunk(finish_reason="stop")))
    model = chat(stream=True)
    for _ in range(3):
        assert (await model.complete(HELLO, [])).text == "ok"
    assert len({r.client_port for r in server.requests}) == 1


async def test_a_raising_delta_handler_closes_the_stream(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(
        Reply(events=sse(chunk(content="a"), chunk(content="b")), stall=5),
        Reply(json=completion("next")),
    )

    def explode(delta: MessageDelta) -> None:
        raise ChainError("callback_error", "on_llm_new_delta raised")

    model = chat(stream=True)
    with pytest.raises(ChainError) as caught:
        await model.complete(HELLO, [], on_delta=explode)
    assert caught.value.type == "callback_error"
    model.stream = False
    assert (await model.complete(HELLO, [])).text == "next"


async def test_cancelling_a_streaming_call(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(events=sse(chunk(content="a")), stall=5), Reply(json=completion("again")))
    model = chat(stream=True)
    started = asyncio.Event()
    task = asyncio.create_task(model.complete(HELLO, [], on_delta=lambda _: started.set()))
    await asyncio.wait_for(started.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pool = model._http.client._transport._pool  # type: ignore[attr-defined]
    assert all(c.is_idle() or c.is_closed() for c in pool.connections)
    model.stream = False
    assert (await model.complete(HELLO, [])).text == "again"


# ---------------------------------------------------------------- failures


async def test_401_with_the_providers_error_body(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    message = (
        "Incorrect API key provided: sk-test. "
        "You can find your API key at https://platform.openai.com/account/api-keys."
    )
    server.default = Reply(401, error_body(message, "invalid_request_error", "invalid_api_key"))
    with pytest.raises(ChainError) as caught:
        await chat().complete(HELLO, [])
    assert caught.value.type == "authentication"
    assert not caught.value.retryable
    # the provider's words, with the key it echoed taken out
    assert message.replace("sk-test", "[redacted]") in caught.value.message
    assert "sk-test" not in caught.value.message
    assert caught.value.details["code"] == "invalid_api_key"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "first",
    [
        Reply(
            429,
            error_body("Rate limit reached", "requests", "rate_limit_exceeded"),
            headers={"retry-after": "0.05"},
        ),
        Reply(500, error_body("The server had an error", "server_error")),
        Reply(200, json=completion("late"), delay=5),
    ],
    ids=["429-retry-after", "500", "read-timeout"],
)
async def test_a_failure_then_success(
    server: FakeServer, chat: Callable[..., OpenAIChat], first: Reply
) -> None:
    server.push(first, Reply(json=completion("Hello!")))
    reply = await chat(timeout=0.2).complete(HELLO, [])
    assert reply.text == "Hello!"
    assert len(server.requests) == 2


async def test_a_read_timeout(server: FakeServer, chat: Callable[..., OpenAIChat]) -> None:
    server.default = Reply(json=completion("late"), delay=5)
    with pytest.raises(ChainError) as caught:
        await chat(timeout=0.1, retry=RetryPolicy(attempts=1)).complete(HELLO, [])
    assert caught.value.type == "timeout"
    assert caught.value.retryable


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, body=b"<html>not json</html>"),
        Reply(200, json={"object": "chat.completion", "choices": []}),
        Reply(200, json={"choices": [{"index": 0}]}),
        Reply(200, json=[1, 2]),
    ],
    ids=["not-json", "no-choices", "no-message", "not-an-object"],
)
async def test_a_malformed_body(
    server: FakeServer, chat: Callable[..., OpenAIChat], reply: Reply
) -> None:
    server.default = reply
    with pytest.raises(ChainError) as caught:
        await chat().complete(HELLO, [])
    assert caught.value.type == "invalid_response"


# ---------------------------------------------------------------- keys and lifecycle


async def test_no_key_for_the_official_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIChat("gpt-4o")
    with pytest.raises(ChainError) as caught:
        await model.complete(HELLO, [])
    assert caught.value.type == "authentication"
    assert "OPENAI_API_KEY" in caught.value.message


async def test_the_key_from_the_environment(
    server: FakeServer, chat: Callable[..., OpenAIChat], monkeypatch: pytest.MonkeyPatch
) -> None:
    # OPENAI_API_KEY goes to the official host only; another base_url takes
    # AGENTFSM_API_KEY (or api_key=...)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.delenv("AGENTFSM_API_KEY", raising=False)
    assert OpenAIChat("gpt-x")._http.headers["authorization"] == "Bearer sk-from-env"
    server.default = Reply(json=completion("hi"))
    await chat(api_key=None).complete(HELLO, [])
    assert "authorization" not in server.requests[0].headers
    monkeypatch.setenv("AGENTFSM_API_KEY", "sk-for-the-gateway")
    await chat(api_key=None).complete(HELLO, [])
    assert server.requests[1].headers["authorization"] == "Bearer sk-for-the-gateway"


async def test_a_local_server_needs_no_key(
    server: FakeServer, chat: Callable[..., OpenAIChat], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.push(Reply(json=completion("hi")))
    assert (await chat(api_key=None).complete(HELLO, [])).text == "hi"
    assert "authorization" not in server.requests[0].headers


async def test_async_context_manager_closes_the_client(server: FakeServer) -> None:
    server.default = Reply(json=completion("hi"))
    async with OpenAIChat("gpt-test", api_key="k", base_url=server.url) as model:
        await model.complete(HELLO, [])
        client = model._http.client
    assert client.is_closed
