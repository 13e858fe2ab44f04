"""The design-floor ladder of ``benchmarks/floor.py`` does the Agent row's work: every
rung ends with the Agent's conversation, the traced rung takes the Agent's moves, and a
rung that drifts is caught before anything is counted (the counts themselves need
valgrind and minutes: ``python benchmarks/floor.py``, by hand)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentfsm import Message, ToolCall, ToolResult

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
K = 3


@pytest.fixture(scope="module")
def floor() -> Iterator[ModuleType]:
    """``benchmarks/floor.py``, imported as its worker imports it (the benchmarks and
    the peers' folders on ``sys.path``); both, and its modules, gone afterwards."""
    path, modules = list(sys.path), set(sys.modules)
    sys.path[:0] = [str(BENCHMARKS)]
    spec = importlib.util.spec_from_file_location("floor", BENCHMARKS / "floor.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["floor"] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if not name.startswith("agentfsm"):
                del sys.modules[name]


def _expected(k: int) -> list[Message]:
    """The Agent's conversation of the peers' workload at ``k``, written out."""
    messages = [Message.user("Count with the add tool, then say done.")]
    for n in range(1, k + 1):
        call = ToolCall(call_id=f"call_{n}", name="add", arguments={"a": n, "b": 1})
        messages.append(
            Message(role="assistant", tool_calls=(call,), metadata={"model": "scripted"})
        )
        result = ToolResult(tool_call_id=f"call_{n}", name="add", content=str(n + 1))
        messages.append(Message(role="tool", tool_results=(result,)))
    messages.append(Message(role="assistant", content=f"done {k}", metadata={"model": "scripted"}))
    return messages


def test_the_agent_row_has_the_conversation_written_out(floor: ModuleType) -> None:
    agent = asyncio.run(floor.agent_run(K))
    assert list(agent.messages) == _expected(K)


RUNGS = ["dicts", "slots", "attrs", "values", "traced", "engine"]


@pytest.mark.parametrize("rung", RUNGS)
def test_every_rung_ends_with_the_agents_conversation(floor: ModuleType, rung: str) -> None:
    assert list(floor.LOOPS) == list(floor.RUNGS) == RUNGS
    ran = asyncio.run(floor.rung_run(rung, K))
    assert floor.as_messages(ran.messages) == _expected(K)


@pytest.mark.parametrize("rung", ["traced", "engine"])
def test_the_traced_rungs_take_the_agents_moves(floor: ModuleType, rung: str) -> None:
    assert floor.DESIGN_FLOOR == "traced"
    agent = asyncio.run(floor.agent_run(1))
    ran = asyncio.run(floor.rung_run(rung, 1))
    edges = [(t.source, t.trigger, t.dest) for t in ran.trace]
    assert edges == [(t.source, t.trigger, t.dest) for t in agent.trace]
    assert [t.trigger for t in ran.trace] == [
        *("expanded", "called", "clear", "executed", "propagated", "unsatisfied", "loop"),
        *("expanded", "called", "clear", "executed", "propagated", "unsatisfied", "done"),
    ]
    assert ran.trace[-1].chain.messages == ran.messages  # each move carries its chain
    assert all(t.elapsed >= 0 for t in ran.trace)
    if rung == "engine":  # the records build the Agent's step details when read
        assert [t.detail for t in ran.trace] == [t.detail for t in agent.trace]
        assert ran.trace[1].detail == {"model": "scripted", "tool_calls": ["add"]}
    floor.check(K)  # what the script runs before it counts: every rung at once


def test_a_rung_that_drifts_is_caught(floor: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    dicts = floor.LOOPS["dicts"]

    async def drifted(ctx: Any) -> Any:  # the tool's result kept as an int, not its text
        ran = await dicts(ctx)
        ran.messages[2]["tool_results"][0]["content"] = 2
        return ran

    monkeypatch.setitem(floor.LOOPS, "dicts", drifted)
    with pytest.raises(AssertionError, match="rung 'dicts' ended with another conversation"):
        floor.check(K)


def test_a_missing_interpreter_is_named(floor: ModuleType, tmp_path: Path) -> None:
    missing = tmp_path / "python3.99"
    with pytest.raises(SystemExit, match=r"--python .*python3\.99: no such interpreter"):
        floor.venv_for(str(missing))
