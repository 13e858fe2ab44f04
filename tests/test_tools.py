"""Tools: schemas from type hints, and every failure an error result (SPEC §3 execute_tools)."""

from __future__ import annotations

import asyncio
import enum
import time
from typing import Annotated, Literal

import pytest

from agentfsm import (
    LLMChain,
    Message,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolResult,
    tool,
)
from agentfsm.providers import ScriptedModel
from agentfsm.steps import execute_tool_calls, run_tool_calls
from agentfsm.tools import Tool
from tests.support import add, boom


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_schema_from_hints_and_docstring() -> None:
    @tool
    def paint(
        wall: str,
        color: Color,
        coats: Annotated[int, "how many coats"] = 1,
        finish: Literal["matte", "gloss"] = "matte",
        tags: list[str] | None = None,
        ctx: ToolContext | None = None,
    ) -> str:
        """Paint a wall.

        Args:
            wall: which wall
        """
        return "ok"

    assert paint.name == "paint"
    assert paint.description == "Paint a wall."
    props = paint.parameters["properties"]
    assert props["wall"] == {"type": "string", "description": "which wall"}
    assert props["color"] == {"enum": ["red", "blue"]}
    assert props["coats"] == {"type": "integer", "description": "how many coats", "default": 1}
    assert props["finish"] == {"enum": ["matte", "gloss"], "type": "string", "default": "matte"}
    assert props["tags"]["type"] == ["array", "null"]
    assert paint.parameters["required"] == ["wall", "color"]
    assert "ctx" not in props


def test_tool_decorator_options() -> None:
    @tool(name="sum", description="Sum it.", timeout=2.0)
    async def total(a: int) -> int:
        return a

    assert (total.name, total.description, total.timeout, total.is_async) == (
        "sum",
        "Sum it.",
        2.0,
        True,
    )


def _chain(*tools: Tool) -> LLMChain:
    return LLMChain(ScriptedModel([]), tools=tools)


async def _one(tool_: Tool, arguments: dict[str, object] | None = None, **kw: object) -> ToolResult:
    call = ToolCall("c1", tool_.name, arguments or {}, **kw)  # type: ignore[arg-type]
    (result,) = await run_tool_calls(_chain(tool_), [call])
    return result


async def test_missing_and_unknown_parameters_list_required_and_accepted() -> None:
    result = await _one(add, {"a": 1, "bb": 2})
    assert result.is_error
    assert result.content == (
        "Invalid arguments for tool 'add': missing required parameter(s) ['b']; "
        "unknown parameter 'bb' (did you mean 'b'?). Required: ['a', 'b']. Accepted: ['a', 'b']."
    )


async def test_wrong_types_are_explained() -> None:
    result = await _one(add, {"a": "1", "b": 2})
    assert result.is_error and "parameter 'a' must be integer, got \"1\"" in str(result.content)


async def test_invalid_json_arguments_become_an_error_result() -> None:
    result = await _one(add, {}, invalid_arguments='{"a": 1,')
    assert result.is_error
    assert str(result.content).startswith("Invalid JSON in arguments for tool 'add'")


async def test_a_raising_tool_reports_the_exception() -> None:
    result = await _one(boom)
    assert (result.is_error, result.content) == (True, "ERROR: RuntimeError: kaput")


async def test_unknown_tool() -> None:
    call = ToolCall("c1", "nope", {})
    (result,) = await run_tool_calls(_chain(add), [call])
    assert (result.is_error, result.content) == (True, "Tool call made to nope but tool not found")


async def test_return_values_are_normalized() -> None:
    @tool
    def as_dict() -> dict[str, int]:
        """A dict."""
        return {"x": 1}

    @tool
    def as_output() -> ToolOutput:
        """With state."""
        return ToolOutput("c", state_updates={"k": 1}, interrupt={"q": "?"})

    assert (await _one(as_dict)).content == '{"x": 1}'
    out = await _one(as_output)
    assert out.is_interrupt and out.interrupt_data == {"q": "?"} and out.state_updates == {"k": 1}


async def test_async_tools_run_concurrently_and_keep_call_order() -> None:
    order: list[str] = []

    @tool
    async def slow(name: str, wait: float) -> str:
        """Sleep then answer."""
        await asyncio.sleep(wait)
        order.append(name)
        return name

    calls = [
        ToolCall("1", "slow", {"name": "a", "wait": 0.2}),
        ToolCall("2", "slow", {"name": "b", "wait": 0.01}),
        ToolCall("3", "add", {"a": 1, "b": 2}),
    ]
    started = time.perf_counter()
    results = await run_tool_calls(_chain(slow, add), calls)
    assert time.perf_counter() - started < 0.35
    assert [r.content for r in results] == ["a", "b", "3"]
    assert order == ["b", "a"]


async def test_tool_timeout_becomes_an_error_result() -> None:
    @tool(timeout=0.05)
    async def hang() -> str:
        """Never finishes."""
        await asyncio.sleep(10)
        return "late"

    @tool(timeout=0.05)
    def hang_sync() -> str:
        """Blocks a worker thread."""
        time.sleep(0.3)
        return "late"

    for t in (hang, hang_sync):
        result = await _one(t)
        assert result.is_error
        assert result.content == f"ERROR: TimeoutError: tool '{t.name}' did not finish within 0.05s"


async def test_tool_context_sees_state_and_call_id() -> None:
    seen: list[ToolContext] = []

    @tool
    def peek(ctx: ToolContext) -> str:
        """Look at the context."""
        seen.append(ctx)
        return "ok"

    chain = _chain(peek).update_custom_context({"state": {"a": 1}})
    await run_tool_calls(chain, [ToolCall("c9", "peek", {})])
    assert seen[0].state == {"a": 1} and seen[0].tool_call_id == "c9"


async def test_failure_count_increments_on_errors_and_resets_on_success() -> None:
    chain = _chain(add, boom).add_message(Message.user("go"))
    chain = chain.add_message(Message.assistant(None, [ToolCall("1", "boom", {})]))
    chain = await execute_tool_calls(chain)
    assert chain.current_failure_count == 1
    chain = chain.add_message(Message.assistant(None, [ToolCall("2", "boom", {})]))
    chain = await execute_tool_calls(chain)
    assert chain.current_failure_count == 2
    chain = chain.add_message(Message.assistant(None, [ToolCall("3", "add", {"a": 1, "b": 1})]))
    chain = await execute_tool_calls(chain)
    assert chain.current_failure_count == 0


async def test_cancellation_propagates_out_of_a_tool() -> None:
    @tool
    async def forever() -> str:
        """Waits."""
        await asyncio.sleep(10)
        return "x"

    task = asyncio.create_task(_one(forever))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
