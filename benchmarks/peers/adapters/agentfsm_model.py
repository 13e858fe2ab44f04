"""agentfsm with a minimal ``ChatModel`` of its own instead of the test double.

The same agent as ``agentfsm.py`` (tools, standard machine, ``Agent.execute``),
but its model is the least a provider does: a class with a ``name`` and an
async ``complete`` that builds the reply ``Message`` with the workload's
``ToolCall``. No request is recorded and no reply copied, so the row states the
library's own cost without ``ScriptedModel``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agentfsm import Agent, AgentState, Message, Tool, ToolCall
from agentfsm.providers import DeltaHandler

import workload as w
from adapters.agentfsm import _last_result, add, version

__all__ = ["NAME", "idle_run", "run_once", "version"]

NAME = "agentfsm_model"


class MinimalModel:
    """A chat model answering the workload directly."""

    name = "minimal"

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        n, wants_tool = await w.model_turn()
        if n >= 2:
            w.check_last_result(n, _last_result(messages))
        if wants_tool:
            call = ToolCall(call_id=f"call_{n}", name=w.TOOL_NAME, arguments={"a": n, "b": 1})
            return Message(role="assistant", tool_calls=(call,))
        return Message(role="assistant", content=w.final_text())


AGENT = Agent(model=MinimalModel(), tools=[add])


async def _run(ctx: w.RunCtx) -> str:
    state = await AGENT.execute(AgentState.of(w.PROMPT), max_runs=ctx.k + 5)
    if state.status != "ok":
        raise w.WorkloadError(f"run ended {state.status}: {state.error}")
    return str(state.messages[-1].text)


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
