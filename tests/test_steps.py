"""Every step as SPEC §3 says, terminals passing through untouched."""

from __future__ import annotations

import pytest

from agentfsm import (
    ChainError,
    Failed,
    Interrupted,
    LLMChain,
    Message,
    MessageExpansion,
    Ok,
    Paused,
    ToolCall,
    ToolResult,
)
from agentfsm._steps import (
    continue_or_done,
    ensure_mode_state,
    get_run_count,
    normalize_pause,
    pipe,
    reset_run_count,
)
from agentfsm.providers import ScriptedModel, call_tool, fail, say
from agentfsm.steps import (
    Continue,
    call_llm,
    check_max_runs,
    check_pause,
    check_response_complete,
    check_tool_interrupts,
    check_until_tool,
    check_until_tool_success,
    execute_tools,
    expand_tool_results,
    propagate_state,
    take_tool_answers,
)
from tests.support import add, chain_of, texts

TERMINALS = [
    lambda c: Ok(c),
    lambda c: Paused(c),
    lambda c: Failed(c, ChainError("x", "y")),
    lambda c: Interrupted(c, {}),
]


def _chain(*replies: object) -> LLMChain:
    return chain_of(ScriptedModel(list(replies)), add)  # type: ignore[arg-type]


def with_tool_message(chain: LLMChain, *results: ToolResult) -> LLMChain:
    calls = [ToolCall(r.tool_call_id, r.name, {}) for r in results]
    return chain.add_message(Message.assistant(None, calls)).add_message(Message.tool(results))


class TestModeState:
    def test_ensure_creates_once(self) -> None:
        chain = ensure_mode_state(_chain())
        assert chain.custom_context["mode_state"] == {"run_count": 0}
        marked = chain.update_custom_context({"mode_state": {"run_count": 4, "x": 1}})
        assert ensure_mode_state(marked) is marked

    def test_reset_keeps_other_keys(self) -> None:
        chain = _chain().update_custom_context({"mode_state": {"run_count": 4, "x": 1}})
        assert reset_run_count(chain).custom_context["mode_state"] == {"run_count": 0, "x": 1}
        assert get_run_count(chain) == 4
        assert get_run_count(_chain()) == 0


class TestCallLlm:
    async def test_success_increments_and_keeps_other_keys(self) -> None:
        chain = _chain(say("hi")).update_custom_context({"mode_state": {"run_count": 1, "x": 2}})
        result = await call_llm(Continue(chain))
        assert isinstance(result, Continue)
        assert result.chain.custom_context["mode_state"] == {"run_count": 2, "x": 2}
        assert result.chain.last_message == Message.assistant("hi", metadata={"model": "scripted"})

    async def test_callbacks_see_the_reply_before_it_is_counted(self) -> None:
        seen: list[int] = []
        chain = _chain(say("hi")).add_callback(
            {"on_llm_new_message": lambda c, _: seen.append(get_run_count(c))}
        )
        result = await call_llm(Continue(ensure_mode_state(chain)))
        assert isinstance(result, Continue)
        assert (seen, get_run_count(result.chain)) == ([0], 1)

    async def test_failure_keeps_the_count(self) -> None:
        chain = ensure_mode_state(_chain(fail("rate_limited", "slow down")))
        result = await call_llm(Continue(chain))
        assert isinstance(result, Failed)
        assert (result.error.type, result.error.message) == ("rate_limited", "slow down")
        assert get_run_count(result.chain) == 0

    async def test_refuses_past_the_failure_budget(self) -> None:
        chain = ensure_mode_state(_chain(say("never")))
        from attrs import evolve

        chain = evolve(chain, current_failure_count=3)
        result = await call_llm(Continue(chain))
        assert isinstance(result, Failed)
        assert result.error.type == "exceeded_failure_count"
        assert result.error.message.startswith("Exceeded max failure count (3 tool turns")
        assert result.error.details == {"failures": 3, "max_retry_count": 3}
        assert chain.llm.calls == 0  # type: ignore[attr-defined]

    async def test_a_model_bug_is_a_model_error(self) -> None:
        def broken(messages: object) -> str:
            raise KeyError("oops")

        result = await call_llm(Continue(chain_of(ScriptedModel(broken))))
        assert isinstance(result, Failed) and result.error.type == "model_error"
        assert "KeyError" in result.error.message

    @pytest.mark.parametrize("make", TERMINALS)
    async def test_terminals_pass(self, make: object) -> None:
        terminal = make(_chain())  # type: ignore[operator]
        assert await call_llm(terminal) is terminal
        assert await execute_tools(terminal) is terminal
        for step in (
            check_max_runs,
            check_pause,
            check_tool_interrupts,
            check_until_tool,
            check_until_tool_success,
            expand_tool_results,
            propagate_state,
            check_response_complete,
        ):
            assert step(terminal, {"max_runs": 0, "tool_names": ["add"]}) is terminal
        assert await continue_or_done(terminal, None, {}) is terminal  # type: ignore[arg-type]


class TestExecuteTools:
    async def test_noop_without_tool_calls(self) -> None:
        chain = _chain()
        result = await execute_tools(Continue(chain))
        assert isinstance(result, Continue) and result.chain is chain

    async def test_noop_for_a_reply_that_is_not_complete(self) -> None:
        chain = _chain().add_message(
            Message.assistant(None, [ToolCall("1", "add", {"a": 1, "b": 1})], status="length")
        )
        result = await execute_tools(Continue(chain))
        assert result.chain is chain

    async def test_one_result_per_call_in_call_order(self) -> None:
        calls = [
            ToolCall("1", "add", {"a": 1, "b": 1}),
            ToolCall("2", "nope", {}),
            ToolCall("3", "add", {"a": 2, "b": 2}),
        ]
        chain = _chain().add_message(Message.assistant(None, calls))
        result = await execute_tools(Continue(chain))
        last = result.chain.last_message
        assert last is not None and last.role == "tool"
        assert [(r.tool_call_id, r.content, r.is_error) for r in last.tool_results] == [
            ("1", "2", False),
            ("2", "Tool call made to nope but tool not found", True),
            ("3", "4", False),
        ]
        assert result.chain.current_failure_count == 1


class TestChecks:
    def test_max_runs_default_25_and_message(self) -> None:
        chain = _chain().update_custom_context({"mode_state": {"run_count": 3}})
        result = check_max_runs(Continue(chain), {"max_runs": 3})
        assert isinstance(result, Failed)
        assert result.error == ChainError(
            "exceeded_max_runs", "Exceeded maximum number of runs (3/3)"
        )
        assert isinstance(check_max_runs(Continue(chain), {"max_runs": 4}), Continue)
        at_25 = chain.update_custom_context({"mode_state": {"run_count": 25}})
        assert isinstance(check_max_runs(Continue(at_25)), Failed)
        assert isinstance(check_max_runs(Continue(chain)), Continue)

    def test_pause(self) -> None:
        chain = _chain()
        assert isinstance(check_pause(Continue(chain)), Continue)
        assert isinstance(check_pause(Continue(chain), {"should_pause": lambda: False}), Continue)
        paused = check_pause(Continue(chain), {"should_pause": lambda: True})
        assert paused == Paused(chain) and paused.reason is None

    def test_single_interrupt_data(self) -> None:
        chain = with_tool_message(
            _chain(),
            ToolResult("a", "ask", "?", is_interrupt=True, interrupt_data={"question": "why"}),
            ToolResult("b", "add", "2"),
        )
        result = check_tool_interrupts(Continue(chain))
        assert result == Interrupted(chain, {"question": "why", "tool_call_id": "a"})

    def test_multiple_interrupts_and_missing_data(self) -> None:
        chain = with_tool_message(
            _chain(),
            ToolResult("a", "ask", "?", is_interrupt=True, interrupt_data={"q": 1}),
            ToolResult("b", "ask", "?", is_interrupt=True),
        )
        # The most recent tool message is found even behind a later message.
        chain = chain.add_message(Message.user("later"))
        result = check_tool_interrupts(Continue(chain))
        assert isinstance(result, Interrupted)
        assert result.data == {
            "type": "multiple_interrupts",
            "interrupts": [{"q": 1, "tool_call_id": "a"}, {"tool_call_id": "b"}],
        }

    def test_until_tool_counts_errors_success_variant_skips_them(self) -> None:
        bad = ToolResult("a", "submit", "ERROR", is_error=True)
        good = ToolResult("b", "submit", "fine")
        chain = with_tool_message(_chain(), bad, good)
        opts = {"tool_names": ["submit"]}
        assert check_until_tool(Continue(chain), opts) == Ok(chain, bad)
        assert check_until_tool_success(Continue(chain), opts) == Ok(chain, good)
        only_bad = with_tool_message(_chain(), bad)
        assert isinstance(check_until_tool_success(Continue(only_bad), opts), Continue)
        assert isinstance(check_until_tool(Continue(chain)), Continue)  # no tool_names: off

    def test_until_tool_reads_only_the_last_message(self) -> None:
        chain = with_tool_message(_chain(), ToolResult("a", "submit", "x"))
        chain = chain.add_message(Message.assistant("after"))
        assert isinstance(check_until_tool(Continue(chain), {"tool_names": ["submit"]}), Continue)

    def test_response_complete(self) -> None:
        cut = _chain().add_message(Message.assistant("half", status="length"))
        result = check_response_complete(Continue(cut))
        assert isinstance(result, Failed) and result.error.type == "response_truncated"
        filtered = _chain().add_message(Message.assistant("", status="filtered"))
        result = check_response_complete(Continue(filtered))
        assert isinstance(result, Failed) and result.error.type == "content_filtered"


class TestExpandToolResults:
    def _expanded_chain(self) -> LLMChain:
        first = MessageExpansion.expand("fb1", [Message.user("m1"), Message.assistant("m2")])
        second = MessageExpansion.expand("fb2", [Message.user("m3")], result_content=None)
        return with_tool_message(
            _chain(),
            ToolResult("a", "x", "plain"),
            ToolResult("b", "read", first.content, expansion=first.expansion),
            ToolResult("c", "read", second.content, expansion=second.expansion),
        )

    def test_rewrites_results_and_appends_messages_in_result_order(self) -> None:
        chain = self._expanded_chain()
        result = expand_tool_results(Continue(chain))
        assert isinstance(result, Continue)
        after = result.chain
        tool_message = after.messages[-4]
        assert [r.content for r in tool_message.tool_results] == [
            "plain",
            "The requested content has been added to the conversation.",
            "fb2",
        ]
        assert all(r.expansion is None for r in tool_message.tool_results)
        assert [m.text for m in after.messages[-3:]] == ["m1", "m2", "m3"]
        assert after.last_message == Message.user("m3")
        assert after.needs_response is True
        assert after.exchanged_messages[-4] == tool_message
        assert len(after.exchanged_messages) == len(chain.exchanged_messages) + 3

    def test_twice_inserts_once(self) -> None:
        once = expand_tool_results(Continue(self._expanded_chain()))
        twice = expand_tool_results(once)
        assert twice.chain.messages == once.chain.messages

    def test_only_when_the_last_message_is_a_tool_message(self) -> None:
        chain = self._expanded_chain().add_message(Message.user("later"))
        assert expand_tool_results(Continue(chain)).chain is chain

    def test_interrupted_results_keep_their_expansion(self) -> None:
        expanded = MessageExpansion.expand("fb", [Message.user("m")])
        chain = with_tool_message(
            _chain(),
            ToolResult("a", "x", "fb", is_interrupt=True, expansion=expanded.expansion),
        )
        assert expand_tool_results(Continue(chain)).chain is chain

    def test_inserted_messages_fire_no_callbacks(self) -> None:
        fired: list[str] = []
        chain = self._expanded_chain().add_callback(
            {"on_message_processed": lambda *a: fired.append("processed")}
        )
        expand_tool_results(Continue(chain))
        assert fired == []


class TestLoopBoundary:
    async def test_continue_or_done(self) -> None:
        needs = _chain()
        called: list[LLMChain] = []

        async def again(chain: LLMChain, opts: object) -> Ok:
            called.append(chain)
            return Ok(chain)

        assert await continue_or_done(Continue(needs), again, {}) == Ok(needs)
        assert called == [needs]
        done = needs.add_message(Message.assistant("bye"))
        assert await continue_or_done(Continue(done), again, {}) == Ok(done)
        assert len(called) == 1

    def test_normalize_pause(self) -> None:
        chain = _chain()
        result = normalize_pause(Paused(chain, "draining"))
        assert isinstance(result, Paused) and result.reason is None
        assert result.chain.custom_context["pause_reason"] == "draining"
        plain = Paused(chain)
        assert normalize_pause(plain) is plain
        ok = Ok(chain)
        assert normalize_pause(ok) is ok

    def test_propagate_state_merges_in_call_order_skipping_interrupts(self) -> None:
        chain = with_tool_message(
            _chain(),
            ToolResult("a", "x", "", state_updates={"a": {"x": 1}, "n": 1}),
            ToolResult("b", "x", "", state_updates={"a": {"y": 2}, "n": 2}),
            ToolResult("c", "x", "", state_updates={"n": 99}, is_interrupt=True),
        ).update_custom_context({"state": {"keep": True, "a": {"z": 0}}})
        result = propagate_state(Continue(chain))
        assert result.chain.custom_context["state"] == {
            "keep": True,
            "a": {"z": 0, "x": 1, "y": 2},
            "n": 2,
        }


async def test_pipe_reads_like_the_seed() -> None:
    """The seed's custom mode, in Python."""

    class Simple:
        async def run(self, chain: LLMChain, opts: dict[str, object]) -> object:
            chain = ensure_mode_state(chain)
            result = await pipe(Continue(chain), call_llm, execute_tools, check_max_runs, opts=opts)
            return await continue_or_done(result, self.run, opts)  # type: ignore[arg-type]

    chain = chain_of(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), add)
    result = await Simple().run(chain, {"max_runs": 5})
    assert isinstance(result, Ok)
    assert texts(result.chain) == [
        ("user", "go"),
        ("assistant", "calls:add"),
        ("tool", "3"),
        ("assistant", "3"),
    ]


class TestTakeToolAnswers:
    """An answer a resume brought becomes its interrupted call's result, whatever it left out."""

    def waiting(self, answers: object) -> LLMChain:
        asked = ToolResult("c1", "ask_user", "Which database?", is_interrupt=True)
        chain = with_tool_message(_chain(), asked)
        return chain.update_custom_context({"answer": answers})

    def test_an_answer_without_text_or_error_flag_is_an_empty_success(self) -> None:
        result = take_tool_answers(Continue(self.waiting([{"tool_call_id": "c1"}])))
        assert isinstance(result, Continue)
        (answered,) = result.chain.last_message.tool_results
        assert (answered.tool_call_id, answered.name, answered.content) == ("c1", "ask_user", "")
        assert answered.is_error is False and answered.is_interrupt is False
        assert "answer" not in result.chain.custom_context

    def test_an_answer_carries_its_text_error_flag_and_updates(self) -> None:
        given = {"tool_call_id": "c1", "content": "no", "is_error": True, "state_updates": {"a": 1}}
        result = take_tool_answers(Continue(self.waiting([given])))
        (answered,) = result.chain.last_message.tool_results
        assert (answered.content, answered.is_error) == ("no", True)
        assert answered.state_updates == {"a": 1}
