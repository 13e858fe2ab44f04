"""AnthropicChat with current models' features, over loopback: extended thinking kept
and sent back in a tool loop, usage with cache and thinking tokens, paused turns,
per-model parameter rules and prompt-cache breakpoints. Every request body is
checked against the SDK's request types (the ``server`` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anthropic")

from agentfsm import Agent, AgentState, Message, MessageDelta, Thinking, ToolCall, Usage
from agentfsm.providers import AnthropicChat, ModelSettings
from agentfsm.providers._anthropic import default_max_tokens, takes_sampling
from agentfsm.testing import assert_path
from tests.providers.anthropic_wire import (
    block_stop,
    json_delta,
    message,
    message_delta,
    redacted_start,
    signature_delta,
    start,
    stop,
    text_delta,
    text_start,
    thinking_delta,
    thinking_message,
    thinking_start,
    tool_start,
)
from tests.providers.conftest import checked_server, model_fixture
from tests.providers.fake_server import FakeServer, Reply, named_sse
from tests.providers.test_anthropic_chat import HELLO, get_weather, validate_request

server = checked_server("/v1/messages", validate_request)
chat = model_fixture(AnthropicChat, "claude-test", "sk-ant-test")


#: Two model calls with one tool round trip between them.
TOOL_LOOP = (
    "expanding calling interrupt_check executing propagating until_check deciding "
    "expanding calling interrupt_check executing propagating until_check deciding ok"
)


THINKING = ModelSettings(thinking=2048)


def _streamed_thinking_then_call() -> list[str]:
    return named_sse(
        start(),
        thinking_start(0),
        thinking_delta(0, "The user wants "),
        thinking_delta(0, "the weather."),
        signature_delta(0, "sig-1"),
        block_stop(0),
        redacted_start(1, "ENCRYPTED"),
        block_stop(1),
        tool_start(2, "toolu_1", "get_weather"),
        json_delta(2, '{"city": "Paris"}'),
        block_stop(2),
        message_delta("tool_use"),
        stop(),
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_thinking_is_kept_and_sent_back_in_a_tool_loop(
    server: FakeServer, chat: Callable[..., AnthropicChat], stream: bool
) -> None:
    first = (
        Reply(events=_streamed_thinking_then_call())
        if stream
        else Reply(
            json=thinking_message(
                "The user wants the weather.",
                "sig-1",
                redacted="ENCRYPTED",
                tool_use=("toolu_1", "get_weather", {"city": "Paris"}),
                stop_reason="tool_use",
            )
        )
    )
    server.push(first, Reply(json=message("Sunny.")) if not stream else Reply(events=_done()))
    deltas: list[MessageDelta] = []
    model = chat(settings=THINKING, stream=stream)
    agent = Agent(model, [get_weather], callbacks=[{"on_llm_new_delta": _collect(deltas)}])
    run = agent.start(AgentState.of("Weather in Paris?"))
    await run.run()
    assert_path(run, TOOL_LOOP)
    reply = run.agent_state.messages[1]
    assert reply.thinking == (
        Thinking("The user wants the weather.", "sig-1"),
        Thinking(redacted="ENCRYPTED"),
    )
    assert reply.tool_calls == (ToolCall("toolu_1", "get_weather", {"city": "Paris"}),)
    first_body, second_body = server.bodies
    assert first_body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert second_body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "The user wants the weather.", "signature": "sig-1"},
            {"type": "redacted_thinking", "data": "ENCRYPTED"},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    }
    if stream:
        assert [d.thinking for d in deltas if d.kind == "thinking"] == [
            "The user wants ",
            "the weather.",
        ]
        assert all(d.content == "" for d in deltas if d.kind == "thinking")


def _done() -> list[str]:
    return named_sse(
        start(), text_start(0), text_delta(0, "Sunny."), message_delta("end_turn"), stop()
    )


def _collect(deltas: list[MessageDelta]) -> Callable[[Any, MessageDelta], None]:
    return lambda _chain, delta: deltas.append(delta)


async def test_unsigned_reasoning_of_another_provider_is_not_sent(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(Reply(json=message("ok")))
    history = [
        Message.user("Hi"),
        Message.assistant("Hello", thinking=[Thinking("from a local model")]),
        Message.user("Again"),
    ]
    await chat().complete(history, [])
    assert server.bodies[0]["messages"][1] == {"role": "assistant", "content": "Hello"}


async def test_usage_keeps_cache_reads_writes_and_thinking_tokens(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(
        Reply(json=thinking_message("t", "s", text="Hi", cache=(100, 50), thinking_tokens=30))
    )
    reply = await chat().complete(HELLO, [])
    assert Usage.of(reply) == Usage(
        input_tokens=160,  # uncached 10 + read 100 + written 50: the whole prompt
        output_tokens=40,
        cache_read_tokens=100,
        cache_write_tokens=50,
        reasoning_tokens=30,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_paused_turn_is_continued_in_the_same_call(
    server: FakeServer, chat: Callable[..., AnthropicChat], stream: bool
) -> None:
    if stream:
        server.push(
            Reply(
                events=named_sse(
                    start(),
                    text_start(0),
                    text_delta(0, "Searching. "),
                    message_delta("pause_turn"),
                    stop(),
                )
            ),
            Reply(events=_done()),
        )
    else:
        server.push(
            Reply(json=message("Searching. ", stop_reason="pause_turn")),
            Reply(json=message("Sunny.")),
        )
    reply = await chat(stream=stream).complete(HELLO, [])
    assert reply.text == "Searching. Sunny."
    assert reply.status == "complete"
    assert reply.metadata["stop_reason"] == "end_turn"
    assert reply.metadata["continuations"] == 1
    first, second = server.bodies
    # the paused content goes back as the assistant's turn, to be continued
    assert second["messages"] == [
        *first["messages"],
        {"role": "assistant", "content": [{"type": "text", "text": "Searching. "}]},
    ]
    usage = Usage.of(reply)
    assert usage is not None and usage.output_tokens == (30 if stream else 18)


def test_thinking_refuses_a_forced_tool_choice() -> None:
    with pytest.raises(ValueError, match="tool_choice 'auto' or 'none' only"):
        AnthropicChat("m", api_key="k", settings=ModelSettings(thinking=2048, tool_choice="any"))
    AnthropicChat("m", api_key="k", settings=ModelSettings(thinking=2048, tool_choice="auto"))


def test_per_model_parameter_rules() -> None:
    assert takes_sampling("claude-sonnet-4-5") and takes_sampling("claude-3-5-haiku-latest")
    assert not takes_sampling("claude-opus-5") and not takes_sampling("claude-sonnet-5-5")
    assert not takes_sampling("claude-mythos-preview")
    assert default_max_tokens("claude-3-opus-20240229") == 4096
    assert default_max_tokens("claude-opus-4-20250514") == 8192
    assert default_max_tokens("claude-sonnet-4-6") == 16000


async def test_temperature_is_left_out_where_refused(
    server: FakeServer, make_model: Callable[..., Any]
) -> None:
    server.default = Reply(json=message("ok"))
    warm = ModelSettings(temperature=0.3)
    await make_model(AnthropicChat, "claude-sonnet-4-5", api_key="k", settings=warm).complete(
        HELLO, []
    )
    await make_model(AnthropicChat, "claude-opus-5", api_key="k", settings=warm).complete(HELLO, [])
    thinking = ModelSettings(temperature=0.3, thinking="adaptive")
    await make_model(AnthropicChat, "claude-sonnet-4-5", api_key="k", settings=thinking).complete(
        HELLO, []
    )
    kept, newer, while_thinking = server.bodies
    assert kept["temperature"] == 0.3
    assert "temperature" not in newer
    assert "temperature" not in while_thinking
    assert while_thinking["thinking"] == {"type": "adaptive"}


async def test_prompt_cache_breakpoints_on_the_system_prompt_and_tools(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(Reply(json=message("ok")))
    settings = ModelSettings(cache_system=True, cache_tools=True, cache_ttl="1h")
    await chat(settings=settings).complete(HELLO, [get_weather])
    body = server.bodies[0]
    breakpoint_ = {"type": "ephemeral", "ttl": "1h"}
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": breakpoint_}]
    assert body["tools"][-1]["cache_control"] == breakpoint_


async def test_thinking_and_usage_are_saved_in_checkpoints(
    server: FakeServer, chat: Callable[..., AnthropicChat], tmp_path: Path
) -> None:
    from agentfsm import start_run
    from agentfsm.store import SQLiteStore, load_run

    server.push(
        Reply(
            json=thinking_message(
                "Look it up.",
                "sig-9",
                tool_use=("toolu_1", "get_weather", {"city": "Oslo"}),
                stop_reason="tool_use",
                cache=(7, 3),
            )
        ),
        Reply(json=message("Cold.")),
    )
    store = SQLiteStore(tmp_path / "runs.db")
    agent = Agent(chat(settings=THINKING), [get_weather])
    run = start_run(agent, AgentState.of("Oslo?"), store, run_id="r")
    await run.run()
    saved = load_run(store, "r", tools=[get_weather])
    assert saved.agent_state == run.agent_state
    assert saved.trace.usage == run.trace.usage == run.agent_state.usage
    assert run.agent_state.usage == Usage(
        input_tokens=20 + 21, output_tokens=40 + 9, cache_read_tokens=7, cache_write_tokens=3
    )
    assert saved.agent_state is not None
    assert saved.agent_state.messages[1].thinking == (Thinking("Look it up.", "sig-9"),)
