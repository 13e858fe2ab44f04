"""pydantic-ai: an ``Agent`` over ``FunctionModel`` with one async tool.

The agent is built once; each run is ``await agent.run(prompt)``.  The model
function is async (a sync one would be run in a thread) and returns usage, as
a real provider does, so ``FunctionModel`` does not estimate token counts.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version as _dist_version

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

import workload as w

NAME = "pydantic_ai"


def version() -> str:
    return f"pydantic-ai-slim {_dist_version('pydantic-ai-slim')}"


def _last_result(messages: list[ModelMessage]) -> object:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                return part.content
    return None


async def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    n, wants_tool = await w.model_turn()
    if n >= 2:
        w.check_last_result(n, _last_result(messages))
    usage = RequestUsage(input_tokens=1, output_tokens=1)
    if wants_tool:
        part = ToolCallPart(w.TOOL_NAME, {"a": n, "b": 1}, tool_call_id=f"call_{n}")
        return ModelResponse(parts=[part], usage=usage)
    return ModelResponse(parts=[TextPart(w.final_text())], usage=usage)


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return await w.tool_add(a, b)


AGENT: Agent[None, str] = Agent(FunctionModel(_model), tools=[add])


#: The default request limit (50) would stop the K = 200 runs.
LIMITS = UsageLimits(request_limit=None)


async def _run(ctx: w.RunCtx) -> str:
    result = await AGENT.run(w.PROMPT, usage_limits=LIMITS)
    return result.output


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
