"""Tools: schemas from type hints, and every failure an error result (SPEC §3 execute_tools)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import re
import threading
import time
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import attrs
import pytest

from agentfsm import (
    LLMChain,
    Message,
    Tool,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolResult,
    tool,
)
from agentfsm._steps import execute_tool_calls, run_tool_calls
from agentfsm._tools import MAX_STRAGGLERS
from agentfsm.providers import ScriptedModel
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
    assert props["color"] == {"enum": ["red", "blue"], "type": "string"}
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
    b_done = asyncio.Event()

    @tool
    async def slow(name: str) -> str:
        """Answer; ``a`` only once ``b`` has (run in turn, ``a`` would wait forever)."""
        order.append(f"{name} started")
        if name == "a":
            await asyncio.wait_for(b_done.wait(), 30)
        else:
            b_done.set()
        order.append(f"{name} done")
        return name

    calls = [
        ToolCall("1", "slow", {"name": "a"}),
        ToolCall("2", "slow", {"name": "b"}),
        ToolCall("3", "add", {"a": 1, "b": 2}),
    ]
    results = await run_tool_calls(_chain(slow, add), calls)
    assert [r.content for r in results] == ["a", "b", "3"]
    assert order == ["a started", "b started", "b done", "a done"]


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

    result = await _one(hang)
    assert result.is_error
    assert result.content == "ERROR: TimeoutError: tool 'hang' did not finish within 0.05s."
    result = await _one(hang_sync)
    assert result.is_error
    assert result.content == (
        "ERROR: TimeoutError: tool 'hang_sync' did not finish within 0.05s. It runs in a thread "
        "Python cannot stop, so it may still finish and its effects may still happen; its "
        "result will be discarded."
    )


async def test_a_sync_tool_past_its_timeout_is_told_and_may_skip_its_side_effect() -> None:
    """Python cannot kill a thread: the late side effect happens unless the tool checks."""
    effects: list[str] = []
    release = threading.Event()

    @tool(timeout=0.05)
    def careless(ctx: ToolContext) -> str:
        """Writes after a long wait, whatever happened meanwhile."""
        release.wait(5)
        effects.append("careless wrote")
        return "written"

    @tool(timeout=0.05)
    def careful(ctx: ToolContext) -> str:
        """Checks the context before writing."""
        release.wait(5)
        assert ctx.timed_out is not None
        if ctx.timed_out.is_set():
            effects.append("careful skipped")
            return "skipped"
        effects.append("careful wrote")
        return "written"

    results = await run_tool_calls(
        _chain(careless, careful), [ToolCall("1", "careless", {}), ToolCall("2", "careful", {})]
    )
    assert [r.is_error for r in results] == [True, True]
    assert all("its effects may still happen" in str(r.content) for r in results)
    assert effects == []
    release.set()
    for _ in range(500):
        if len(effects) == 2:
            break
        await asyncio.sleep(0.01)
    assert sorted(effects) == ["careful skipped", "careless wrote"]


async def test_hung_sync_tools_neither_starve_the_loop_nor_pile_up() -> None:
    release = threading.Event()

    @tool(timeout=0.02)
    def stuck() -> str:
        """Never returns until released."""
        release.wait(10)
        return "late"

    chain = _chain(stuck)
    try:
        first = [
            (await run_tool_calls(chain, [ToolCall(str(i), "stuck", {})]))[0] for i in range(12)
        ]
        assert sum("did not finish" in str(r.content) for r in first) == MAX_STRAGGLERS
        refused = [r for r in first if "was not started" in str(r.content)]
        assert len(refused) == 12 - MAX_STRAGGLERS
        assert str(refused[0].content) == (
            f"ERROR: tool 'stuck' was not started: {MAX_STRAGGLERS} earlier calls are still "
            "running past their timeout. Try again later or do without it."
        )
        # The loop's shared executor (DNS lookups, to_thread) is not held by them.
        loop = asyncio.get_running_loop()
        assert await asyncio.wait_for(loop.run_in_executor(None, lambda: 42), 2) == 42
    finally:
        release.set()
    for _ in range(500):
        (again,) = await run_tool_calls(chain, [ToolCall("x", "stuck", {})])
        if "was not started" not in str(again.content):
            break
        await asyncio.sleep(0.01)
    assert again.content == "late"


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


# ---------------------------------------------------------------- structured arguments


@attrs.frozen
class Point:
    """A point on the plan."""

    x: int
    y: int = 0


@attrs.frozen
class Route:
    name: str
    stops: list[Point]


@dataclasses.dataclass
class Box:
    width: float
    label: str = "box"


class Address(TypedDict):
    street: str
    zip: NotRequired[int]


POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
    "required": ["x"],
    "additionalProperties": False,
    "description": "A point on the plan.",
}

#: (hint, schema the model sees, a valid value and what the tool receives, an invalid value
#: and the problem the model reads)
TYPED: list[tuple[Any, dict[str, Any], Any, Any, Any, str]] = [
    (
        list[int],
        {"type": "array", "items": {"type": "integer"}},
        [1, 2],
        [1, 2],
        [1, "2"],
        "parameter 'v[1]' must be integer, got \"2\"",
    ),
    (
        dict[str, int],
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"a": 1},
        {"a": 1},
        {"a": 1.5},
        "parameter \"v['a']\" must be integer, got 1.5",
    ),
    (
        tuple[int, str],
        {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
        [1, "a"],
        (1, "a"),
        [1, 2],
        "parameter 'v[1]' must be string, got 2",
    ),
    (
        set[str],
        {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
        ["a", "b", "a"],
        {"a", "b"},
        ["a", None],
        "parameter 'v[1]' must be string, got null",
    ),
    (
        Point,
        POINT,
        {"x": 1},
        Point(1, 0),
        {"x": 1, "z": 2},
        "parameter 'v' has unknown field(s) ['z']",
    ),
    (
        Route,
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "stops": {"type": "array", "items": POINT}},
            "required": ["name", "stops"],
            "additionalProperties": False,
        },
        {"name": "r", "stops": [{"x": 1, "y": 2}]},
        Route("r", [Point(1, 2)]),
        {"name": "r", "stops": [{"x": 1}, {"y": 2}]},
        "parameter 'v.stops[1].x' is missing (required)",
    ),
    (
        Box,
        {
            "type": "object",
            "properties": {
                "width": {"type": "number"},
                "label": {"type": "string", "default": "box"},
            },
            "required": ["width"],
            "additionalProperties": False,
        },
        {"width": 2},
        Box(2.0),
        {"width": "2"},
        "parameter 'v.width' must be number, got \"2\"",
    ),
    (
        Address,
        {
            "type": "object",
            "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}},
            "required": ["street"],
            "additionalProperties": False,
        },
        {"street": "Main"},
        {"street": "Main"},
        {"street": "Main", "zip": "1"},
        "parameter 'v.zip' must be integer, got \"1\"",
    ),
    (
        Color,
        {"enum": ["red", "blue"], "type": "string"},
        "red",
        Color.RED,
        "green",
        'parameter \'v\' must be one of "red", "blue", got "green"',
    ),
    (
        datetime.datetime,
        {"type": "string", "format": "date-time"},
        "2026-01-02T03:04:05",
        datetime.datetime(2026, 1, 2, 3, 4, 5),
        "yesterday",
        "parameter 'v' must be an ISO 8601 date-time string, got \"yesterday\"",
    ),
    (
        datetime.date,
        {"type": "string", "format": "date"},
        "2026-01-02",
        datetime.date(2026, 1, 2),
        20260102,
        "parameter 'v' must be an ISO 8601 date string, got 20260102",
    ),
    (
        Literal["a", "b"],
        {"enum": ["a", "b"], "type": "string"},
        "a",
        "a",
        "c",
        'parameter \'v\' must be one of "a", "b", got "c"',
    ),
    (
        int | str,
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "x",
        "x",
        1.5,
        "parameter 'v' must be integer or string, got 1.5",
    ),
    (
        Point | None,
        {**POINT, "type": ["object", "null"]},
        None,
        None,
        {"x": "1"},
        "parameter 'v.x' must be integer, got \"1\"",
    ),
    (
        list[Literal["a"]] | None,
        {"type": ["array", "null"], "items": {"enum": ["a"], "type": "string"}},
        ["a"],
        ["a"],
        ["a", "b"],
        'parameter \'v[1]\' must be one of "a", got "b"',
    ),
]


def _typed_tool(hint: Any, received: list[Any]) -> Tool:
    def take(v: Any) -> str:
        received.append(v)
        return "ok"

    take.__annotations__ = {"v": hint, "return": str}
    return tool(take)


@pytest.mark.parametrize(
    ("hint", "schema", "good", "structured", "bad", "problem"),
    TYPED,
    ids=[str(t[0]) for t in TYPED],
)
async def test_structured_arguments_are_checked_as_the_schema_says(
    hint: Any, schema: dict[str, Any], good: Any, structured: Any, bad: Any, problem: str
) -> None:
    received: list[Any] = []
    typed = _typed_tool(hint, received)
    assert typed.parameters["properties"]["v"] == schema
    ok = await _one(typed, {"v": good})
    assert (ok.is_error, ok.content) == (False, "ok")
    assert received == [structured] and type(received[0]) is type(structured)
    refused = await _one(typed, {"v": bad})
    assert refused.is_error and received == [structured]  # the tool did not run
    assert str(refused.content).startswith(f"Invalid arguments for tool 'take': {problem}")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(*items: int) -> str: ...", "Tool 'f' takes *items"),
        ("def f(**extra: int) -> str: ...", "Tool 'f' takes **extra"),
        ("def f(a: int, /) -> str: ...", "Tool 'f' takes the positional-only parameter 'a'"),
        ("def f(a: object) -> str: ...", "Tool 'f', parameter 'a': object has no JSON schema"),
        ("def f(a: dict[int, str]) -> str: ...", "keys that are not strings"),
        ("def f(a: Node) -> str: ...", "Node refers to itself"),
    ],
)
def test_tools_the_model_cannot_call_are_refused_at_tool_time(source: str, message: str) -> None:
    namespace: dict[str, Any] = {"Node": Node}
    exec(source, namespace)
    with pytest.raises(TypeError, match=re.escape(message)):
        tool(namespace["f"])


@attrs.frozen
class Node:
    children: list[Node]


class Shape(enum.Enum):
    SQUARE = 1


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ({"b", "a"}, '["a", "b"]'),
        (b"caf\xc3\xa9", "café"),
        (Point(1, 2), '{"x": 1, "y": 2}'),
        (Box(1.5), '{"width": 1.5, "label": "box"}'),
        (Shape.SQUARE, "1"),
        (Color.RED, "red"),
        (datetime.date(2026, 1, 2), "2026-01-02"),
        (
            {"when": datetime.datetime(2026, 1, 2), "tags": frozenset({2, 1})},
            '{"when": "2026-01-02T00:00:00", "tags": [1, 2]}',
        ),
        (None, "null"),
    ],
)
async def test_return_values_become_json(value: Any, content: str) -> None:
    @tool
    def give() -> Any:
        """Return it."""
        return value

    result = await _one(give)
    assert (result.is_error, result.content) == (False, content)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (object(), "ERROR: tool 'give' returned a value with no JSON form (object at $)"),
        ({"k": [1, lambda: 0]}, "(function at $['k'][1])"),
        (b"\xff\xfe", "ERROR: tool 'give' returned bytes that are not UTF-8 text"),
    ],
)
async def test_a_return_value_with_no_json_form_is_an_error_never_a_repr(
    value: Any, problem: str
) -> None:
    @tool
    def give() -> Any:
        """Return it."""
        return value

    result = await _one(give)
    assert result.is_error and problem in str(result.content)
    assert " at 0x" not in str(result.content)
