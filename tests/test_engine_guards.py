"""What the engine promises each step and each host, one promise a test.

Options reach every step of every shape of state; a step's crash is a final
``step_error``; a run is busy only while a state works; a pause keeps its reason;
an empty or whitespace reply is ``empty_response``; the executing state records its
errors; a run's listeners and observers hear every move.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import attrs
import pytest

from agentfsm import (
    Agent,
    AgentState,
    ContentPart,
    Edge,
    Failed,
    IllegalTransitionError,
    Interrupted,
    LLMChain,
    MachineTable,
    Message,
    Ok,
    Options,
    Run,
    ToolCall,
    ToolContext,
    ToolResult,
    UnknownMachineError,
    tool,
)
from agentfsm._machine import machine_named
from agentfsm._modes.langchain import WhileNeedsResponse
from agentfsm._steps import continue_or_done, ensure_mode_state, pipe, run_tool_calls
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say
from agentfsm.steps import (
    Continue,
    PipelineResult,
    call_llm,
    check_max_runs,
    check_response_complete,
    check_until_tool,
    execute_tools,
)
from tests.support import LOOP, add, boom, chain_of

# ---------------------------------------------------------------- options in every step shape

SEEN: list[tuple[str, Any]] = []


def _sync(label: str) -> Any:
    def sync_step(result: PipelineResult, opts: Any = None) -> PipelineResult:
        SEEN.append((label, opts))
        return result

    return sync_step


def _async(label: str) -> Any:
    async def async_step(result: PipelineResult, opts: Any = None) -> PipelineResult:
        await asyncio.sleep(0)
        SEEN.append((label, opts))
        return result

    return async_step


def _done(result: PipelineResult, opts: Any = None) -> PipelineResult:
    SEEN.append(("done", opts))
    return Ok(result.chain) if isinstance(result, Continue) else result


SHAPES = MachineTable(
    name="guards_step_shapes",
    steps={
        "one_sync": (_sync("one_sync"),),
        "one_async": (_async("one_async"),),
        "sync_first": (_sync("sync_first.1"), _async("sync_first.2"), _sync("sync_first.3")),
        "async_first": (_async("async_first.1"), _sync("async_first.2"), _async("async_first.3")),
        "all_sync": (_sync("all_sync.1"), _sync("all_sync.2"), _done),
    },
    terminals=("ok", "paused", "error"),
    entries={"fresh": "one_sync"},
    edges=(
        Edge("one_sync", "one_async", on=Continue, trigger="first", why="one sync step ran"),
        Edge("one_async", "sync_first", on=Continue, trigger="second", why="one async step ran"),
        Edge("sync_first", "async_first", on=Continue, trigger="third", why="sync, then async"),
        Edge("async_first", "all_sync", on=Continue, trigger="fourth", why="async, then sync"),
        Edge("all_sync", "ok", on=Ok, trigger="finish", why="every shape ran"),
    ),
)


async def test_every_step_of_every_shape_of_state_gets_the_runs_options() -> None:
    SEEN.clear()
    run = Run(SHAPES, chain_of(ScriptedModel([])), "one_sync", {"max_runs": 3, "drafts": 2})
    await run.run()
    assert [label for label, _ in SEEN] == [
        "one_sync",
        "one_async",
        "sync_first.1",
        "sync_first.2",
        "sync_first.3",
        "async_first.1",
        "async_first.2",
        "async_first.3",
        "all_sync.1",
        "all_sync.2",
        "done",
    ]
    assert all(opts is run.opts for _, opts in SEEN), SEEN
    assert run.opts.max_runs == 3 and run.opts["drafts"] == 2


async def test_extra_steps_of_a_run_get_its_options_too() -> None:
    SEEN.clear()
    run = Run(
        SHAPES,
        chain_of(ScriptedModel([])),
        "one_sync",
        {"max_runs": 3},
        extra_steps={"one_sync": [_async("extra.1"), _sync("extra.2")]},
    )
    await run.run()
    assert [label for label, _ in SEEN][:3] == ["one_sync", "extra.1", "extra.2"]
    assert all(opts is run.opts for _, opts in SEEN)
    assert list(run.opts.extra_steps) == ["one_sync"]


async def test_a_multi_step_state_reads_max_runs_after_a_sync_first_step() -> None:
    """``deciding`` of the while_needs_response machine is check_needs_response, then
    check_max_runs: the second step must read the run's max_runs, not the default 25."""
    model = ScriptedModel(lambda messages: call_tool("add", a=1, b=1))
    result = await WhileNeedsResponse().run(chain_of(model, add), {"max_runs": 2})
    assert isinstance(result, Failed) and result.error.type == "exceeded_max_runs"
    assert result.error.message == "Exceeded maximum number of runs (2/2)"
    assert model.calls == 2


async def _custom_mode(chain: LLMChain, opts: Any = None) -> PipelineResult:
    """A mode written as the steps module shows: a pipe, then continue_or_done."""
    chain = ensure_mode_state(chain)
    result = await pipe(Continue(chain), call_llm, execute_tools, check_max_runs, opts=opts)
    return await continue_or_done(result, _custom_mode, opts)


@pytest.mark.parametrize("opts", [{"max_runs": 3}, Options(max_runs=3)])
async def test_a_custom_mode_keeps_its_max_runs_through_continue_or_done(opts: Any) -> None:
    model = ScriptedModel(lambda messages: call_tool("add", a=1, b=1))
    result = await _custom_mode(chain_of(model, add), opts)
    assert isinstance(result, Failed) and result.error.type == "exceeded_max_runs"
    assert result.error.message == "Exceeded maximum number of runs (3/3)"
    assert model.calls == 3


async def test_continue_or_done_hands_the_options_over_and_ends_a_settled_chain() -> None:
    given: list[Any] = []

    async def again(chain: LLMChain, opts: Any = None) -> PipelineResult:
        given.append(opts)
        return Ok(chain)

    opts = Options(max_runs=7)
    needs = chain_of(ScriptedModel([]))
    assert isinstance(await continue_or_done(Continue(needs), again, opts), Ok)
    assert given == [opts] and given[0] is opts
    settled = needs.add_message(say("done"))
    result = await continue_or_done(Continue(settled), again, opts)
    assert isinstance(result, Ok) and result.chain is settled and len(given) == 1
    failed = Failed(settled, None)  # type: ignore[arg-type]
    assert await continue_or_done(failed, again, opts) is failed


# ---------------------------------------------------------------- a step's crash


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_step_that_raises_ends_the_run_in_a_final_step_error(kind: str) -> None:
    def broken(result: PipelineResult, opts: Any = None) -> PipelineResult:
        raise KeyError("bug")

    async def broken_async(result: PipelineResult, opts: Any = None) -> PipelineResult:
        raise KeyError("bug")

    step = broken if kind == "sync" else broken_async
    model = ScriptedModel([say("x")])
    run = Agent(model, [add]).start(AgentState.of("go"), extra_steps={"interrupt_check": [step]})
    await run.run()
    assert run.trace.path == "expanding calling interrupt_check error"
    assert run.trace.triggers == ["expanded", "called", "failed"]
    error = run.agent_state.error
    assert error is not None
    assert (error.type, error.retryable) == ("step_error", False)
    assert error.message == "The interrupt_check step raised KeyError: 'bug'"
    assert [m.text for m in run.agent_state.messages] == ["go", "x"]  # the reply is kept
    assert not run.busy


async def test_a_step_returning_no_result_is_a_step_error_naming_it() -> None:
    def wrong(result: PipelineResult, opts: Any = None) -> Any:
        return 42

    run = Agent(ScriptedModel([say("x")]), [add]).start(
        AgentState.of("go"), extra_steps={"calling": [wrong]}
    )
    await run.run()
    error = run.agent_state.error
    assert error is not None and error.type == "step_error" and not error.retryable
    assert error.message == (
        "The calling step raised TypeError: the step "
        "test_a_step_returning_no_result_is_a_step_error_naming_it.<locals>.wrong returned "
        "int, not a pipeline result (Continue, Ok, Paused, Interrupted or Failed)"
    )


async def test_a_result_with_no_edge_out_is_an_illegal_transition() -> None:
    def interrupts(result: PipelineResult, opts: Any = None) -> PipelineResult:
        return Interrupted(result.chain, {"why": "no edge for it"})

    run = Run(SHAPES, chain_of(ScriptedModel([])), "all_sync", extra_steps={})
    run._work = {**run._work, "all_sync": interrupts}
    with pytest.raises(IllegalTransitionError) as raised:
        await run.step()
    assert str(raised.value) == (
        "The all_sync step returned Interrupted, which is not a way out of 'all_sync': the "
        "guards_step_shapes machine has no edge on it from there."
    )


# ---------------------------------------------------------------- busy, pause, stepping


async def test_a_run_is_busy_only_while_a_state_works() -> None:
    seen: list[bool] = []
    holder: list[Run] = []

    @tool
    async def probe() -> str:
        """Report whether the run is busy."""
        seen.append(holder[0].busy)
        return "probed"

    run = Agent(ScriptedModel([call_tool("probe"), say("done")]), [probe]).start(
        AgentState.of("go")
    )
    holder.append(run)
    assert not run.busy
    busy_between: list[bool] = []
    async for _ in run:
        busy_between.append(run.busy)
    assert seen == [True]
    assert busy_between == [False] * len(run.trace)
    assert run.busy is False


async def test_a_cancelled_run_is_not_left_busy() -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Wait."""
        started.set()
        await asyncio.sleep(60)
        return "late"

    run = Agent(ScriptedModel([call_tool("slow")]), [slow]).start(AgentState.of("go"))
    task = asyncio.create_task(run.run())
    await asyncio.wait_for(started.wait(), 30)
    assert run.busy
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not run.busy and run.pause_reason == "cancelled"
    assert run.trace.transitions[-1].detail == {"cancelled": True}


async def test_a_requested_pause_is_taken_before_the_next_states_work() -> None:
    model = ScriptedModel([say("x")])
    run = Agent(model, [add]).start(AgentState.of("go"))
    await run.step()
    run.request_pause("operator")
    moved = await run.step()
    assert (moved.source, moved.trigger, moved.dest) == ("calling", "paused", "paused")
    assert moved.detail == {"requested": True}
    assert model.calls == 0 and not run.busy
    assert run.pause_reason == "operator" and run.agent_state.pause_reason == "operator"
    with pytest.raises(RuntimeError) as raised:
        await run.step()
    assert str(raised.value) == "The run is over (it ended in 'paused'); nothing to step."


@pytest.mark.parametrize(("answer", "reason"), [("over quota", "over quota"), (True, None)])
async def test_should_pause_keeps_its_reason(answer: Any, reason: str | None) -> None:
    model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    run = Agent(model, [add]).start(AgentState.of("go"), should_pause=lambda: answer)
    await run.run()
    assert run.trace.path == "expanding calling paused"
    assert run.trace.triggers == ["expanded", "paused"]
    assert run.pause_reason == reason
    state = run.agent_state
    assert state.status == "paused" and state.pause_reason == reason
    assert [m.role for m in state.messages] == ["user", "assistant"]  # the reply is kept


async def test_should_pause_false_goes_on() -> None:
    run = Agent(ScriptedModel([say("3")]), [add]).start(
        AgentState.of("go"), should_pause=lambda: False
    )
    await run.run()
    assert run.trace.path == f"{LOOP} ok" and run.pause_reason is None


def test_a_run_starts_only_in_a_working_state() -> None:
    with pytest.raises(ValueError) as raised:
        Run(SHAPES, chain_of(ScriptedModel([])), "ok")
    assert str(raised.value) == (
        "A run starts in a working state of the guards_step_shapes machine, not 'ok'; working "
        "states: ['one_sync', 'one_async', 'sync_first', 'async_first', 'all_sync']"
    )


# ---------------------------------------------------------------- replies and tool turns


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
async def test_an_empty_or_whitespace_reply_is_an_empty_response(text: str) -> None:
    run = Agent(ScriptedModel([say(text)]), [add]).start(AgentState.of("go"))
    await run.run()
    assert run.trace.path == "expanding calling error"
    error = run.agent_state.error
    assert error is not None and error.type == "empty_response"
    assert error.message.startswith("The model returned an empty reply (no text and no tool calls)")


async def test_a_reply_of_an_image_alone_is_a_reply() -> None:
    image = Message.assistant([ContentPart("image_url", "https://example.com/chart.png")])
    run = Agent(ScriptedModel([image]), [add]).start(AgentState.of("draw it"))
    await run.run()
    assert run.trace.path == f"{LOOP} ok"
    assert run.agent_state.status == "ok"


async def test_executing_records_every_tool_and_every_error_of_its_turn() -> None:
    reply = call_tools(("boom", {}), ("add", {"a": 1, "b": 2}), ("nope", {}), ("boom", {}))
    run = Agent(ScriptedModel([reply, say("done")]), [add, boom]).start(AgentState.of("go"))
    await run.run()
    first, last = run.trace.where("executing")
    assert first.detail == {"tools": ["boom", "add", "nope", "boom"], "errors": 3}
    assert last.detail is None  # no calls were pending: nothing ran
    assert first.chain.current_failure_count == 1  # one failed turn, however many failed in it


# ---------------------------------------------------------------- listeners and observers


async def test_hooks_hear_every_move_and_global_hooks_every_run() -> None:
    from agentfsm._hooks import global_hooks

    runs: list[Run] = []

    class Starts:
        def run_started(self, run: Run) -> None:
            runs.append(run)

    heard: list[tuple[Run, str, bool]] = []

    class Moves:
        def transition(self, run: Run, transition: Any) -> None:
            heard.append((run, transition.dest, run.done))

    with global_hooks(Starts()):
        run = Agent(ScriptedModel([say("x")]), [add]).start(AgentState.of("go"))
    assert runs == [run]
    run.add_hook(Moves())
    await run.run()
    assert [dest for _, dest, _ in heard] == run.trace.states[1:]
    assert all(r is run for r, _, _ in heard)
    assert [done for _, _, done in heard] == [False] * (len(heard) - 1) + [True]


def test_a_reply_message_is_recorded_in_the_chain_each_transition_carries() -> None:
    run = Agent(ScriptedModel([say("x")]), [add]).start(AgentState.of("go"))
    run.run_sync()
    chains = [t.chain for t in run.trace]
    assert [len(c.messages) for c in chains] == [1, 2, 2, 2, 2, 2, 2]
    assert chains[-1] is run.chain
    assert isinstance(run.chain.last_message, Message)


# ---------------------------------------------------------------- what steps record and say


async def test_calling_records_the_model_its_calls_and_its_usage() -> None:
    reply = attrs.evolve(
        call_tool("add", a=1, b=2), metadata={"usage": {"input_tokens": 5, "output_tokens": 2}}
    )
    run = Agent(ScriptedModel([reply, say("3")]), [add]).start(AgentState.of("go"))
    await run.run()
    first, second = run.trace.where("calling")
    assert first.detail == {
        "model": "scripted",
        "tool_calls": ["add"],
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }
    assert second.detail == {"model": "scripted", "tool_calls": []}


async def test_a_state_with_extra_steps_keeps_recording_its_detail() -> None:
    seen: list[Any] = []

    def watch(result: PipelineResult, opts: Any = None) -> PipelineResult:
        seen.append(opts)
        return result

    run = Agent(ScriptedModel([say("3")]), [add]).start(
        AgentState.of("go"), extra_steps={"calling": [watch]}
    )
    await run.run()
    (called,) = run.trace.where("calling")
    assert called.detail == {"model": "scripted", "tool_calls": []}
    assert seen == [run.opts]


async def test_the_model_is_offered_the_chains_tools() -> None:
    model = ScriptedModel([say("3")])
    await Agent(model, [add, boom]).execute(AgentState.of("go"))
    (request,) = model.requests
    assert [t.name for t in request.tools] == ["add", "boom"]
    assert [m.text for m in request.messages] == ["go"]


async def test_a_streamed_reply_without_callbacks_streams_to_no_one() -> None:
    state = await Agent(ScriptedModel([say("two words")], stream=True), []).execute(
        AgentState.of("go")
    )
    assert state.status == "ok" and state.messages[-1].text == "two words"


class _Replying:
    """A model whose reply is ``reply``, whatever it is."""

    name = "replying"

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    async def complete(self, messages: Any, tools: Any, on_delta: Any = None) -> Any:
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


@pytest.mark.parametrize("reply", ["just text", Message.user("a user message")])
async def test_a_reply_that_is_no_assistant_message_is_an_invalid_response(reply: Any) -> None:
    chain = chain_of(ScriptedModel([]))
    chain = attrs.evolve(chain, llm=_Replying(reply))
    result = await call_llm(Continue(chain))
    assert isinstance(result, Failed) and result.chain is chain
    assert result.error.type == "invalid_response"
    assert result.error.message == f"The model returned {reply!r}, not an assistant Message"


async def test_a_provider_bug_is_a_final_model_error() -> None:
    chain = attrs.evolve(chain_of(ScriptedModel([])), llm=_Replying(KeyError("choices")))
    result = await call_llm(Continue(chain))
    assert isinstance(result, Failed) and result.chain is chain
    assert (result.error.type, result.error.message) == ("model_error", "KeyError: 'choices'")
    assert result.error.retryable is False


async def test_call_llm_counts_into_a_mode_state_without_a_count() -> None:
    chain = chain_of(ScriptedModel([say("x"), say("y")]))
    chain = chain.update_custom_context({"mode_state": {"drafts": 2}})
    result = await call_llm(Continue(chain))
    assert result.chain.custom_context["mode_state"] == {"drafts": 2, "run_count": 1}
    again = await call_llm(Continue(result.chain.add_message(Message.user("more"))))
    assert again.chain.custom_context["mode_state"] == {"drafts": 2, "run_count": 2}


@pytest.mark.parametrize(
    ("reply", "kind", "message"),
    [
        (
            say("half", status="length"),
            "response_truncated",
            "The model's reply was cut off at its token limit; its tool calls were not run. "
            "Raise the model's max_tokens or ask for a shorter answer.",
        ),
        (
            say("", status="filtered"),
            "content_filtered",
            "The provider's content filter stopped the model's reply; its tool calls were not run.",
        ),
        (
            say(""),
            "empty_response",
            "The model returned an empty reply (no text and no tool calls). Retry the run, or "
            "give the model a fallback (agentfsm.providers.FallbackModel).",
        ),
    ],
)
def test_an_incomplete_reply_fails_with_its_message(
    reply: Message, kind: str, message: str
) -> None:
    chain = chain_of(ScriptedModel([])).add_message(reply)
    result = check_response_complete(Continue(chain))
    assert isinstance(result, Failed) and result.chain is chain
    assert (result.error.type, result.error.message) == (kind, message)


@pytest.mark.parametrize("last", [Message.user("go"), None])
def test_response_checks_leave_a_chain_without_a_reply_alone(last: Message | None) -> None:
    chain = LLMChain(ScriptedModel([]))
    if last is not None:
        chain = chain.add_message(last)
    start = Continue(chain)
    assert check_response_complete(start) is start


def test_a_tool_message_passes_the_response_checks() -> None:
    chain = chain_of(ScriptedModel([])).add_message(call_tool("add", a=1, b=2))
    chain = chain.add_message(Message.tool([ToolResult("c", "add", "3")]))
    start = Continue(chain)
    assert check_response_complete(start) is start


# ---------------------------------------------------------------- tables: names, reprs, paths


def test_an_unknown_machine_name_says_how_to_find_it() -> None:
    with pytest.raises(UnknownMachineError) as raised:
        machine_named("nowhere_declared")
    message = str(raised.value)
    assert message.startswith("No machine named 'nowhere_declared' is declared in this process")
    assert message.endswith(
        "Import the module that declares it before loading or resuming runs made on it."
    )


def test_the_standard_machine_lives_with_its_mode_only() -> None:
    from agentfsm import STANDARD
    from agentfsm import _machine as machine_module

    assert not hasattr(machine_module, "STANDARD")
    assert STANDARD.name == "standard"


def test_an_edge_reads_back_as_written() -> None:
    one = Edge("a", "b", on=Ok, trigger="go", why="because")
    assert repr(one) == "Edge('a', 'b', on=Ok, trigger='go', why='because')"
    two = Edge(("a", "c"), "b", on=Failed, trigger="go", why="because")
    assert repr(two) == "Edge(('a', 'c'), 'b', on=Failed, trigger='go', why='because')"
    odd = Edge("a", "b", on="nothing", trigger="go", why="because")  # type: ignore[arg-type]
    assert repr(odd) == "Edge('a', 'b', on=nothing, trigger='go', why='because')"
    with pytest.raises(ValueError) as raised:
        _ = two.source
    assert str(raised.value) == f"{two!r} leaves 2 states; a table holds one edge per source"


def test_a_derived_table_keeps_its_options_class() -> None:
    from agentfsm import STANDARD, StandardOptions

    derived = STANDARD.replace("deciding", STANDARD.steps["deciding"], name="guards_same_options")
    assert derived.options is StandardOptions
    inserted = SHAPES.insert("extra_state", (_sync("x"),), after="one_sync", name="guards_inserted")
    assert inserted.options is Options


def test_is_path_refuses_triggers_that_do_not_match_the_states_in_number() -> None:
    from agentfsm import STANDARD

    assert STANDARD.is_path(["expanding", "calling", "error"], ["expanded", "failed"])
    with pytest.raises(ValueError):
        STANDARD.is_path(["expanding", "calling", "error"], ["expanded"])


# ---------------------------------------------------------------- a run's clock and budget


def test_a_transitions_elapsed_time_is_its_states_work() -> None:
    run = Agent(ScriptedModel([say("x")]), [add]).start(AgentState.of("go"))
    assert run.busy is False
    for _ in range(3):
        before = time.perf_counter()
        moved = run.step_sync()
        after = time.perf_counter()
        assert 0 <= moved.elapsed <= after - before
        assert run.busy is False
    assert repr(run) == "<Run standard state='executing' steps=3>"


def _calls_first(result: PipelineResult, opts: Any = None) -> PipelineResult:
    if isinstance(result, Continue) and not result.chain.needs_response:
        return Ok(result.chain)
    return result


CALLS_FIRST = MachineTable(
    name="guards_calls_first",
    steps={"calling": (call_llm,), "executing": (execute_tools,), "deciding": (_calls_first,)},
    terminals=("ok", "paused", "error"),
    entries={"fresh": "calling"},
    edges=(
        Edge("calling", "executing", on=Continue, trigger="called", why="the model replied"),
        Edge("executing", "deciding", on=Continue, trigger="executed", why="the tools ran"),
        Edge("deciding", "calling", on=Continue, trigger="loop", why="a response is needed"),
        Edge("deciding", "ok", on=Ok, trigger="done", why="no response is needed"),
    ),
)


async def test_the_budget_counts_the_first_transition_of_a_run_too() -> None:
    """A machine whose entry calls the model: its first move carries usage, and counts."""
    usage = {"input_tokens": 30, "output_tokens": 10}
    script = [attrs.evolve(call_tool("add", a=i, b=1), metadata={"usage": usage}) for i in range(4)]
    model = ScriptedModel([*script, say("done")])
    run = Run(CALLS_FIRST, chain_of(model, add), "calling", {"token_budget": 100})
    result = await run.run()
    assert isinstance(result, Failed) and result.error.type == "exceeded_token_budget"
    assert model.calls == 3
    assert result.error.details["usage"] == {"input_tokens": 90, "output_tokens": 30}


# ---------------------------------------------------------------- steps of every kind


class _Future:
    """An awaitable that is no coroutine (a future, say), resolving to ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Any:
        yield from asyncio.sleep(0).__await__()
        return self.value


class _Callable:
    """A step that is an object with ``__call__``: no ``__qualname__`` of its own."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, result: PipelineResult, opts: Any = None) -> Any:
        return self.value

    def __repr__(self) -> str:
        return "<a callable step>"


def _run_with(*steps: Any) -> Run:
    table = SHAPES.replace("all_sync", steps, name=f"guards_steps_{len(_TABLES)}")
    _TABLES.append(table)
    return Run(table, chain_of(ScriptedModel([])), "all_sync")


_TABLES: list[MachineTable] = []


async def test_a_step_may_return_any_awaitable() -> None:
    def later(result: PipelineResult, opts: Any = None) -> Any:
        return _Future(Ok(result.chain))

    run = _run_with(_sync("before"), later)
    assert isinstance(await run.run(), Ok)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: _Callable(42), "<a callable step>"),
        (lambda: _Callable(_Future(42)), "<a callable step>"),
    ],
)
async def test_a_step_that_gives_no_result_is_named_in_the_error(make: Any, name: str) -> None:
    for steps in ((make(),), (_sync("first"), make())):
        run = _run_with(*steps)
        result = await run.run()
        assert isinstance(result, Failed) and result.error.type == "step_error"
        assert result.error.message == (
            f"The all_sync step raised TypeError: the step {name} returned int, not a "
            "pipeline result (Continue, Ok, Paused, Interrupted or Failed)"
        )


async def test_an_async_step_returning_no_result_is_named() -> None:
    async def forty_two(result: PipelineResult, opts: Any = None) -> Any:
        return 42

    for steps in ((forty_two,), (_sync("first"), forty_two), (forty_two, _sync("never"))):
        result = await _run_with(*steps).run()
        assert isinstance(result, Failed)
        assert result.error.message == (
            "The all_sync step raised TypeError: the step "
            "test_an_async_step_returning_no_result_is_named.<locals>.forty_two returned int, "
            "not a pipeline result (Continue, Ok, Paused, Interrupted or Failed)"
        )


async def test_a_later_step_returning_no_result_after_an_async_one_is_named() -> None:
    result = await _run_with(_async("first"), _Callable(42)).run()
    assert isinstance(result, Failed)
    assert "the step <a callable step> returned int, not a pipeline result" in (
        result.error.message
    )


async def test_a_text_reply_resets_the_failure_count_with_callbacks_too() -> None:
    heard: list[int] = []
    chain = LLMChain(
        ScriptedModel([say("ok then")]),
        callbacks=[{"on_llm_new_message": lambda c, m: heard.append(c.current_failure_count)}],
    ).add_message(Message.user("go"))
    chain = chain.add_message(Message.assistant("thinking"), current_failure_count=2)
    chain = chain.add_message(Message.user("go on"))
    result = await call_llm(Continue(chain))
    assert result.chain.current_failure_count == 0 and heard == [0]


# ---------------------------------------------------------------- tools of a turn


async def test_a_blank_text_part_is_an_empty_response_too() -> None:
    blank = Message.assistant([ContentPart.text("  "), ContentPart.text("\n")])
    run = Agent(ScriptedModel([blank]), [add]).start(AgentState.of("go"))
    await run.run()
    assert run.trace.path == "expanding calling error"
    assert run.agent_state.error is not None
    assert run.agent_state.error.type == "empty_response"


async def test_a_tool_reads_the_runs_context_and_its_call_id() -> None:
    seen: list[tuple[Any, ...]] = []

    @tool
    def look(context: ToolContext) -> str:
        """Look at what the run carries."""
        seen.append(
            (dict(context.state), context.custom_context.get("tenant"), context.tool_call_id)
        )
        return "looked"

    chain = chain_of(ScriptedModel([]), look)
    chain = chain.update_custom_context({"tenant": "acme", "state": {"k": 1}})
    (result,) = await run_tool_calls(chain, [ToolCall("c9", "look", {})])
    assert result.content == "looked"
    assert seen == [({"k": 1}, "acme", "c9")]


async def test_a_sync_tool_with_a_timeout_runs_beside_the_async_tools_of_its_turn() -> None:
    """It runs in a thread, gathered with the async calls: an async call made after it
    starts while it still runs (run in turn, it would wait for a start that never came)."""
    async_started = threading.Event()

    @tool(timeout=30)
    def waits() -> str:
        """Wait for the async tool to start."""
        return "together" if async_started.wait(10) else "alone"

    @tool
    async def starts() -> str:
        """Start."""
        async_started.set()
        return "started"

    chain = chain_of(ScriptedModel([]), waits, starts)
    results = await run_tool_calls(chain, [ToolCall("1", "waits", {}), ToolCall("2", "starts", {})])
    assert [r.content for r in results] == ["together", "started"]


# ---------------------------------------------------------------- steps on the edges of their input


def test_steps_that_read_the_last_message_pass_a_chain_without_one() -> None:
    from agentfsm._steps import pending_calls
    from agentfsm.steps import expand_tool_results, propagate_state

    start = Continue(LLMChain(ScriptedModel([])))
    assert pending_calls(None) == ()
    assert expand_tool_results(start) is start
    assert propagate_state(start) is start
    assert check_until_tool(start, {"tool_names": ["submit"]}) is start


def test_an_interrupting_result_keeps_its_expansion_while_others_expand() -> None:
    from agentfsm import MessageExpansion
    from agentfsm.steps import expand_tool_results

    note = Message.user("expanded note")
    secret = Message.user("not before approval")
    expanding = ToolResult(
        "c1", "read", "full text", expansion=MessageExpansion((note,), result_content="see below")
    )
    waiting = ToolResult(
        "c2",
        "ask",
        "asked",
        is_interrupt=True,
        interrupt_data={"type": "ask"},
        expansion=MessageExpansion((secret,)),
    )
    chain = chain_of(ScriptedModel([])).add_message(Message.tool([expanding, waiting]))
    result = expand_tool_results(Continue(chain))
    assert [m.text for m in result.chain.messages] == ["go", "", "expanded note"]
    tool_message = result.chain.messages[1]
    first, second = tool_message.tool_results
    assert (first.content, first.expansion) == ("see below", None)
    assert second == waiting  # an interrupt keeps its expansion for after the answer


def test_a_machine_and_table_out_of_step_is_an_illegal_transition() -> None:
    """The shared machine refusing a move its table lists: the run says so, naming both."""
    holder: list[Run] = []

    def moves_the_cursor(result: PipelineResult, opts: Any = None) -> PipelineResult:
        holder[0]._cursor.state = "ok"  # as if the run were moved behind its back
        return Ok(result.chain)

    run = _run_with(moves_the_cursor)
    holder.append(run)
    with pytest.raises(IllegalTransitionError) as raised:
        run.step_sync()
    assert str(raised.value) == (
        f"The all_sync step asked for 'finish', which the {run.table.name} machine does not "
        "have from 'all_sync': Ok is not a way out of this state."
    )


def test_expanding_records_what_it_inserted_with_extra_steps_too() -> None:
    from agentfsm import STANDARD, MessageExpansion

    expanding = ToolResult(
        "c1", "read", "full text", expansion=MessageExpansion((Message.user("a note"),))
    )
    chain = chain_of(ScriptedModel([])).add_message(call_tool("read", call_id="c1"))
    chain = chain.add_message(Message.tool([expanding]))
    for extra in ({}, {"expanding": [_sync("after expanding")]}):
        run = Run(STANDARD, chain, "expanding", extra_steps=extra)
        moved = run.step_sync()
        assert (moved.trigger, moved.detail) == ("expanded", {"inserted": 1})


async def test_a_step_that_empties_the_conversation_is_no_reply_to_count() -> None:
    """A step may drop every message (a compaction that starts over): nothing to count."""

    def forget(result: PipelineResult, opts: Any = None) -> PipelineResult:
        return Continue(LLMChain(result.chain.llm))

    run = _run_with(forget, _done)
    result = await run.run()
    assert isinstance(result, Ok) and result.chain.messages == ()
    assert run.trace.transitions[-1].detail is None
