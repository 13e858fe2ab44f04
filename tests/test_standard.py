"""The standard machine: SPEC §7's scenarios, each asserting the exact path."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    ChainError,
    Failed,
    IllegalTransitionError,
    Interrupted,
    LLMChain,
    Message,
    MessageExpansion,
    Ok,
    Paused,
    ToolCall,
    ToolContext,
    ToolOutput,
    tool,
)
from agentfsm._modes import StandardMode
from agentfsm.providers import FallbackModel, ScriptedModel, call_tool, call_tools, fail, say
from agentfsm.steps import Continue, expand_tool_results
from agentfsm.testing import assert_path, edge_coverage, matches_path
from tests.support import (
    LOOP,
    add,
    boom,
    chain_of,
    registered_runs,
    remember,
    search,
    submit,
    texts,
)


def agent(model: ScriptedModel, *tools: Any, **kw: Any) -> Agent:
    return Agent(model, tools or (add,), **kw)


def start(model: ScriptedModel, *tools: Any, prompt: str = "go", **options: Any) -> Any:
    return agent(model, *tools).start(AgentState.of(prompt), **options)


async def test_01_text_answer_one_loop() -> None:
    run = start(ScriptedModel([say("hello")]))
    result = await run.run()
    assert_path(run, f"{LOOP} ok")
    assert isinstance(result, Ok) and result.tool_result is None
    assert texts(result.chain) == [("user", "go"), ("assistant", "hello")]
    assert run.agent_state.status == "ok"


async def test_02_one_tool_call_then_text() -> None:
    run = start(ScriptedModel([call_tool("add", a=1, b=2), say("3")]))
    await run.run()
    assert_path(run, f"{LOOP} {LOOP} ok")
    assert texts(run.chain) == [
        ("user", "go"),
        ("assistant", "calls:add"),
        ("tool", "3"),
        ("assistant", "3"),
    ]
    assert run.trace.triggers == [
        "expanded",
        "called",
        "clear",
        "executed",
        "propagated",
        "unsatisfied",
        "loop",
        "expanded",
        "called",
        "clear",
        "executed",
        "propagated",
        "unsatisfied",
        "done",
    ]


async def test_03_until_tool_called() -> None:
    model = ScriptedModel([call_tool("submit", answer="42"), say("never")])
    run = start(model, submit, until_tool="submit")
    result = await run.run()
    assert_path(run, f"{LOOP.removesuffix(' deciding')} ok")
    assert isinstance(result, Ok) and result.tool_result is not None
    assert result.tool_result.content == "submitted 42"
    assert model.calls == 1
    assert run.agent_state.tool_result == result.tool_result


async def test_04_until_tool_not_called() -> None:
    run = start(ScriptedModel([say("I am done")]), submit, until_tool="submit")
    result = await run.run()
    assert_path(run, f"{LOOP} error")
    assert isinstance(result, Failed)
    assert result.error == ChainError(
        "until_tool_not_called",
        "Agent completed without calling target tool(s): ['submit']. "
        "The LLM stopped responding before invoking the required tool.",
    )


async def test_05_until_tool_success_after_an_error() -> None:
    model = ScriptedModel([call_tool("submit", answer="bad"), call_tool("submit", answer="ok")])
    run = start(model, submit, until_tool_success="submit")
    result = await run.run()
    assert_path(run, f"{LOOP} {LOOP.removesuffix(' deciding')} ok")
    assert isinstance(result, Ok) and result.tool_result is not None
    assert result.tool_result.content == "submitted ok"


async def test_06_until_tool_success_always_errors() -> None:
    model = ScriptedModel(lambda m: call_tool("submit", answer="bad"))
    state = await agent(model, submit).execute(
        AgentState.of("go"), until_tool_success="submit", max_runs=3
    )
    assert state.status == "error" and state.error is not None
    assert state.error.type == "exceeded_max_runs"
    assert state.error.message == (
        "Max number of automated turns reached. You may continue if desired."
    )
    assert model.calls == 3


async def test_07_until_one_of_several() -> None:
    @tool
    def a() -> str:
        """A."""
        return "a"

    @tool
    def b() -> str:
        """B."""
        return "b done"

    run = start(ScriptedModel([call_tool("b")]), a, b, until_tool=["a", "b"])
    result = await run.run()
    assert isinstance(result, Ok) and result.tool_result is not None
    assert (result.tool_result.name, result.tool_result.content) == ("b", "b done")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"until_tool": "submit", "until_tool_success": "submit"},
            "Cannot pass both until_tool and until_tool_success; they are mutually exclusive",
        ),
        ({"until_tool": 3}, "Invalid until_tool option: expected string or list, got: 3"),
        (
            {"until_tool": ["submit", "nonexistent"]},
            "until_tool: tool(s) ['nonexistent'] not found. Available: ['add', 'submit']",
        ),
        (
            {"until_tool_success": "nonexistent"},
            "until_tool_success: tool(s) ['nonexistent'] not found. Available: ['add', 'submit']",
        ),
        ({"max_runs": 0}, "max_runs must be a positive integer, got: 0"),
        ({"max_runs": -3}, "max_runs must be a positive integer, got: -3"),
    ],
)
async def test_08_invalid_options_run_nothing(options: dict[str, Any], message: str) -> None:
    model = ScriptedModel([say("x")])
    with pytest.raises(ValueError) as info:
        await agent(model, add, submit).execute(AgentState.of("go"), **options)
    assert str(info.value) == message
    assert model.calls == 0


async def test_09_max_runs_counts_model_calls_and_the_last_replys_tools_run() -> None:
    ran: list[int] = []

    @tool
    def work(n: int) -> str:
        """Work."""
        ran.append(n)
        return "ok"

    model = ScriptedModel(lambda m: call_tool("work", n=len(ran)))
    run = start(model, work, max_runs=2)
    result = await run.run()
    assert_path(run, f"{LOOP} {LOOP} error")
    assert isinstance(result, Failed) and result.error.type == "exceeded_max_runs"
    assert result.error.message == "Exceeded maximum number of runs (2/2)"
    assert model.calls == 2 and ran == [0, 1]


def test_max_runs_precedence() -> None:
    model = ScriptedModel(lambda m: call_tool("add", a=1, b=1))
    a = Agent(model, [add], max_runs=2)
    assert a.execute_sync(AgentState.of("go")).error is not None
    assert model.calls == 2
    a.execute_sync(AgentState.of("go"), max_runs=3)
    assert model.calls == 5
    Agent(model, [add]).execute_sync(AgentState.of("go"))
    assert model.calls == 55


async def test_10_should_pause_after_the_first_reply() -> None:
    run = start(ScriptedModel([call_tool("add", a=1, b=1)]), should_pause=lambda: True)
    result = await run.run()
    assert_path(run, "expanding calling paused")
    assert isinstance(result, Paused)
    assert "pause_reason" not in result.chain.custom_context
    assert run.agent_state.status == "paused" and run.agent_state.pause_reason is None


async def test_11_a_step_pauses_with_a_cause() -> None:
    def drain(result: Any, opts: Any) -> Any:
        return Paused(result.chain, "draining")

    run = start(ScriptedModel([call_tool("add", a=1, b=1)]), extra_steps={"executing": [drain]})
    result = await run.run()
    assert_path(run, "expanding calling interrupt_check executing paused")
    assert isinstance(result, Paused) and result.reason is None
    assert result.chain.custom_context["pause_reason"] == "draining"
    assert run.agent_state.pause_reason == "draining"


async def test_11b_a_step_that_sets_the_pause_reason_itself() -> None:
    """The seed's other way: a step (or custom mode) writes ``custom_context["pause_reason"]``
    and returns the plain ``Paused(chain)``; the agent layer reads it back."""

    def unreachable(result: Any, opts: Any) -> Any:
        chain = result.chain.update_custom_context({"pause_reason": {"cause": "store_unreachable"}})
        return Paused(chain)

    model = ScriptedModel([call_tool("add", a=1, b=1)])
    run = start(model, extra_steps={"executing": [unreachable]})
    result = await run.run()
    assert_path(run, "expanding calling interrupt_check executing paused")
    assert isinstance(result, Paused) and result.reason is None
    assert result.chain.custom_context["pause_reason"] == {"cause": "store_unreachable"}
    assert run.pause_reason == {"cause": "store_unreachable"}
    assert run.agent_state.status == "paused"
    assert run.agent_state.pause_reason == {"cause": "store_unreachable"}
    state = await agent(ScriptedModel([call_tool("add", a=1, b=1)])).execute(
        AgentState.of("go"), extra_steps={"executing": [unreachable]}
    )
    assert state.status == "paused" and state.pause_reason == {"cause": "store_unreachable"}


@tool
def fetch_doc() -> object:
    """Bring a document into the conversation."""
    return MessageExpansion.expand(
        "the document", [Message.user("<doc>body</doc>")], result_content="see below"
    )


async def test_12_expansion_before_the_next_call() -> None:
    model = ScriptedModel([call_tool("fetch_doc"), say("read")])
    run = start(model, fetch_doc)
    await run.run()
    assert_path(run, f"{LOOP} {LOOP} ok")
    seen = model.requests[1].messages
    assert [(m.role, m.text or m.tool_results[0].content) for m in seen[-2:]] == [
        ("tool", "see below"),
        ("user", "<doc>body</doc>"),
    ]
    assert run.trace.where("expanding")[1].detail == {"inserted": 1}


async def test_13_expanding_twice_inserts_once() -> None:
    model = ScriptedModel([call_tool("fetch_doc"), say("read")])
    run = start(model, fetch_doc)
    await run.run()
    looped = run.trace.where("deciding")[0].chain  # before the second expansion
    once = expand_tool_results(Continue(looped))
    twice = expand_tool_results(once)
    assert len(once.chain.messages) == len(looped.messages) + 1
    assert twice.chain.messages == once.chain.messages
    assert [m.text for m in run.chain.messages].count("<doc>body</doc>") == 1


async def test_14_an_interrupted_run_expands_nothing() -> None:
    @tool
    def ask_and_fetch() -> ToolOutput:
        """Ask a question; would expand."""
        return ToolOutput("?", interrupt={"question": "which?"})

    model = ScriptedModel([call_tools(("fetch_doc", {}), ("ask_and_fetch", {}))])
    run = start(model, fetch_doc, ask_and_fetch)
    result = await run.run()
    assert_path(run, "expanding calling interrupt_check executing propagating interrupted")
    assert isinstance(result, Interrupted)
    assert result.data["question"] == "which?"
    assert result.chain.last_message is not None and result.chain.last_message.role == "tool"
    assert result.chain.last_message.tool_results[0].expansion is not None


async def test_24_fallback_recorded_in_the_trace() -> None:
    primary = ScriptedModel([fail("rate_limited", "429")], model_name="primary")
    backup = ScriptedModel([say("hi")], model_name="backup")
    run = start(FallbackModel(primary, backup))  # type: ignore[arg-type]
    await run.run()
    (calling,) = run.trace.where("calling")
    assert calling.detail is not None
    assert calling.detail["model"] == "backup"
    assert calling.detail["fallback_errors"][0]["model"] == "primary"


async def test_25_all_models_fail_chain_intact() -> None:
    a = ScriptedModel([call_tool("add", a=1, b=1), fail("server_error", "a down")], model_name="a")
    b = ScriptedModel([fail("timeout", "b slow")], model_name="b")
    run = start(FallbackModel(a, b))  # type: ignore[arg-type]
    result = await run.run()
    assert_path(run, f"{LOOP} expanding calling error")
    assert isinstance(result, Failed) and result.error.type == "timeout"
    assert texts(result.chain) == [("user", "go"), ("assistant", "calls:add"), ("tool", "2")]


async def test_26_state_updates_merged_in_call_order() -> None:
    model = ScriptedModel(
        [
            call_tools(
                ("remember", {"key": "k", "value": 1}), ("remember", {"key": "k", "value": 2})
            ),
            say("ok"),
        ]
    )
    state = await agent(model, remember).execute(AgentState((Message.user("go"),), {"old": True}))
    assert state.state == {"old": True, "k": 2}


async def test_29_budget_checked_before_a_call() -> None:
    model = ScriptedModel([call_tool("search", q="x"), call_tool("submit", answer="y")])
    run = start(model, search, submit, until_tool="submit", max_runs=2)
    result = await run.run()
    assert_path(run, f"{LOOP} {LOOP.removesuffix(' deciding')} ok")
    assert isinstance(result, Ok) and result.tool_result is not None
    assert result.tool_result.content == "submitted y"


async def test_33_truncated_reply_runs_no_tools() -> None:
    ran: list[str] = []

    @tool
    def act() -> str:
        """Act."""
        ran.append("x")
        return "x"

    cut = call_tool("act")
    from attrs import evolve

    run = start(ScriptedModel([evolve(cut, status="length")]), act)
    result = await run.run()
    assert_path(run, "expanding calling error")
    assert isinstance(result, Failed) and result.error.type == "response_truncated"
    assert ran == []


async def test_34_resume_a_paused_run_executes_its_tools() -> None:
    model = ScriptedModel([call_tool("add", a=2, b=3), say("5")])
    a = agent(model)
    paused = await a.execute(AgentState.of("go"), should_pause=lambda: True)
    assert paused.status == "paused"
    assert paused.messages[-1].is_tool_call
    run = a.start(paused)
    assert run.state == "interrupt_check"
    await run.run()
    assert_path(run, f"interrupt_check executing propagating until_check deciding {LOOP} ok")
    assert texts(run.chain)[-2:] == [("tool", "5"), ("assistant", "5")]
    assert model.calls == 2


async def test_35_nested_state_updates_and_tool_context() -> None:
    @tool
    def put(part: str, value: int) -> ToolOutput:
        """Put a value."""
        return ToolOutput("ok", state_updates={"a": {part: value}})

    seen: list[Any] = []

    @tool
    def read_state(ctx: ToolContext) -> str:
        """Read the agent state."""
        seen.append(dict(ctx.state))
        return "read"

    model = ScriptedModel(
        [
            call_tools(("put", {"part": "x", "value": 1}), ("put", {"part": "y", "value": 2})),
            call_tool("read_state"),
            say("done"),
        ]
    )
    state = await agent(model, put, read_state).execute(AgentState.of("go"))
    assert state.state == {"a": {"x": 1, "y": 2}}
    assert seen == [{"a": {"x": 1, "y": 2}}]


async def test_resumed_tool_results_enter_at_propagating() -> None:
    chain = chain_of(ScriptedModel([say("thanks")]), add)
    chain = chain.add_message(call_tool("add", a=1, b=1)).add_message(
        Message.tool([__import__("agentfsm").ToolResult("call_x", "add", "2")])
    )
    run = StandardMode().start(chain)
    await run.run()
    assert_path(run, f"propagating until_check deciding {LOOP} ok")


class TestRun:
    async def test_step_by_step_and_iteration(self) -> None:
        run = start(ScriptedModel([say("hi")]))
        first = await run.step()
        assert (first.source, first.trigger, first.dest) == ("expanding", "expanded", "calling")
        assert run.state == "calling" and not run.done
        rest = [t async for t in run]
        assert [t.dest for t in rest][-1] == "ok"
        assert run.done and isinstance(run.result, Ok)
        with pytest.raises(RuntimeError, match="over"):
            await run.step()

    def test_sync_doors(self) -> None:
        run = start(ScriptedModel([call_tool("add", a=1, b=1), say("2")]))
        t = run.step_sync()
        assert t.dest == "calling"
        result = run.run_sync()
        assert isinstance(result, Ok)

    async def test_transitions_record_chain_and_detail(self) -> None:
        run = start(ScriptedModel([call_tool("add", a=1, b=1), say("2")]))
        await run.run()
        calling = run.trace.where("calling")[0]
        assert calling.detail == {"model": "scripted", "tool_calls": ["add"]}
        executing = run.trace.where("executing")[0]
        assert executing.detail == {"tools": ["add"], "errors": 0}
        assert (
            executing.chain.last_message is not None and executing.chain.last_message.role == "tool"
        )
        assert all(t.elapsed >= 0 for t in run.trace)

    async def test_many_runs_share_one_machine_concurrently(self) -> None:
        async def one(n: int) -> Any:
            async def script(messages: Any) -> Any:
                await asyncio.sleep(0.001 * (n % 5))
                if len(messages) < 2 * (n % 4) + 1:
                    return call_tool("add", a=n, b=1)
                return say(f"done {n}")

            run = start(ScriptedModel(script))
            await run.run()
            return n, run

        before = registered_runs(STANDARD)
        results = await asyncio.gather(*(one(n) for n in range(100)))
        for n, run in results:
            assert matches_path(run, f"({LOOP} ){{{n % 4 + 1}}}ok")
            assert run.chain.last_message.text == f"done {n}"
        assert registered_runs(STANDARD) == before

    async def test_a_step_that_raises_ends_in_error(self) -> None:
        def broken(result: Any, opts: Any) -> Any:
            raise KeyError("bug")

        run = start(ScriptedModel([say("x")]), extra_steps={"expanding": [broken]})
        result = await run.run()
        assert_path(run, "expanding error")
        assert isinstance(result, Failed) and result.error.type == "step_error"
        assert "KeyError" in result.error.message

    async def test_an_illegal_move_raises(self) -> None:
        def satisfied_too_early(result: Any, opts: Any) -> Any:
            return Interrupted(result.chain, {})

        run = start(ScriptedModel([say("x")]), extra_steps={"expanding": [satisfied_too_early]})
        with pytest.raises(IllegalTransitionError, match="expanding"):
            await run.step()

    async def test_cancelled_mid_tool_pauses_with_the_chain_kept(self) -> None:
        @tool
        async def slow() -> str:
            """Slow."""
            await asyncio.sleep(10)
            return "late"

        run = start(ScriptedModel([call_tool("slow")]), slow)
        task = asyncio.create_task(run.run())
        while run.state != "executing":
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert_path(run, "expanding calling interrupt_check executing paused")
        assert isinstance(run.result, Paused)
        assert run.agent_state.pause_reason == "cancelled"
        assert run.agent_state.messages[-1].is_tool_call

    async def test_request_pause(self) -> None:
        run = start(ScriptedModel([say("x")]))
        await run.step()
        run.request_pause("draining")
        await run.run()
        assert_path(run, "expanding calling paused")
        assert run.agent_state.pause_reason == "draining"


async def test_errors_of_the_model_end_in_error() -> None:
    run = start(ScriptedModel([fail("authentication", "bad key")]))
    result = await run.run()
    assert_path(run, "expanding calling error")
    assert isinstance(result, Failed) and result.error.type == "authentication"
    assert run.agent_state.error == result.error


async def test_callback_errors_end_in_error_not_a_crash() -> None:
    def bad(*args: Any) -> None:
        raise RuntimeError("host bug")

    a = Agent(
        ScriptedModel([call_tool("add", a=1, b=1)]),
        [add],
        callbacks=[{"on_tool_execution_completed": bad}],
    )
    run = a.start(AgentState.of("go"))
    await run.run()
    assert_path(run, "expanding calling interrupt_check executing error")


async def test_boom_in_until_loop_counts_failures() -> None:
    model = ScriptedModel(lambda m: call_tool("boom"))
    run = start(model, boom, max_runs=10)
    result = await run.run()
    assert isinstance(result, Failed) and result.error.type == "exceeded_failure_count"
    assert model.calls == 3


def test_middleware_hooks() -> None:
    calls: list[str] = []

    class Note:
        def __init__(self, name: str) -> None:
            self.name = name

        def before_model(self, state: AgentState) -> AgentState:
            calls.append(f"before {self.name}")
            return state.add_user_message(f"note {self.name}")

        def after_model(self, state: AgentState) -> AgentState:
            calls.append(f"after {self.name}")
            return state

    class Gate:
        def after_model(self, state: AgentState) -> AgentState:
            calls.append("gate")
            return state.interrupt({"why": "review"})

    model = ScriptedModel([say("ok")])
    state = Agent(model, [add], middleware=[Note("a"), Gate(), Note("b")]).execute_sync(
        AgentState.of("go")
    )
    assert calls == ["before a", "before b", "after b", "gate"]
    assert state.status == "interrupted" and state.interrupt_data == {"why": "review"}
    assert [m.text for m in model.requests[0].messages] == ["go", "note a", "note b"]


def test_system_prompt_is_sent_but_not_kept() -> None:
    model = ScriptedModel([say("ok")])
    state = Agent(model, [add], system_prompt="be brief").execute_sync(AgentState.of("go"))
    assert model.requests[0].messages[0] == Message.system("be brief")
    assert [m.role for m in state.messages] == ["user", "assistant"]


def test_edge_coverage_counts_runs() -> None:
    with edge_coverage() as coverage:
        start(ScriptedModel([say("hi")])).run_sync()
    assert len(coverage.counts) == 7
    assert any(e.trigger == "satisfied" for e in coverage.missing)


def test_assert_path_diff_is_readable() -> None:
    run = start(ScriptedModel([say("hi")]))
    run.run_sync()
    with pytest.raises(AssertionError) as info:
        assert_path(run, "expanding calling error")
    text = str(info.value)
    assert "expanding --expanded--> calling" in text and "- error" in text and "+ ok" in text
    with pytest.raises(ValueError, match="not a state"):
        assert_path(run, "expanding callin")
    assert matches_path(run, f"({LOOP})+ ok")


def test_chain_without_system_prompt_entry_expanding() -> None:
    chain = LLMChain(ScriptedModel([say("x")]), messages=[Message.user("u")])
    assert StandardMode().start(chain).state == "expanding"


async def test_a_steps_usage_is_its_details_and_the_trace_sums_them() -> None:
    """Usage is kept apart from the detail (built when read), and agrees with it."""
    counted = {"input_tokens": 7, "output_tokens": 2}
    replies = [
        Message.assistant(
            None, [ToolCall("c1", "add", {"a": 1, "b": 2})], metadata={"usage": counted}
        ),
        Message.assistant("done", metadata={"usage": counted}),
    ]
    run = StandardMode().start(chain_of(ScriptedModel(replies), add))
    await run.run()
    calls = run.trace.where("calling")
    assert [t.usage for t in calls] == [counted, counted]
    assert run.trace.usage.input_tokens == 14 and run.trace.usage.output_tokens == 4
    for transition in run.trace:
        assert transition.usage == (transition.detail or {}).get("usage")
    assert calls[0].detail == {"model": "scripted", "tool_calls": ["add"], "usage": counted}
