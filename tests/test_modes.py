"""LLMChain.run: the built-in modes, fallbacks and callbacks (SPEC §6, §6b)."""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm import (
    ChainError,
    Failed,
    LLMChain,
    Message,
    MessageExpansion,
    Ok,
    ToolCall,
    tool,
)
from agentfsm.modes import UntilToolUsed
from agentfsm.providers import FallbackModel, ScriptedModel, call_tool, fail, say
from tests.support import add, boom, chain_of, submit, texts


async def test_a_chain_without_messages_is_refused() -> None:
    errors: list[ChainError] = []
    chain = LLMChain(
        ScriptedModel([say("x")]), callbacks=[{"on_error": lambda c, e: errors.append(e)}]
    )
    result = await chain.run("while_needs_response")
    assert isinstance(result, Failed) and result.error.type == "no_messages"
    assert [e.type for e in errors] == ["no_messages"]


async def test_unknown_mode_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Unknown mode 'whille'"):
        await chain_of(ScriptedModel([])).run("whille")


async def test_no_mode_is_one_call_without_running_tools() -> None:
    model = ScriptedModel([call_tool("add", a=1, b=2)])
    result = await chain_of(model, add).run()
    assert isinstance(result, Ok)
    assert texts(result.chain) == [("user", "go"), ("assistant", "calls:add")]


async def test_exchanged_messages_are_this_runs() -> None:
    model = ScriptedModel([say("one"), say("two")])
    first = await chain_of(model).run()
    chain = first.chain.add_message(Message.user("again"))
    second = await chain.run()
    assert [m.text for m in second.chain.exchanged_messages] == ["two"]


class TestWhileNeedsResponse:
    async def test_loops_until_no_response_needed(self) -> None:
        model = ScriptedModel([call_tool("add", a=1, b=2), call_tool("add", a=3, b=4), say("done")])
        result = await chain_of(model, add).run("while_needs_response")
        assert isinstance(result, Ok)
        assert [t for _, t in texts(result.chain)] == [
            "go",
            "calls:add",
            "3",
            "calls:add",
            "7",
            "done",
        ]

    async def test_bounded_by_max_runs(self) -> None:
        model = ScriptedModel(lambda messages: call_tool("add", a=1, b=1))
        result = await chain_of(model, add).run("while_needs_response", max_runs=3)
        assert isinstance(result, Failed) and result.error.type == "exceeded_max_runs"
        assert model.calls == 3

    async def test_scenario_27_run_count_resets_each_run(self) -> None:
        model = ScriptedModel(lambda messages: say("ok"))
        chain = chain_of(model)
        for _ in range(3):
            result = await chain.run("while_needs_response", max_runs=1)
            assert isinstance(result, Ok)
            assert result.chain.custom_context["mode_state"]["run_count"] == 1
            chain = result.chain.add_message(Message.user("more"))


class TestScenariosOfTools:
    async def test_12_expansion_seen_by_the_next_call(self) -> None:
        @tool
        def fetch_doc() -> object:
            """Fetch a document into the conversation."""
            return MessageExpansion.expand(
                "the doc", [Message.user("<doc>body</doc>")], result_content="see below"
            )

        model = ScriptedModel([call_tool("fetch_doc"), say("read it")])
        result = await chain_of(model, fetch_doc).run("while_needs_response")
        assert isinstance(result, Ok)
        seen = model.requests[1].messages
        assert seen[-2].role == "tool" and seen[-2].tool_results[0].content == "see below"
        assert seen[-1] == Message.user("<doc>body</doc>")

    async def test_21_unknown_tool_then_the_loop_continues(self) -> None:
        model = ScriptedModel([call_tool("nope"), say("sorry")])
        result = await chain_of(model, add).run("while_needs_response")
        assert isinstance(result, Ok)
        assert texts(result.chain)[2] == ("tool", "Tool call made to nope but tool not found")
        assert result.chain.last_message is not None and result.chain.last_message.text == "sorry"

    async def test_22_raising_tool_keeps_the_chain(self) -> None:
        model = ScriptedModel([call_tool("boom"), say("it failed")])
        result = await chain_of(model, boom).run("while_needs_response")
        assert isinstance(result, Ok)
        assert texts(result.chain)[2] == ("tool", "ERROR: RuntimeError: kaput")

    async def test_23_invalid_json_then_the_model_retries(self) -> None:
        bad = Message.assistant(None, [ToolCall("c1", "add", {}, invalid_arguments='{"a": 1')])
        model = ScriptedModel([bad, call_tool("add", a=1, b=2), say("3")])
        result = await chain_of(model, add).run("while_needs_response")
        assert isinstance(result, Ok)
        tool_texts = [t for role, t in texts(result.chain) if role == "tool"]
        assert tool_texts[0].startswith("Invalid JSON in arguments for tool 'add'")
        assert tool_texts[1] == "3"


class TestFallbacks:
    async def test_24_model_fails_fallback_succeeds(self) -> None:
        primary = ScriptedModel([fail("rate_limited", "429")], model_name="a")
        backup = ScriptedModel([call_tool("add", a=1, b=2), say("3")], model_name="b")
        seen: list[str] = []

        def before(chain: LLMChain) -> LLMChain:
            seen.append(chain.llm.name)
            return chain

        result = await chain_of(primary, add).run(
            "while_needs_response", with_fallbacks=[backup], before_fallback=before
        )
        assert isinstance(result, Ok)
        assert seen == ["a", "b"]
        assert result.chain.llm is backup
        # The failed attempt's work is discarded: the chain holds b's run only.
        assert [
            m.metadata.get("model") for m in result.chain.messages if m.role == "assistant"
        ] == ["b", "b"]

    async def test_non_retryable_failure_is_returned(self) -> None:
        primary = ScriptedModel([fail("bad_request", "no")], model_name="a")
        backup = ScriptedModel([say("never")], model_name="b")
        result = await chain_of(primary).run(with_fallbacks=[backup])
        assert isinstance(result, Failed) and result.error.type == "bad_request"
        assert backup.calls == 0

    async def test_25_all_fail(self) -> None:
        models = [ScriptedModel([fail("server_error", f"down {n}")], model_name=n) for n in "abc"]
        chain = chain_of(models[0])
        result = await chain.run(with_fallbacks=models[1:])
        assert isinstance(result, Failed)
        assert result.error == ChainError(
            "all_fallbacks_failed", "Failed all attempts to generate response"
        )
        assert [a["model"] for a in result.error.details["attempts"]] == ["a", "b", "c"]
        assert result.chain.messages == chain.messages

    async def test_call_level_fallback_model_keeps_the_runs_work(self) -> None:
        primary = ScriptedModel(
            [call_tool("add", a=1, b=2), fail("overloaded", "busy")], model_name="a"
        )
        backup = ScriptedModel([say("3")], model_name="b")
        result = await chain_of(FallbackModel(primary, backup), add).run("while_needs_response")
        assert isinstance(result, Ok)
        assistants = [m for m in result.chain.messages if m.role == "assistant"]
        assert [m.metadata["model"] for m in assistants] == ["a", "b"]
        assert assistants[1].metadata["fallback_errors"] == [
            {"model": "a", "type": "overloaded", "message": "busy"}
        ]

    async def test_fallback_model_all_fail_raises_the_last_error(self) -> None:
        a = ScriptedModel([fail("timeout", "t1")], model_name="a")
        b = ScriptedModel([fail("server_error", "t2")], model_name="b")
        result = await chain_of(FallbackModel(a, b)).run()
        assert isinstance(result, Failed)
        assert (result.error.type, result.error.message) == ("server_error", "t2")
        assert len(result.error.details["fallback_errors"]) == 2


class TestOtherModes:
    async def test_until_success_stops_at_a_clean_tool_message(self) -> None:
        model = ScriptedModel([call_tool("submit", answer="bad"), call_tool("submit", answer="ok")])
        result = await chain_of(model, submit).run("until_success")
        assert isinstance(result, Ok)
        assert texts(result.chain)[-1] == ("tool", "submitted ok")

    async def test_until_success_bounded_by_failures(self) -> None:
        model = ScriptedModel(lambda m: call_tool("submit", answer="bad"))
        result = await chain_of(model, submit).run("until_success")
        assert isinstance(result, Failed) and result.error.type == "exceeded_failure_count"
        assert model.calls == 3

    async def test_step_runs_pending_tools_else_calls_once(self) -> None:
        model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
        first = await chain_of(model, add).run("step")
        assert texts(first.chain)[-1] == ("assistant", "calls:add")
        second = await first.chain.run("step")
        assert texts(second.chain)[-1] == ("tool", "3")
        assert model.calls == 1

    async def test_until_tool_used(self) -> None:
        model = ScriptedModel(
            [call_tool("add", a=1, b=1), call_tool("submit", answer="x"), say("no")]
        )
        result = await chain_of(model, add, submit).run(UntilToolUsed("submit"))
        assert isinstance(result, Ok) and result.tool_result is not None
        assert result.tool_result.content == "submitted x"

    async def test_until_tool_used_unknown_name(self) -> None:
        result = await chain_of(ScriptedModel([]), add).run("until_tool_used", tool_names=["x"])
        assert isinstance(result, Failed)
        assert result.error == ChainError(
            "invalid_tool_name", "Tool name 'x' not found in available tools"
        )

    async def test_a_custom_mode_object(self) -> None:
        class Echo:
            async def run(self, chain: LLMChain, opts: Any) -> Ok:
                return Ok(chain.add_message(Message.assistant(opts["say"])))

        result = await chain_of(ScriptedModel([])).run(Echo(), say="hello")
        assert result.chain.last_message == Message.assistant("hello")


class TestCallbacks:
    async def test_callbacks_fire_in_order(self) -> None:
        events: list[str] = []

        def record(name: str) -> Any:
            return lambda *args: events.append(name)

        names = [
            "on_llm_new_message",
            "on_tool_call_identified",
            "on_message_processed",
            "on_tool_execution_started",
            "on_tool_execution_completed",
            "on_tool_response_created",
            "on_llm_error",
            "on_error",
        ]
        chain = chain_of(ScriptedModel([call_tool("add", a=1, b=2), fail("bad_request", "x")]), add)
        chain = chain.add_callback({n: record(n) for n in names})
        result = await chain.run("while_needs_response")
        assert isinstance(result, Failed)
        assert events == [
            "on_llm_new_message",
            "on_tool_call_identified",
            "on_message_processed",
            "on_tool_execution_started",
            "on_tool_execution_completed",
            "on_tool_response_created",
            "on_message_processed",
            "on_llm_error",
            "on_error",
        ]

    async def test_a_raising_callback_is_a_chain_error_naming_it(self) -> None:
        def bad(*args: Any) -> None:
            raise ZeroDivisionError("nope")

        chain = chain_of(ScriptedModel([say("x")])).add_callback({"on_message_processed": bad})
        result = await chain.run()
        assert isinstance(result, Failed)
        assert result.error.type == "callback_error"
        assert (
            result.error.message == "Callback on_message_processed raised ZeroDivisionError: nope"
        )

    async def test_streamed_deltas_reach_the_callback(self) -> None:
        deltas: list[str] = []
        model = ScriptedModel([say("one two three")], stream=True)
        chain = chain_of(model).add_callback(
            {"on_llm_new_delta": lambda c, d: deltas.append(d.content)}
        )
        await chain.run()
        assert "".join(deltas).split() == ["one", "two", "three"]
