"""OpenAIChat with current models' features, over loopback: reasoning content kept
and streamed as its own delta kind, usage with cached and reasoning tokens,
refusals, per-model parameter rules, and the client options (a base_url with a
query, your own httpx client, the server's say on retries, a page where a stream
was expected). Request bodies are checked against the SDK's request types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("openai")

from openai.types.chat import ChatCompletionChunk

from agentfsm import Agent, AgentState, ChainError, Message, MessageDelta, Thinking, Usage
from agentfsm.providers import ModelSettings, OpenAIChat, RetryPolicy
from agentfsm.providers._openai import is_reasoning_model
from agentfsm.testing import assert_path
from tests.providers.conftest import checked_server, model_fixture
from tests.providers.fake_server import FakeServer, Reply, sse
from tests.providers.openai_wire import chunk, completion, error_body, stream
from tests.providers.test_anthropic_thinking import TOOL_LOOP
from tests.providers.test_openai_chat import HELLO, get_weather, validate_request

server = checked_server("/v1/chat/completions", validate_request, prefix="/v1")
chat = model_fixture(OpenAIChat, "gpt-test", "sk-test")


def _with(body: dict[str, Any], **message: Any) -> dict[str, Any]:
    """A completion whose message carries fields the SDK types do not know."""
    body["choices"][0]["message"].update(message)
    return body


def _reasoning_chunk(text: str) -> dict[str, Any]:
    """A chunk as vLLM, DeepSeek and llama.cpp send reasoning."""
    data = chunk(content=None)
    data["choices"][0]["delta"]["reasoning_content"] = text
    ChatCompletionChunk.model_validate(data)
    return data


# ---------------------------------------------------------------- reasoning


async def test_reasoning_content_is_kept_as_thinking(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(json=_with(completion("42"), reasoning_content="6 times 7")))
    reply = await chat().complete(HELLO, [])
    assert reply.text == "42"
    assert reply.thinking == (Thinking("6 times 7"),)


async def test_streamed_reasoning_is_its_own_delta_kind(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(
        Reply(
            events=stream(
                _reasoning_chunk("6 times "),
                _reasoning_chunk("7"),
                chunk(content="42", finish_reason="stop"),
            )
        )
    )
    deltas: list[MessageDelta] = []
    reply = await chat(stream=True).complete(HELLO, [], on_delta=deltas.append)
    assert reply.thinking == (Thinking("6 times 7"),)
    assert reply.text == "42"
    assert [(d.kind, d.thinking or d.content) for d in deltas] == [
        ("thinking", "6 times "),
        ("thinking", "7"),
        ("text", "42"),
    ]


async def test_reasoning_goes_back_only_when_asked(
    make_server: Callable[[str], FakeServer],
) -> None:
    # DeepSeek wants reasoning_content back in a tool loop; the official API refuses it,
    # so the SDK types are not checked here
    server = make_server("/v1")
    server.push(
        Reply(
            json=_with(
                completion(
                    None,
                    [("call_1", "get_weather", '{"city": "Oslo"}')],
                    finish_reason="tool_calls",
                ),
                reasoning_content="I need the weather.",
            )
        ),
        Reply(json=completion("Cold.")),
    )
    model = OpenAIChat(
        "deepseek-chat",
        base_url=server.url,
        api_key="k",
        settings=ModelSettings(send_reasoning=True),
    )
    async with model:
        run = Agent(model, [get_weather]).start(AgentState.of("Oslo?"))
        await run.run()
    assert_path(run, TOOL_LOOP)
    assert server.bodies[1]["messages"][1]["reasoning_content"] == "I need the weather."


async def test_reasoning_is_not_sent_back_by_default(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.push(Reply(json=completion("ok")))
    history = [
        Message.user("a"),
        Message.assistant("b", thinking=[Thinking("t")]),
        Message.user("c"),
    ]
    await chat().complete(history, [])
    assert server.bodies[0]["messages"][1] == {"role": "assistant", "content": "b"}


# ---------------------------------------------------------------- usage and refusals


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "stream"])
async def test_usage_keeps_cached_and_reasoning_tokens(
    server: FakeServer, chat: Callable[..., OpenAIChat], streaming: bool
) -> None:
    details = {
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    if streaming:
        final = chunk(usage=(100, 20))
        final["usage"].update(details)
        server.push(Reply(events=stream(chunk(content="hi", finish_reason="stop"), final)))
    else:
        body = completion("hi", usage=(100, 20))
        body["usage"].update(details)
        server.push(Reply(json=body))
    reply = await chat(stream=streaming).complete(HELLO, [])
    assert Usage.of(reply) == Usage(100, 20, cache_read_tokens=64, reasoning_tokens=5)


async def test_usage_keeps_cache_writes_when_reported(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    body = completion("hi", usage=(100, 20))
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 10, "cache_write_tokens": 80}
    server.push(Reply(json=body))
    reply = await chat().complete(HELLO, [])
    assert Usage.of(reply) == Usage(100, 20, cache_read_tokens=10, cache_write_tokens=80)


async def test_effort_goes_to_reasoning_models_as_reasoning_effort(
    server: FakeServer, make_model: Callable[..., Any]
) -> None:
    server.default = Reply(json=completion("ok"))
    url = server.url
    for name, settings in [
        ("gpt-5", ModelSettings(effort="high")),
        ("gpt-5", ModelSettings(effort="high", reasoning_effort="minimal")),
        ("gpt-4o", ModelSettings(effort="high")),
    ]:
        model = make_model(OpenAIChat, name, api_key="k", base_url=url, settings=settings)
        await model.complete(HELLO, [])
    effort, explicit, plain = server.bodies
    assert effort["reasoning_effort"] == "high"
    assert explicit["reasoning_effort"] == "minimal"
    assert "reasoning_effort" not in plain


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "stream"])
async def test_a_refusal_ends_the_reply_as_filtered(
    server: FakeServer, chat: Callable[..., OpenAIChat], streaming: bool
) -> None:
    if streaming:
        pieces = []
        for piece in ("I can't ", "help with that."):
            data = chunk()
            data["choices"][0]["delta"]["refusal"] = piece
            pieces.append(ChatCompletionChunk.model_validate(data).model_dump(mode="json"))
        server.push(Reply(events=stream(*pieces, chunk(finish_reason="stop"))))
    else:
        server.push(Reply(json=_with(completion(None), refusal="I can't help with that.")))
    reply = await chat(stream=streaming).complete(HELLO, [])
    assert reply.status == "filtered"
    assert reply.text == "I can't help with that."
    assert reply.metadata["refusal"] == "I can't help with that."


# ---------------------------------------------------------------- per-model rules


def test_reasoning_models_by_name() -> None:
    for name in ("o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "openai/o3"):
        assert is_reasoning_model(name), name
    for name in ("gpt-4o", "gpt-4.1-mini", "gpt-5-chat-latest", "llama3.2"):
        assert not is_reasoning_model(name), name


async def test_reasoning_models_get_no_temperature(
    server: FakeServer, make_model: Callable[..., Any]
) -> None:
    server.default = Reply(json=completion("ok"))
    settings = ModelSettings(temperature=0.2, max_tokens=300, reasoning_effort="low")
    for name in ("o4-mini", "gpt-4o"):
        await make_model(OpenAIChat, name, api_key="k", settings=settings).complete(HELLO, [])
    reasoning, chat_model = server.bodies
    assert "temperature" not in reasoning
    assert reasoning["max_completion_tokens"] == 300
    assert reasoning["reasoning_effort"] == "low"
    # a compatible server gets what was asked: it may well be a reasoning server
    assert chat_model["temperature"] == 0.2 and chat_model["max_tokens"] == 300
    assert chat_model["reasoning_effort"] == "low"
    official = OpenAIChat("gpt-4o", api_key="k", settings=settings).request_body(HELLO, [])
    assert "reasoning_effort" not in official and official["max_completion_tokens"] == 300
    validate_request(official)


# ---------------------------------------------------------------- client options


async def test_a_base_url_with_a_query(make_server: Callable[[str], FakeServer]) -> None:
    server = make_server("/openai/deployments/gpt")
    server.push(Reply(json=completion("hi")))
    model = OpenAIChat("gpt", api_key="k", base_url=server.url + "?api-version=2024-10-21")
    async with model:
        assert (await model.complete(HELLO, [])).text == "hi"
    assert (
        server.requests[0].path == "/openai/deployments/gpt/chat/completions?api-version=2024-10-21"
    )
    validate_request(server.bodies[0])


async def test_your_own_http_client(server: FakeServer, chat: Callable[..., OpenAIChat]) -> None:
    seen: list[str] = []

    async def record(request: httpx.Request) -> None:
        seen.append(str(request.url))

    server.default = Reply(json=completion("hi"))
    async with httpx.AsyncClient(
        event_hooks={"request": [record]}, headers={"x-team": "a"}
    ) as client:
        model = chat(http_client=client)
        await model.complete(HELLO, [])
        await model.aclose()
        assert not client.is_closed  # the caller's client, the caller's to close
        await model.complete(HELLO, [])
    assert seen == [server.url + "/chat/completions"] * 2
    assert server.requests[0].headers["x-team"] == "a"
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize(
    ("status", "should_retry", "attempts"),
    [(500, "false", 1), (400, "true", 3), (500, None, 3)],
    ids=["500-told-not-to", "400-told-to", "500-default"],
)
async def test_the_server_says_whether_to_retry(
    server: FakeServer,
    chat: Callable[..., OpenAIChat],
    status: int,
    should_retry: str | None,
    attempts: int,
) -> None:
    headers = {} if should_retry is None else {"x-should-retry": should_retry}
    server.default = Reply(status, error_body("no", "server_error"), headers=headers)
    with pytest.raises(ChainError) as caught:
        await chat(retry=RetryPolicy(attempts=3, backoff=0.001)).complete(HELLO, [])
    assert len(server.requests) == attempts
    assert caught.value.details["attempts"] == attempts


async def test_a_long_retry_after_is_not_waited_for_past_max_wait(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    server.default = Reply(429, error_body("slow", "requests"), headers={"retry-after": "5"})
    with pytest.raises(ChainError, match=r"RetryPolicy.max_wait=1s") as caught:
        await chat(retry=RetryPolicy(max_wait=1)).complete(HELLO, [])
    assert caught.value.type == "rate_limited" and len(server.requests) == 1


async def test_a_page_where_a_stream_was_expected(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    page = b"<html><body>Please sign in</body></html>"
    server.push(Reply(body=page, headers={"content-type": "text/html; charset=utf-8"}))
    with pytest.raises(ChainError) as caught:
        await chat(stream=True).complete(HELLO, [])
    assert caught.value.type == "invalid_response"
    assert "expected an event stream (text/event-stream), got text/html" in caught.value.message
    assert "Please sign in" in caught.value.message


async def test_streams_without_a_content_type_are_read(
    server: FakeServer, chat: Callable[..., OpenAIChat]
) -> None:
    body = "".join(sse(chunk(content="hi", finish_reason="stop"), "[DONE]")).encode()
    server.push(Reply(body=body, headers={"content-type": "text/plain"}))
    assert (await chat(stream=True).complete(HELLO, [])).text == "hi"
