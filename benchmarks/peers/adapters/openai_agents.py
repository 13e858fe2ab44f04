"""OpenAI Agents SDK: an ``Agent`` with one function tool over a custom ``Model``.

No network: the model is a :class:`agents.Model` subclass that returns
Responses-API items built in memory, with usage as a real provider reports
it.  Tracing is disabled.  The agent is built once; each run is
``await Runner.run(agent.clone(), prompt, max_turns=...)``.

Why a clone per run: the SDK registers every active run of an ``Agent`` in a
per-agent list and scans that list on every turn (to detect ``Agent.tools``
changing under concurrent runs), so N concurrent runs of one shared agent cost
O(N) per turn each, O(N²) in all: 10,000 idle runs of one agent take many
minutes just to start.  A shallow ``clone()`` per run (the SDK's own advice
for concurrent runs) keeps each run's scan to itself; it costs a few µs, next
to nothing at this library's per-call cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib.metadata import version as _dist_version
from typing import Any

from agents import (
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Runner,
    Tool,
    TResponseInputItem,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.items import TResponseStreamEvent
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import workload as w

NAME = "openai_agents"

set_tracing_disabled(True)


def version() -> str:
    return f"openai-agents {_dist_version('openai-agents')}"


def _last_result(items: str | list[TResponseInputItem]) -> object:
    if isinstance(items, str) or not items:
        return None
    last: Any = items[-1]
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return last.get("output")
    return None


class FakeModel(Model):
    """Asks for ``add`` while the run wants tools, then answers."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        n, wants_tool = await w.model_turn()
        if n >= 2:
            w.check_last_result(n, _last_result(input))
        usage = Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
        output: list[Any]
        if wants_tool:
            output = [
                ResponseFunctionToolCall(
                    id=f"fc_{n}",
                    call_id=f"call_{n}",
                    type="function_call",
                    name=w.TOOL_NAME,
                    arguments=f'{{"a":{n},"b":1}}',
                )
            ]
        else:
            output = [
                ResponseOutputMessage(
                    id=f"msg_{n}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            text=w.final_text(), type="output_text", annotations=[], logprobs=[]
                        )
                    ],
                )
            ]
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the benchmark only runs the non-streamed path")


@function_tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return await w.tool_add(a, b)


AGENT = Agent(name="peers", instructions="Use the add tool.", model=FakeModel(), tools=[add])


async def _run(ctx: w.RunCtx) -> str:
    result = await Runner.run(AGENT.clone(), w.PROMPT, max_turns=ctx.k + 5)
    return str(result.final_output)


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
