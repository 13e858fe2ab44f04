"""OpenAIResponses over real HTTP against a loopback server speaking the Responses API.

Canned replies and events come from :mod:`tests.providers.responses_wire` (the
SDK's own models), and every request body is validated against the SDK's
``ResponseCreateParams`` TypedDicts with unknown keys rejected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

from openai.types import responses as wire

from agentfsm import (
    Agent,
    AgentState,
    ChainError,
    ContentPart,
    Message,
    MessageDelta,
    Thinking,
    ToolCall,
    ToolResult,
)
from agentfsm.providers import ModelSettings, OpenAIResponses, create_model
from agentfsm.testing import assert_path
from tests.providers.conftest import checked_server, model_fixture
from tests.providers.fake_server import FakeServer, Reply, request_validator
from tests.providers.responses_wire import (
    NON_STREAMING,
    STREAMING,
    call_item,
    completed,
    created,
    error_event,
    events,
    reasoning_item,
    refusal_item,
    response,
    streamed,
    text_delta,
    text_item,
    usage,
)
from tests.providers.test_anthropic_thinking import TOOL_LOOP
from tests.providers.test_openai_chat import HELLO, get_weather

validate_request = request_validator(STREAMING, NON_STREAMING)
server = checked_server("/v1/responses", validate_request, prefix="/v1")
chat = model_fixture(OpenAIResponses, "gpt-test", "sk-test")
reasoner = model_fixture(OpenAIResponses, "gpt-5", "sk-test")


def _collect(into: list[MessageDelta]) -> Callable[[Any, MessageDelta], None]:
    return lambda _chain, delta: into.append(delta)


# ---------------------------------------------------------------- plain replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_text_reply(
    server: FakeServer, chat: Callable[..., OpenAIResponses], stream: bool
) -> None:
    item = text_item("Hello there!")
    server.push(Reply(events=streamed(item)) if stream else Reply(json=response(item)))
    deltas: list[MessageDelta] = []
    reply = await chat(stream=stream).complete(HELLO, [], on_delta=deltas.append)
    assert reply == Message.assistant(
        "Hello there!",
        metadata={
            "model": "openai:gpt-test",
            "usage": {"input_tokens": 12, "output_tokens": 8},
            "finish_reason": "completed",
            "response_id": "resp_1",
            "response_model": "gpt-test-2025-01-01",
        },
    )
    request = server.requests[0]
    assert request.headers["authorization"] == "Bearer sk-test"
    expected: dict[str, Any] = {
        "model": "gpt-test",
        "input": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "store": False,
    }
    if stream:
        expected["stream"] = True
        assert "".join(d.content for d in deltas) == "Hello there!"
    assert request.json == expected


async def test_settings_go_to_their_fields(
    server: FakeServer, chat: Callable[..., OpenAIResponses], reasoner: Callable[..., Any]
) -> None:
    server.default = Reply(json=response(text_item("ok")))
    settings = ModelSettings(
        temperature=0.2,
        max_tokens=300,
        tool_choice="get_weather",
        parallel_tool_calls=False,
        effort="low",
    )
    await chat(settings=settings).complete(HELLO, [get_weather])
    await reasoner(settings=settings, reasoning_summary="auto").complete(HELLO, [get_weather])
    plain, reasoning = server.bodies
    assert plain["temperature"] == 0.2 and "reasoning" not in plain
    assert plain["max_output_tokens"] == 300
    assert plain["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert plain["parallel_tool_calls"] is False
    assert plain["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": get_weather.parameters,
            "strict": False,
        }
    ]
    assert "temperature" not in reasoning
    assert reasoning["reasoning"] == {"effort": "low", "summary": "auto"}
    assert reasoning["include"] == ["reasoning.encrypted_content"]
    assert reasoning["store"] is False


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_usage_with_cache_and_reasoning_tokens(
    server: FakeServer, chat: Callable[..., OpenAIResponses], stream: bool
) -> None:
    counts = usage(100, 30, cached=40, written=20, reasoning=12)
    item = text_item("ok")
    server.push(
        Reply(events=streamed(item, counts=counts))
        if stream
        else Reply(json=response(item, counts=counts))
    )
    reply = await chat(stream=stream).complete(HELLO, [])
    assert reply.metadata["usage"] == {
        "input_tokens": 100,
        "output_tokens": 30,
        "cache_read_tokens": 40,
        "cache_write_tokens": 20,
        "reasoning_tokens": 12,
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_refusal_ends_the_reply_as_filtered(
    server: FakeServer, chat: Callable[..., OpenAIResponses], stream: bool
) -> None:
    item = refusal_item("I can't help with that.")
    server.push(Reply(events=streamed(item)) if stream else Reply(json=response(item)))
    reply = await chat(stream=stream).complete(HELLO, [])
    assert reply.status == "filtered"
    assert reply.text == "I can't help with that."
    assert reply.metadata["refusal"] == "I can't help with that."


async def test_an_incomplete_response_is_cut_at_the_length(
    server: FakeServer, chat: Callable[..., OpenAIResponses]
) -> None:
    whole = response(text_item("Half"), status="incomplete", incomplete="max_output_tokens")
    server.push(
        Reply(json=whole),
        Reply(events=events(created(), completed(whole, kind="response.incomplete"))),
    )
    for stream in (False, True):
        reply = await chat(stream=stream).complete(HELLO, [])
        assert reply.status == "length"
        assert reply.metadata["finish_reason"] == "max_output_tokens"


# ---------------------------------------------------------------- tools and reasoning


def _think_then_call() -> tuple[Any, ...]:
    return (
        reasoning_item("rs_1", "The user wants the weather.", "ENCRYPTED-1"),
        call_item("call_1", "get_weather", '{"city": "Paris"}'),
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_reasoning_items_go_back_through_a_tool_loop_and_a_checkpoint(
    server: FakeServer, reasoner: Callable[..., Any], stream: bool, tmp_path: Path
) -> None:
    from agentfsm import start_run
    from agentfsm.store import SQLiteStore, load_run

    first = _think_then_call()
    second = (reasoning_item("rs_2", "", "ENCRYPTED-2"), text_item("Sunny.", "msg_2"))
    if stream:
        server.push(Reply(events=streamed(*first)), Reply(events=streamed(*second)))
    else:
        server.push(Reply(json=response(*first)), Reply(json=response(*second)))
    deltas: list[MessageDelta] = []
    store = SQLiteStore(tmp_path / "runs.db")
    model = reasoner(stream=stream, settings=ModelSettings(effort="medium"))
    agent = Agent(model, [get_weather], callbacks=[{"on_llm_new_delta": _collect(deltas)}])
    run = start_run(agent, AgentState.of("Weather in Paris?"), store, run_id="r")
    await run.run()
    assert_path(run, TOOL_LOOP)
    call_reply = run.agent_state.messages[1]
    assert call_reply.tool_calls == (ToolCall("call_1", "get_weather", {"city": "Paris"}),)
    assert call_reply.thinking == (Thinking("The user wants the weather."),)
    assert run.agent_state.messages[-1].text == "Sunny."
    sent = server.bodies[1]["input"]
    assert sent[1:] == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "The user wants the weather."}],
            "encrypted_content": "ENCRYPTED-1",
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
            "id": "fc_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny in Paris"},
    ]
    saved = load_run(store, "r", tools=[get_weather])
    assert saved.agent_state == run.agent_state
    again = model.request_body(saved.agent_state.messages, [get_weather])
    assert again["input"] == [*sent[:1], *sent[1:], *again["input"][4:]]
    assert again["input"][4]["type"] == "reasoning"  # the final reply's reasoning, kept too
    if stream:
        assert [d.thinking for d in deltas if d.kind == "thinking"] == [
            "The user wants the weather."
        ]
        calls = [d for d in deltas if d.kind == "tool_call"]
        assert calls[0].tool_name == "get_weather" and calls[0].tool_call_id == "call_1"
        assert "".join(d.arguments for d in calls) == '{"city": "Paris"}'


async def test_built_in_tool_items_are_kept_in_their_place(
    server: FakeServer, chat: Callable[..., OpenAIResponses]
) -> None:
    search = wire.ResponseFunctionWebSearch.model_validate(
        {
            "id": "ws_1",
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": "weather Paris"},
        }
    )
    server.push(Reply(json=response(search, text_item("Sunny, says the web."))))
    model = chat(server_tools=[{"type": "web_search"}])
    reply = await model.complete(HELLO, [])
    assert server.bodies[0]["tools"] == [{"type": "web_search"}]
    body = model.request_body([*HELLO, reply, Message.user("Thanks")], [])
    assert body["input"][2:] == [
        {
            "id": "ws_1",
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": "weather Paris"},
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Sunny, says the web.", "annotations": []}],
        },
        {"role": "user", "content": "Thanks"},
    ]
    validate_request(body)


async def test_parts_files_and_tool_results(
    server: FakeServer, chat: Callable[..., OpenAIResponses]
) -> None:
    server.push(Reply(json=response(text_item("ok"))))
    conversation = [
        Message.user(
            [
                ContentPart.text("Look:"),
                ContentPart("image_url", "https://img.example/a.png", {"detail": "low"}),
                ContentPart("image", "aGVsbG8=", {"media_type": "image/jpeg"}),
                ContentPart("file", "JVBERi0=", {"filename": "r.pdf"}),
                ContentPart("file_url", "https://files.example/b.pdf"),
            ]
        ),
        Message.assistant("Checking.", [ToolCall("call_1", "fetch", {"n": 1})]),
        Message.tool(
            [
                ToolResult(
                    "call_1",
                    "fetch",
                    (ContentPart.text("page"), ContentPart("image", "aGk=")),
                ),
            ]
        ),
    ]
    await chat().complete(conversation, [])
    user, said, call, result = server.bodies[0]["input"]
    assert user["content"] == [
        {"type": "input_text", "text": "Look:"},
        {"type": "input_image", "image_url": "https://img.example/a.png", "detail": "low"},
        {"type": "input_image", "image_url": "data:image/jpeg;base64,aGVsbG8=", "detail": "auto"},
        {
            "type": "input_file",
            "filename": "r.pdf",
            "file_data": "data:application/pdf;base64,JVBERi0=",
        },
        {"type": "input_file", "file_url": "https://files.example/b.pdf"},
    ]
    assert said == {"role": "assistant", "content": "Checking."}
    assert call == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "fetch",
        "arguments": json.dumps({"n": 1}),
    }
    assert result["output"] == [
        {"type": "input_text", "text": "page"},
        {"type": "input_image", "image_url": "data:image/png;base64,aGk=", "detail": "auto"},
    ]


# ---------------------------------------------------------------- errors


async def test_http_errors_are_mapped_and_retried(
    server: FakeServer, chat: Callable[..., OpenAIResponses]
) -> None:
    server.push(
        Reply(429, {"error": {"message": "slow down", "type": "requests", "code": None}}),
        Reply(json=response(text_item("ok"))),
        Reply(401, {"error": {"message": "bad key", "type": "invalid_request_error"}}),
    )
    model = chat()
    assert (await model.complete(HELLO, [])).text == "ok"
    with pytest.raises(ChainError) as caught:
        await model.complete(HELLO, [])
    assert caught.value.type == "authentication"
    assert "sk-test" not in caught.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_failed_response(
    server: FakeServer, chat: Callable[..., OpenAIResponses], stream: bool
) -> None:
    whole = response(status="failed", error=("server_error", "The model broke."))
    server.push(
        Reply(events=events(created(), completed(whole, kind="response.failed")))
        if stream
        else Reply(json=whole)
    )
    with pytest.raises(ChainError) as caught:
        await chat(stream=stream, retry=None).complete(HELLO, [])
    assert caught.value.type == "server_error"
    assert "The model broke." in caught.value.message


async def test_an_error_event_mid_stream(
    server: FakeServer, chat: Callable[..., OpenAIResponses]
) -> None:
    server.push(
        Reply(
            events=events(
                created(), text_delta(0, "Hal"), error_event("rate_limit_exceeded", "Too many.")
            )
        )
    )
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "rate_limited"
    assert "Too many." in caught.value.message


async def test_a_stream_cut_before_the_completed_event(
    server: FakeServer, chat: Callable[..., OpenAIResponses]
) -> None:
    server.default = Reply(events=events(created(), text_delta(0, "Hal")))
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "invalid_response" and caught.value.retryable
    assert "response.completed" in caught.value.message


def test_the_registry_makes_one() -> None:
    model = create_model("openai-responses", "gpt-5", api_key="k")
    assert isinstance(model, OpenAIResponses)
    assert model.base_url == "https://api.openai.com/v1"
