"""LLMChain.run: the built-in modes, fallbacks and callbacks (SPEC §6, §6b)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentfsm import (
    SINGLE_CALL,
    STEP,
    UNTIL_SUCCESS,
    UNTIL_TOOL_USED,
    WHILE_NEEDS_RESPONSE,
    ChainError,
    Failed,
    LLMChain,
    MachineTable,
    Message,
    MessageExpansion,
    Ok,
    Paused,
    Run,
    ToolCall,
    tool,
)
from agentfsm._cli._main import all_diagram_files
from agentfsm._machine import machine_named
from agentfsm._modes import (
    LANGCHAIN_MACHINES,
    SingleCall,
    Step,
    UntilSuccess,
    UntilToolUsed,
    WhileNeedsResponse,
)
from agentfsm.diagrams import paths
from agentfsm.providers import FallbackModel, ScriptedModel, call_tool, fail, say
from agentfsm.testing import edge_coverage
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


# ---------------------------------------------------------------- each mode is a machine


def _took(run: Run, states: str, triggers: str) -> None:
    """The run's exact path (states and triggers), and that it is a path of its table."""
    assert run.trace.states == states.split()
    assert run.trace.triggers == triggers.split()
    assert run.table.is_path(run.trace.states, run.trace.triggers)


class TestModesAreMachines:
    def test_each_table_is_declared_by_name_and_exported(self) -> None:
        tables = {
            "single_call": SINGLE_CALL,
            "step": STEP,
            "while_needs_response": WHILE_NEEDS_RESPONSE,
            "until_success": UNTIL_SUCCESS,
            "until_tool_used": UNTIL_TOOL_USED,
        }
        assert tuple(tables.values()) == LANGCHAIN_MACHINES
        for name, table in tables.items():
            assert isinstance(table, MachineTable) and table.name == name
            assert machine_named(name) is table
        classes = [SingleCall, Step, WhileNeedsResponse, UntilSuccess, UntilToolUsed]
        assert [c.table for c in classes] == list(LANGCHAIN_MACHINES)

    @pytest.mark.parametrize("table", LANGCHAIN_MACHINES, ids=lambda t: t.name)
    def test_paths_are_finite_and_paths_of_the_table(self, table: MachineTable) -> None:
        found = paths(table)
        assert found
        assert {p.terminal for p in found} == set(table.terminals)
        for path in found:
            assert table.is_path(path.states, path.triggers)

    async def test_single_call(self) -> None:
        model = ScriptedModel([call_tool("add", a=1, b=2)])
        run = SingleCall().start(chain_of(model, add))
        result = await run.run()
        assert isinstance(result, Ok) and run.result is result
        _took(run, "calling ok", "answered")
        assert "mode_state" not in result.chain.custom_context  # no run count

    async def test_single_call_failure(self) -> None:
        run = SingleCall().start(chain_of(ScriptedModel([fail("bad_request", "no")])))
        result = await run.run()
        assert isinstance(result, Failed) and result.error.type == "bad_request"
        _took(run, "calling error", "failed")

    async def test_step_once(self) -> None:
        run = Step().start(chain_of(ScriptedModel([call_tool("add", a=1, b=2)]), add))
        await run.run()
        _took(run, "stepping deciding ok", "stepped done")

    async def test_step_while_should_continue(self) -> None:
        model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])

        def again(chain: LLMChain) -> bool:
            return chain.needs_response

        run = Step().start(chain_of(model, add), {"should_continue": again})
        result = await run.run()
        assert isinstance(result, Ok)
        assert [t for _, t in texts(result.chain)] == ["go", "calls:add", "3", "3"]
        _took(
            run,
            "stepping deciding stepping deciding stepping deciding ok",
            "stepped loop stepped loop stepped done",
        )

    async def test_while_needs_response(self) -> None:
        model = ScriptedModel([call_tool("add", a=1, b=2), say("done")])
        run = WhileNeedsResponse().start(chain_of(model, add))
        result = await run.run()
        assert isinstance(result, Ok)
        lap = "deciding executing expanding calling"
        _took(
            run,
            f"{lap} {lap} deciding ok",
            "loop executed expanded called " * 2 + "done",
        )

    async def test_while_needs_response_max_runs(self) -> None:
        model = ScriptedModel(lambda messages: call_tool("add", a=1, b=1))
        run = WhileNeedsResponse().start(chain_of(model, add), {"max_runs": 1})
        result = await run.run()
        assert isinstance(result, Failed) and result.error.type == "exceeded_max_runs"
        _took(
            run,
            "deciding executing expanding calling deciding error",
            "loop executed expanded called failed",
        )

    async def test_until_success(self) -> None:
        model = ScriptedModel([call_tool("submit", answer="bad"), call_tool("submit", answer="ok")])
        run = UntilSuccess().start(chain_of(model, submit))
        result = await run.run()
        assert isinstance(result, Ok)
        lap = "checking calling executing"
        _took(run, f"{lap} {lap} checking ok", "retry called loop " * 2 + "succeeded")

    async def test_until_success_failure_limit(self) -> None:
        model = ScriptedModel(lambda m: call_tool("submit", answer="bad"))
        run = UntilSuccess().start(chain_of(model, submit))
        result = await run.run()
        assert isinstance(result, Failed) and result.error.type == "exceeded_failure_count"
        lap = "checking calling executing"
        _took(run, f"{lap} {lap} {lap} checking error", "retry called loop " * 3 + "failed")

    async def test_until_success_force_recurse_calls_first(self) -> None:
        model = ScriptedModel([say("again")])
        chain = (await chain_of(ScriptedModel([say("first")])).run()).chain
        chain = attrs.evolve(chain, llm=model)
        standing = UntilSuccess().start(chain)
        await standing.run()
        _took(standing, "checking ok", "succeeded")
        forced = UntilSuccess().start(chain, {"force_recurse": True})
        result = await forced.run()
        assert texts(result.chain)[-1] == ("assistant", "again")
        _took(forced, "calling executing checking ok", "called loop succeeded")

    async def test_until_tool_used(self) -> None:
        model = ScriptedModel([call_tool("add", a=1, b=1), call_tool("submit", answer="x")])
        run = UntilToolUsed("submit").start(chain_of(model, add, submit))
        result = await run.run()
        assert isinstance(result, Ok) and result.tool_result is not None
        lap = "expanding calling executing until_check"
        _took(
            run,
            f"checking_tools {lap} deciding {lap} ok",
            "checked expanded called executed unsatisfied loop expanded called executed satisfied",
        )
        assert run.opts["max_runs"] == 25 and run.opts.tool_names == ("submit",)

    async def test_until_tool_used_unknown_names_fail_in_the_machine(self) -> None:
        run = UntilToolUsed(["x", "y"]).start(chain_of(ScriptedModel([]), add))
        result = await run.run()
        assert isinstance(result, Failed)
        assert result.error == ChainError(
            "invalid_tool_name", "Tool names 'x, y' not found in available tools"
        )
        _took(run, "checking_tools error", "failed")

    def test_until_tool_used_needs_names_before_it_starts(self) -> None:
        with pytest.raises(ValueError, match="until_tool_used needs tool_names"):
            UntilToolUsed().start(chain_of(ScriptedModel([])))

    def test_a_host_steps_a_mode(self) -> None:
        model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
        run = WhileNeedsResponse().start(chain_of(model, add))
        assert run.state == "deciding" and not run.done
        first = run.step_sync()
        assert (first.source, first.trigger, first.dest) == ("deciding", "loop", "executing")
        assert model.calls == 0
        while run.state != "calling":
            run.step_sync()
        called = run.step_sync()
        assert called.dest == "deciding" and model.calls == 1
        assert isinstance(run.run_sync(), Ok)
        assert run.trace.terminal == "ok" and model.calls == 2

    def test_a_requested_pause_takes_the_paused_edge(self) -> None:
        run = UntilSuccess().start(chain_of(ScriptedModel([say("x")])))
        run.step_sync()
        run.request_pause("drain")
        run.step_sync()
        assert isinstance(run.result, Paused)
        assert run.result.chain.custom_context["pause_reason"] == "drain"
        _took(run, "checking calling paused", "retry paused")

    @pytest.mark.parametrize(
        ("mode", "table"),
        [
            (None, SINGLE_CALL),
            ("step", STEP),
            ("while_needs_response", WHILE_NEEDS_RESPONSE),
            ("until_success", UNTIL_SUCCESS),
            ("until_tool_used", UNTIL_TOOL_USED),
        ],
    )
    async def test_chain_run_goes_through_the_engine(
        self, mode: str | None, table: MachineTable
    ) -> None:
        model = ScriptedModel([call_tool("submit", answer="x"), say("done")])
        with edge_coverage(table) as coverage:
            result = await chain_of(model, submit).run(mode, tool_names=["submit"])
        assert isinstance(result, Ok)
        assert coverage.counts and sum(coverage.entries.values()) == 1

    def test_every_machine_has_its_diagrams(self) -> None:
        files = all_diagram_files(svg=False)
        for table in LANGCHAIN_MACHINES:
            for name in ("machine.mmd", "machine.md", "machine.dot", "paths.md"):
                assert f"{table.name}/{name}" in files
            assert f"from the {table.name} machine's table" in files[f"{table.name}/machine.md"]
        assert "machine.mmd" in files  # the standard machine's keep their names


def test_a_langchain_mode_run_checkpoints_and_is_restored_by_name(tmp_path: Any) -> None:
    """A mode's run is saved and resumed as any machine's: the store names its table."""
    from agentfsm.store import SQLiteStore, checkpoint, load_run

    store = SQLiteStore(tmp_path / "runs.db", lease=0)  # the abandoned run stands for a dead one
    model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    run = WhileNeedsResponse().start(chain_of(model, add), {"max_runs": 4})
    checkpoint(run, store, run_id="m1")
    for _ in range(3):  # deciding, executing, expanding: the model call is still to come
        run.step_sync()
    saved = load_run(store, "m1", models={model.name: model}, tools=[add])
    table = machine_named(saved.trace.machine)
    assert table is WhileNeedsResponse.table
    restored = Run(table, saved.chain, saved.state, {"max_runs": 4})
    restored.trace = saved.trace
    checkpoint(restored, store, saved=saved)
    result = restored.run_sync()
    assert isinstance(result, Ok) and result.chain.last_message is not None
    assert result.chain.last_message.text == "3"
    path = load_run(store, "m1", models={model.name: model}, tools=[add]).trace.states
    assert table.is_path(path) and path[-1] == "ok"
