"""The sync doors: one bridge, one loop per run, a clear refusal inside a running loop."""

from __future__ import annotations

import pytest

from agentfsm import Agent, AgentState
from agentfsm._sync import SyncBridge
from agentfsm.providers import ScriptedModel, say


class _ClosingModel(ScriptedModel):
    closed = 0

    async def aclose(self) -> None:
        type(self).closed += 1


def test_step_sync_keeps_one_loop_and_closes_the_model_once_at_the_end() -> None:
    _ClosingModel.closed = 0
    run = Agent(_ClosingModel([say("hi")])).start(AgentState.of("hello"))
    run.step_sync()
    assert _ClosingModel.closed == 0
    run.run_sync()
    assert _ClosingModel.closed == 1
    assert run.trace.path.endswith("deciding ok")


def test_execute_sync_closes_the_model() -> None:
    _ClosingModel.closed = 0
    state = Agent(_ClosingModel([say("hi")])).execute_sync(AgentState.of("hello"))
    assert (state.status, _ClosingModel.closed) == ("ok", 1)


async def test_a_sync_door_inside_a_running_loop_says_what_to_await() -> None:
    agent = Agent(ScriptedModel([say("hi")]))
    with pytest.raises(RuntimeError, match="await the async method instead"):
        agent.execute_sync(AgentState.of("hello"))
    run = agent.start(AgentState.of("hello"))
    with pytest.raises(RuntimeError, match=r"run\.step\(\)"):
        run.step_sync()
    assert (await run.run()) is run.result


class _Loud:
    """A result that counts how often it is formatted."""

    shown = 0

    def __repr__(self) -> str:
        type(self).shown += 1
        return "<loud>"


def test_the_bridge_never_formats_what_it_returns() -> None:
    """asyncio.Runner formats its main task when it restores the SIGINT handler; a task's
    repr holds its result's, which for a run is the whole conversation (O(K) per step)."""

    async def loud() -> _Loud:
        return _Loud()

    _Loud.shown = 0
    for _ in range(3):
        assert isinstance(SyncBridge().run(loud(), None), _Loud)
    assert _Loud.shown == 0
