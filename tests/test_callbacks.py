"""Every callback a chain fires, subscribed, with the exact arguments it is given.

A handler is called as ``handler(chain, ...)``: the chain as it stands when the event
happens, then what the event is about. Each test below records every event of a run
and compares the whole sequence, so an event renamed, dropped, moved or given other
arguments fails one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from agentfsm import (
    Agent,
    AgentState,
    ChainError,
    LLMChain,
    Message,
    MessageDelta,
    Tool,
    ToolCall,
    ToolOutput,
    ToolResult,
    tool,
)
from agentfsm._chain import CALLBACK_NAMES
from agentfsm.providers import ScriptedModel, call_tool, call_tools, fail, say
from tests.support import add, boom


@tool
def ask(question: str) -> ToolOutput:
    """Ask the user; the run stops until they answer."""
    return ToolOutput("asked", interrupt={"type": "ask_user", "question": question})


def _describe(value: Any) -> Any:
    """What a test compares of a callback argument: the parts that say what happened."""
    if isinstance(value, LLMChain):
        last = value.last_message
        return ("chain", len(value.messages), last.role if last else None)
    if isinstance(value, Message):
        calls = [c.name for c in value.tool_calls]
        results = [(r.name, r.is_error, str(r.content)) for r in value.tool_results]
        return ("message", value.role, value.text, calls, results)
    if isinstance(value, ToolCall):
        return ("call", value.call_id, value.name, dict(value.arguments))
    if isinstance(value, ToolResult):
        return ("result", value.tool_call_id, value.name, value.is_error, str(value.content))
    if isinstance(value, Tool):
        return ("tool", value.name)
    if isinstance(value, ChainError):
        return ("error", value.type, value.message)
    if isinstance(value, MessageDelta):
        return ("delta", value.content)
    return value


class Recorder:
    """Handlers for every callback name, recording ``(name, *described arguments)``."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.raw: list[tuple[str, tuple[Any, ...]]] = []

    def handlers(self) -> dict[str, Callable[..., None]]:
        return {name: self._handler(name) for name in sorted(CALLBACK_NAMES)}

    def _handler(self, name: str) -> Callable[..., None]:
        def handle(*args: Any) -> None:
            self.raw.append((name, args))
            self.events.append((name, *map(_describe, args)))

        return handle

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == name]


def _with_usage(reply: Message, usage: dict[str, int]) -> Message:
    return attrs.evolve(reply, metadata={**reply.metadata, "usage": usage})


USAGE = {"input_tokens": 12, "output_tokens": 3}


async def _record(model: ScriptedModel, tools: list[Tool], **options: Any) -> Recorder:
    recorder = Recorder()
    agent = Agent(model, tools, callbacks=[recorder.handlers()])
    await agent.execute(AgentState.of("go"), **options)
    return recorder


def _call(reply: Message, index: int = 0) -> tuple[Any, ...]:
    return _describe(reply.tool_calls[index])


async def test_a_turn_with_a_tool_that_works_and_one_that_fails() -> None:
    first = _with_usage(call_tools(("add", {"a": 1, "b": 2}, "c1"), ("boom", {}, "c2")), USAGE)
    answer = _with_usage(say("3 and a failure"), {"input_tokens": 20, "output_tokens": 4})
    recorder = await _record(ScriptedModel([first, answer]), [add, boom])
    assert recorder.events == [
        ("on_llm_new_message", ("chain", 2, "assistant"), _describe(first)),
        (
            "on_tool_call_identified",
            ("chain", 2, "assistant"),
            ("call", "c1", "add", {"a": 1, "b": 2}),
        ),
        ("on_tool_call_identified", ("chain", 2, "assistant"), ("call", "c2", "boom", {})),
        ("on_message_processed", ("chain", 2, "assistant"), _describe(first)),
        ("on_llm_token_usage", ("chain", 2, "assistant"), USAGE),
        ("on_tool_execution_started", ("chain", 2, "assistant"), _call(first, 0), ("tool", "add")),
        ("on_tool_execution_started", ("chain", 2, "assistant"), _call(first, 1), ("tool", "boom")),
        (
            "on_tool_execution_completed",
            ("chain", 2, "assistant"),
            _call(first, 0),
            ("result", "c1", "add", False, "3"),
        ),
        (
            "on_tool_execution_failed",
            ("chain", 2, "assistant"),
            _call(first, 1),
            ("result", "c2", "boom", True, "ERROR: RuntimeError: kaput"),
        ),
        (
            "on_tool_response_created",
            ("chain", 3, "tool"),
            (
                "message",
                "tool",
                "",
                [],
                [("add", False, "3"), ("boom", True, "ERROR: RuntimeError: kaput")],
            ),
        ),
        (
            "on_message_processed",
            ("chain", 3, "tool"),
            (
                "message",
                "tool",
                "",
                [],
                [("add", False, "3"), ("boom", True, "ERROR: RuntimeError: kaput")],
            ),
        ),
        ("on_llm_new_message", ("chain", 4, "assistant"), _describe(answer)),
        ("on_message_processed", ("chain", 4, "assistant"), _describe(answer)),
        ("on_llm_token_usage", ("chain", 4, "assistant"), {"input_tokens": 20, "output_tokens": 4}),
    ]


async def test_an_unknown_tool_fails_without_starting() -> None:
    reply = call_tool("nope", call_id="c1")
    recorder = await _record(ScriptedModel([reply, say("ok")]), [add])
    assert recorder.named("on_tool_execution_started") == []
    assert recorder.named("on_tool_execution_failed") == [
        (
            "on_tool_execution_failed",
            ("chain", 2, "assistant"),
            ("call", "c1", "nope", {}),
            ("result", "c1", "nope", True, "Tool call made to nope but tool not found"),
        )
    ]
    assert recorder.named("on_tool_execution_completed") == []


async def test_an_interrupting_tool_fires_on_tool_interrupted_only() -> None:
    reply = call_tool("ask", question="which file?", call_id="c1")
    recorder = Recorder()
    agent = Agent(ScriptedModel([reply]), [ask], callbacks=[recorder.handlers()])
    state = await agent.execute(AgentState.of("go"))
    assert state.status == "interrupted"
    (event,) = recorder.named("on_tool_interrupted")
    assert event == (
        "on_tool_interrupted",
        ("chain", 2, "assistant"),
        ("result", "c1", "ask", False, "asked"),
    )
    (_, interrupted) = next(a for n, a in recorder.raw if n == "on_tool_interrupted")
    assert interrupted.interrupt_data == {"type": "ask_user", "question": "which file?"}
    assert recorder.named("on_tool_execution_completed") == []
    assert recorder.named("on_tool_execution_failed") == []
    assert [e[0] for e in recorder.events][-3:] == [
        "on_tool_interrupted",
        "on_tool_response_created",
        "on_message_processed",
    ]


async def test_a_failed_model_call_fires_on_llm_error_then_on_error() -> None:
    recorder = await _record(ScriptedModel([fail("rate_limited", "slow down")]), [add])
    assert recorder.events == [
        ("on_llm_error", ("chain", 1, "user"), ("error", "rate_limited", "slow down")),
        ("on_error", ("chain", 1, "user"), ("error", "rate_limited", "slow down")),
    ]


async def test_a_spent_failure_budget_fires_on_retries_exceeded_then_on_error() -> None:
    recorder = await _record(ScriptedModel(lambda m: call_tool("boom")), [boom])
    assert len(recorder.named("on_tool_execution_failed")) == 3
    assert recorder.events[-2:] == [
        ("on_retries_exceeded", ("chain", 7, "tool")),
        (
            "on_error",
            ("chain", 7, "tool"),
            (
                "error",
                "exceeded_failure_count",
                "Exceeded max failure count (3 tool turns with an error in a row; "
                "max_retry_count is 3: raise it, Agent(max_retry_count=...), to allow more)",
            ),
        ),
    ]


async def test_a_streamed_reply_fires_a_delta_per_word_before_the_message() -> None:
    recorder = await _record(ScriptedModel([say("two words")], stream=True), [])
    assert recorder.events == [
        ("on_llm_new_delta", ("chain", 1, "user"), ("delta", "two ")),
        ("on_llm_new_delta", ("chain", 1, "user"), ("delta", "words ")),
        ("on_llm_new_message", ("chain", 2, "assistant"), _describe(say("two words"))),
        ("on_message_processed", ("chain", 2, "assistant"), _describe(say("two words"))),
    ]


async def test_no_usage_no_usage_event() -> None:
    recorder = await _record(ScriptedModel([say("x")]), [])
    assert recorder.named("on_llm_token_usage") == []


@pytest.mark.parametrize("name", sorted(CALLBACK_NAMES - {"on_llm_new_delta", "on_error"}))
async def test_a_raising_handler_of_each_event_fails_the_run_naming_it(name: str) -> None:
    """Whichever event it is, a raising handler ends the run in callback_error, naming it."""
    script = [
        _with_usage(call_tools(("add", {"a": 1, "b": 2}, "c1"), ("boom", {}, "c2")), USAGE),
        call_tool("ask", question="?", call_id="c3"),
    ]
    if name == "on_retries_exceeded":
        script = [call_tool("boom")] * 3
    if name == "on_llm_error":
        script = [fail("server_error", "down")]

    def raising(*args: Any) -> None:
        raise LookupError("handler bug")

    agent = Agent(ScriptedModel(script), [add, boom, ask], callbacks=[{name: raising}])
    state = await agent.execute(AgentState.of("go"))
    assert state.status == "error" and state.error is not None
    assert state.error.type == "callback_error"
    assert state.error.message == f"Callback {name} raised LookupError: handler bug"
    assert state.error.details == {"callback": name}
