"""AnthropicChat's finer points over loopback: the per-model rules (adaptive thinking,
effort, no sampling), a reply's block order with server-tool blocks kept and sent
back, and file parts as documents. Every request body is checked against the SDK's
request types (the ``server`` fixture)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anthropic")

from anthropic import types as wire

from agentfsm import (
    Agent,
    AgentState,
    ChainError,
    ContentPart,
    Message,
    Thinking,
    ToolCall,
    ToolResult,
)
from agentfsm.providers import (
    MODEL_RULES,
    AnthropicChat,
    ModelRule,
    ModelRules,
    ModelSettings,
    rules_for,
)
from tests.providers.anthropic_wire import (
    _reply,
    block_stop,
    json_delta,
    message,
    message_delta,
    signature_delta,
    start,
    stop,
    text_delta,
    text_start,
    thinking_delta,
    thinking_start,
    tool_start,
)
from tests.providers.conftest import checked_server, model_fixture
from tests.providers.fake_server import FakeServer, Reply, named_sse
from tests.providers.test_anthropic_chat import HELLO, get_weather, validate_request

server = checked_server("/v1/messages", validate_request)
chat = model_fixture(AnthropicChat, "claude-test", "sk-ant-test")


# ---------------------------------------------------------------- per-model rules


@pytest.mark.parametrize("model", ["claude-opus-4-7", "claude-opus-4-8-20260301", "claude-opus-5"])
async def test_adaptive_only_models_get_adaptive_thinking_effort_and_no_temperature(
    server: FakeServer, make_model: Callable[..., Any], model: str
) -> None:
    server.default = Reply(json=message("ok"))
    settings = ModelSettings(temperature=0.2, thinking=4096, effort="high")
    await make_model(AnthropicChat, model, api_key="k", settings=settings).complete(HELLO, [])
    plain = ModelSettings(temperature=0.2, effort="low")
    await make_model(AnthropicChat, model, api_key="k", settings=plain).complete(HELLO, [])
    thinking, without = server.bodies
    assert thinking["thinking"] == {"type": "adaptive"}
    assert thinking["output_config"] == {"effort": "high"}
    assert "temperature" not in thinking and "temperature" not in without
    assert without["output_config"] == {"effort": "low"}
    assert "thinking" not in without


async def test_effort_goes_only_to_models_that_take_it(
    server: FakeServer, make_model: Callable[..., Any]
) -> None:
    server.default = Reply(json=message("ok"))
    settings = ModelSettings(effort="medium", thinking=2048, temperature=0.5)
    for model in ("claude-opus-4-6", "claude-sonnet-4-6", "claude-sonnet-4-5"):
        await make_model(AnthropicChat, model, api_key="k", settings=settings).complete(HELLO, [])
    opus, sonnet_46, sonnet_45 = server.bodies
    assert opus["output_config"] == sonnet_46["output_config"] == {"effort": "medium"}
    assert "output_config" not in sonnet_45
    # models that take a budget keep it
    assert sonnet_45["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert opus["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_the_rules_table_is_read_field_by_field() -> None:
    assert rules_for("anthropic", "claude-opus-4-7").thinking == "adaptive"
    assert not rules_for("anthropic", "claude-opus-4-7").temperature
    assert rules_for("anthropic", "claude-opus-4-5").thinking == "budget"
    assert rules_for("anthropic", "claude-3-opus-20240229").max_tokens == 4096
    assert rules_for("openai", "openrouter/o3-mini").reasoning
    assert not rules_for("openai", "gpt-5-chat-latest").reasoning
    # one more row above the rest changes one field and keeps the others
    extra = ModelRule(provider="anthropic", pattern=r"^claude-3-opus", temperature=False)
    table = (extra, *MODEL_RULES)
    rules = rules_for("anthropic", "claude-3-opus-20240229", table)
    assert not rules.temperature and rules.max_tokens == 4096


async def test_a_model_the_table_does_not_know_yet_takes_rules_of_its_own(
    server: FakeServer, make_model: Callable[..., Any]
) -> None:
    server.default = Reply(json=message("ok"))
    rules = ModelRules(temperature=False, thinking="adaptive", effort=True, max_tokens=32000)
    settings = ModelSettings(temperature=0.1, thinking=1024, effort="max")
    model = make_model(AnthropicChat, "claude-next", api_key="k", settings=settings, rules=rules)
    await model.complete(HELLO, [])
    body = server.bodies[0]
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "max"}
    assert body["max_tokens"] == 32000 and "temperature" not in body


def test_a_budget_on_an_adaptive_only_model_sets_no_budget_bound() -> None:
    model = AnthropicChat("claude-opus-4-7", api_key="k", settings=ModelSettings(thinking=32000))
    assert model.max_tokens == 16000


# ---------------------------------------------------------------- block order


SEARCH_INPUT = {"query": "weather Paris"}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}


def _search_blocks() -> list[Any]:
    return [
        wire.ServerToolUseBlock(
            type="server_tool_use", id="srvtoolu_1", name="web_search", input=SEARCH_INPUT
        ),
        wire.WebSearchToolResultBlock(
            type="web_search_tool_result",
            tool_use_id="srvtoolu_1",
            content=[
                wire.WebSearchResultBlock(
                    type="web_search_result",
                    url="https://weather.example/paris",
                    title="Paris weather",
                    encrypted_content="ENC-PAGE",
                    page_age="1 hour",
                )
            ],
        ),
    ]


CITATION = {
    "type": "web_search_result_location",
    "url": "https://weather.example/paris",
    "title": "Paris weather",
    "encrypted_index": "ENC-IDX",
    "cited_text": "Sunny, 21C",
}


def _mixed_message() -> dict[str, Any]:
    content: list[Any] = [
        wire.ThinkingBlock(type="thinking", thinking="Search first.", signature="sig-1"),
        *_search_blocks(),
        wire.TextBlock(
            type="text",
            text="It is sunny. ",
            citations=[wire.CitationsWebSearchResultLocation.model_validate(CITATION)],
        ),
        wire.ThinkingBlock(type="thinking", thinking="Now the tool.", signature="sig-2"),
        wire.TextBlock(type="text", text="Checking the forecast."),
        wire.ToolUseBlock(
            type="tool_use", id="toolu_1", name="get_weather", input={"city": "Paris"}
        ),
    ]
    return _reply("msg_9", content, "tool_use", wire.Usage(input_tokens=5, output_tokens=9))


def _mixed_events() -> list[str]:
    search_use, search_result = (b.model_dump(mode="json") for b in _search_blocks())
    started_use = {**search_use, "input": {}}
    return named_sse(
        start(),
        thinking_start(0),
        thinking_delta(0, "Search first."),
        signature_delta(0, "sig-1"),
        block_stop(0),
        {"type": "content_block_start", "index": 1, "content_block": started_use},
        json_delta(1, '{"query": "weather Paris"}'),
        block_stop(1),
        {"type": "content_block_start", "index": 2, "content_block": search_result},
        block_stop(2),
        text_start(3),
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "citations_delta", "citation": CITATION},
        },
        text_delta(3, "It is sunny. "),
        block_stop(3),
        thinking_start(4),
        thinking_delta(4, "Now the tool."),
        signature_delta(4, "sig-2"),
        block_stop(4),
        text_start(5),
        text_delta(5, "Checking the forecast."),
        block_stop(5),
        tool_start(6, "toolu_1", "get_weather"),
        json_delta(6, '{"city": "Paris"}'),
        block_stop(6),
        message_delta("tool_use"),
        stop(),
    )


def _expected_blocks() -> list[dict[str, Any]]:
    search_use, search_result = (b.model_dump(mode="json") for b in _search_blocks())
    search_result = {k: v for k, v in search_result.items() if v is not None}
    search_use = {k: v for k, v in search_use.items() if v is not None}
    return [
        {"type": "thinking", "thinking": "Search first.", "signature": "sig-1"},
        search_use,
        search_result,
        {"type": "text", "text": "It is sunny. ", "citations": [CITATION]},
        {"type": "thinking", "thinking": "Now the tool.", "signature": "sig-2"},
        {"type": "text", "text": "Checking the forecast."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_mixed_reply_goes_back_in_its_order_with_server_tool_blocks(
    server: FakeServer, chat: Callable[..., AnthropicChat], stream: bool, tmp_path: Path
) -> None:
    from agentfsm import start_run
    from agentfsm.store import SQLiteStore, load_run

    first = Reply(events=_mixed_events()) if stream else Reply(json=_mixed_message())
    server.push(first, Reply(json=message("Sunny.")))
    store = SQLiteStore(tmp_path / "runs.db")
    model = chat(settings=ModelSettings(thinking=2048), stream=stream, server_tools=[WEB_SEARCH])
    agent = Agent(model, [get_weather])
    run = start_run(agent, AgentState.of("Weather in Paris?"), store, run_id="r")
    await run.run()
    assert [t["name"] for t in server.bodies[0]["tools"]] == ["get_weather", "web_search"]
    assert server.bodies[0]["tools"][1] == WEB_SEARCH
    reply = run.agent_state.messages[1]
    assert reply.text == "It is sunny. Checking the forecast."
    assert reply.thinking == (
        Thinking("Search first.", "sig-1"),
        Thinking("Now the tool.", "sig-2"),
    )
    assert reply.tool_calls == (ToolCall("toolu_1", "get_weather", {"city": "Paris"}),)
    assert server.bodies[1]["messages"][1] == {"role": "assistant", "content": _expected_blocks()}
    # the order survives a checkpoint: the reloaded conversation sends the same body
    saved = load_run(store, "r", tools=[get_weather])
    assert saved.agent_state is not None
    messages = saved.agent_state.messages[:3]
    assert chat().request_body(messages, [get_weather])["messages"][1]["content"] == (
        _expected_blocks()
    )


def test_a_reply_in_the_usual_order_keeps_no_layout() -> None:
    model = AnthropicChat("claude-test", api_key="k")
    data = message("Hi", [("toolu_1", "get_weather", {"city": "Oslo"})], stop_reason="tool_use")
    assert "content_blocks" not in model._reply(data).metadata


def test_an_edited_reply_is_sent_the_usual_way_with_its_server_blocks() -> None:
    model = AnthropicChat("claude-test", api_key="k")
    reply = model._reply(_mixed_message())
    edited = Message.assistant(
        "Shorter.", reply.tool_calls, metadata=reply.metadata, thinking=reply.thinking
    )
    content = model.request_body([Message.user("Hi"), edited], [])["messages"][1]["content"]
    expected = _expected_blocks()
    assert content == [
        expected[0],
        expected[4],
        expected[1],
        expected[2],
        {"type": "text", "text": "Shorter."},
        expected[6],
    ]
    validate_request(model.request_body([Message.user("Hi"), edited], []))


# ---------------------------------------------------------------- files


PDF_DATA = base64.b64encode(b"%PDF-1.4 hello").decode()
TEXT_DATA = base64.b64encode(b"plain notes").decode()


async def test_file_parts_are_sent_as_documents(
    server: FakeServer, chat: Callable[..., AnthropicChat]
) -> None:
    server.push(Reply(json=message("Read.")))
    conversation = [
        Message.user(
            [
                ContentPart.text("Summarize these."),
                ContentPart("file", PDF_DATA, {"filename": "report.pdf"}),
                ContentPart("file", TEXT_DATA, {"media_type": "text/plain"}),
                ContentPart("file_url", "https://files.example/a.pdf"),
                ContentPart("file", "", {"file_id": "file_011"}),
                ContentPart("file", "aGVsbG8=", {"media_type": "image/png"}),
            ]
        ),
        Message.assistant(None, [ToolCall("toolu_1", "fetch", {})]),
        Message.tool(
            [
                ToolResult(
                    "toolu_1", "fetch", (ContentPart("file", PDF_DATA, {"filename": "b.pdf"}),)
                )
            ]
        ),
    ]
    await chat().complete(conversation, [])
    user, _, result = server.bodies[0]["messages"]
    assert user["content"][1:] == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_DATA},
            "title": "report.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"},
        },
        {"type": "document", "source": {"type": "url", "url": "https://files.example/a.pdf"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_011"}},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
        },
    ]
    assert result["content"][0]["content"][0]["type"] == "document"


def test_a_file_of_another_media_type_is_unsupported() -> None:
    part = ContentPart("file", "aGVsbG8=", {"media_type": "application/zip"})
    with pytest.raises(ChainError) as caught:
        AnthropicChat("m", api_key="k").request_body([Message.user([part])], [])
    assert caught.value.type == "unsupported_content"
