"""WrapperModel and WrapperTool: a model or tool that is another, call for call."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import attrs

from agentfsm import Message, Tool, ToolCall, ToolContext, ToolResult, tool
from agentfsm._tools import WrapperTool
from agentfsm.providers import ChatModel, DeltaHandler, ScriptedModel, WrapperModel, say
from tests.support import add, chain_of


class Counting(WrapperModel):
    __slots__ = ("calls",)

    def __init__(self, wrapped: ChatModel) -> None:
        super().__init__(wrapped)
        self.calls = 0

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        self.calls += 1
        return await super().complete(messages, tools, on_delta=on_delta)


async def test_a_wrapper_model_is_the_wrapped_model_to_its_callers() -> None:
    inner = ScriptedModel([say("hi")], model_name="inner")
    model = WrapperModel(inner)
    assert isinstance(model, ChatModel)
    assert model.name == inner.name
    assert model.requests is inner.requests  # any other attribute is the wrapped model's
    reply = await model.complete([Message.user("go")], [add])
    assert reply.text == "hi"
    assert len(inner.requests) == 1
    assert repr(inner) in repr(model)


async def test_a_subclass_acts_around_the_call_and_runs_as_any_model() -> None:
    model = Counting(ScriptedModel([say("one"), say("two")]))
    result = await chain_of(model).run("step")  # type: ignore[arg-type]
    reply = result.chain.last_message
    assert reply is not None and reply.text == "one"
    assert model.calls == 1
    copied = copy.deepcopy(model)
    assert copied.wrapped is not model.wrapped and copied.calls == 1


@attrs.frozen
class Shouting(WrapperTool):
    async def invoke(self, call: ToolCall, context: ToolContext) -> ToolResult:
        result = await super().invoke(call, context)
        return attrs.evolve(result, content=str(result.content).upper())


@tool
def greet(name: str) -> str:
    """Greet someone."""
    return f"hello {name}"


async def test_a_wrapper_tool_is_offered_as_the_wrapped_one_and_hands_it_the_call() -> None:
    wrapped = Shouting.wrap(greet)
    for field in ("name", "description", "parameters", "timeout", "is_async", "function"):
        assert getattr(wrapped, field) == getattr(greet, field)
    assert wrapped.wrapped is greet
    context = ToolContext(state={}, custom_context={}, tool_call_id="c1")
    result = await wrapped.invoke(ToolCall("c1", "greet", {"name": "ada"}), context)
    assert result.content == "HELLO ADA"
    # wrapping a wrapper keeps what the inner one does
    outer = WrapperTool.wrap(wrapped)
    result = await outer.invoke(ToolCall("c2", "greet", {"name": "bo"}), context)
    assert result.content == "HELLO BO"
    assert (await outer.invoke(ToolCall("c3", "greet", {}), context)).is_error
