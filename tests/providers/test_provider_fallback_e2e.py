"""End to end: a chain whose first provider is down answers through the second.

Both providers speak real HTTP to loopback servers: the OpenAI one always
answers 503, the Anthropic one asks for a tool, then answers with its result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from agentfsm import LLMChain, Message, Ok, tool
from agentfsm.providers import AnthropicChat, FallbackModel, OpenAIChat, RetryPolicy
from tests.providers import anthropic_wire as wire
from tests.providers.fake_server import FakeServer, Reply, Request, named_sse, sse
from tests.providers.openai_wire import completion, error_body


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


#: The tokens every Anthropic reply reports.
USAGE = (12, 5)


def _tool_result_of(request: Request) -> str | None:
    last = request.json["messages"][-1]
    for block in last["content"] if isinstance(last["content"], list) else ():
        if block["type"] == "tool_result":
            return str(block["content"])
    return None


def _json_reply(request: Request) -> Reply:
    result = _tool_result_of(request)
    if result is None:
        call = ("toolu_1", "get_weather", {"city": "Paris"})
        return Reply(json=wire.message(None, [call], stop_reason="tool_use", usage=USAGE))
    return Reply(json=wire.message(f"It is {result}.", usage=USAGE))


def _stream_reply(request: Request) -> Reply:
    result = _tool_result_of(request)
    reason: wire.StopReason
    if result is None:
        block = [
            wire.tool_start(0, "toolu_1", "get_weather"),
            wire.json_delta(0, '{"city": "Paris"}'),
        ]
        reason = "tool_use"
    else:
        block = [wire.text_start(0), wire.text_delta(0, f"It is {result}.")]
        reason = "end_turn"
    end = [wire.block_stop(0), wire.message_delta(reason, output_tokens=USAGE[1]), wire.stop()]
    return Reply(events=named_sse(wire.start(input_tokens=USAGE[0]), *block, *end))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_fallback_answers_with_a_tool_round_trip(
    make_server: Callable[[str], FakeServer], closing: Callable[[Any], Any], stream: bool
) -> None:
    down = make_server("/v1")
    down.default = Reply(503, error_body("Service Unavailable", "server_error"))
    up = make_server("")
    up.default = _stream_reply if stream else _json_reply
    primary = closing(
        OpenAIChat(
            "gpt-test",
            api_key="sk-test",
            base_url=down.url,
            retry=RetryPolicy(attempts=2, backoff=0.01),
        )
    )
    secondary = closing(
        AnthropicChat(
            "claude-test",
            api_key="sk-ant",
            base_url=up.url,
            stream=stream,
            retry=RetryPolicy(backoff=0.01),
        )
    )
    chain = LLMChain(
        FallbackModel(primary, secondary),
        tools=[get_weather],
        messages=[Message.user("What is the weather in Paris?")],
    )

    result = await chain.run("while_needs_response")

    assert isinstance(result, Ok)
    final = result.chain
    reply = final.last_message
    assert reply is not None
    assert reply.text == "It is sunny in Paris."
    assert reply.metadata["model"] == "anthropic:claude-test"
    assert [e["model"] for e in reply.metadata["fallback_errors"]] == ["openai:gpt-test"]
    assert reply.metadata["fallback_errors"][0]["type"] == "server_error"
    assert reply.metadata["usage"] == {"input_tokens": 12, "output_tokens": 5}
    roles = [m.role for m in final.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert final.messages[1].tool_calls[0].arguments == {"city": "Paris"}
    assert final.messages[2].tool_results[0].text == "sunny in Paris"
    assert len(down.requests) == 4  # two calls, each tried twice
    assert len(up.requests) == 2
    assert _tool_result_of(up.requests[1]) == "sunny in Paris"


def test_sync_doors_close_the_models_connections(make_server: Any) -> None:
    """run_sync / execute_sync end their loop with the model's pool closed."""
    from agentfsm import Agent, AgentState

    server = make_server("/v1")
    server.push(Reply(json=completion("hi")), Reply(json=completion("hi")))
    model = OpenAIChat("gpt-test", api_key="k", base_url=server.url)
    state = Agent(model).execute_sync(AgentState.of("hello"))
    assert state.status == "ok" and state.messages[-1].text == "hi"
    assert model._http._client is None
    chain = LLMChain(model).add_message(Message.user("again"))
    assert isinstance(chain.run_sync(), Ok)
    assert model._http._client is None


async def test_a_stream_cut_off_mid_way_is_discarded_before_the_fallback_answers(
    make_server: Callable[[str], FakeServer], closing: Callable[[Any], Any]
) -> None:
    from agentfsm import MessageDelta
    from tests.providers.openai_wire import chunk

    down = make_server("/v1")
    down.push(Reply(events=sse(chunk(content="Half an ans"), chunk(content="wer")), cut=True))
    up = make_server("")
    up.push(
        Reply(
            events=named_sse(
                wire.start(),
                wire.text_start(0),
                wire.text_delta(0, "Whole."),
                wire.message_delta("end_turn"),
                wire.stop(),
            )
        )
    )
    model = closing(
        FallbackModel(
            OpenAIChat(
                "gpt-test",
                api_key="k",
                base_url=down.url,
                stream=True,
                retry=RetryPolicy(attempts=1),
            ),
            AnthropicChat("claude-test", api_key="k", base_url=up.url, stream=True),
        )
    )
    deltas: list[MessageDelta] = []
    reply = await model.complete([Message.user("Hi")], [], on_delta=deltas.append)
    assert reply.text == "Whole."
    assert [d.kind for d in deltas] == ["text", "text", "discard", "text"]
    assert deltas[2] == MessageDelta(discard=True)
    shown = ""
    for delta in deltas:  # what a host does with them: the discarded text is gone
        shown = "" if delta.kind == "discard" else shown + delta.content
    assert shown == "Whole."
    assert reply.metadata["fallback_errors"][0]["type"] == "invalid_response"
