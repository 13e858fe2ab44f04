"""What the engine promises each step and each host, one promise a test.

Options reach every step of every shape of state; a step's crash is a final
``step_error``; a run is busy only while a state works; a pause keeps its reason;
an empty or whitespace reply is ``empty_response``; the executing state records its
errors; a run's listeners and observers hear every move.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentfsm import Agent, AgentState, LLMChain, Message, tool
from agentfsm.errors import IllegalTransitionError
from agentfsm.machine import Edge, MachineTable
from agentfsm.messages import ContentPart
from agentfsm.modes.langchain import WhileNeedsResponse
from agentfsm.options import Options
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say
from agentfsm.results import Continue, Failed, Interrupted, Ok, PipelineResult
from agentfsm.run import Run
from agentfsm.steps import (
    call_llm,
    check_max_runs,
    continue_or_done,
    ensure_mode_state,
    execute_tools,
    pipe,
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
    run._work = {**run._work, "all_sync": lambda start, opts: (interrupts(start, opts), None)}
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


async def test_listeners_hear_every_move_and_observers_every_run() -> None:
    runs: list[Run] = []
    Run.observers.append(runs.append)
    try:
        run = Agent(ScriptedModel([say("x")]), [add]).start(AgentState.of("go"))
    finally:
        Run.observers.remove(runs.append)
    assert runs == [run]
    heard: list[tuple[Run, str, bool]] = []
    run.listeners.append(lambda r, t: heard.append((r, t.dest, r.done)))
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
