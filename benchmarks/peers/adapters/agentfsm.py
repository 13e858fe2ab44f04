"""agentfsm: an ``Agent`` over a ``ScriptedModel`` driven by a function of the conversation.

The agent (model, tools, standard machine) is built once; each run is
``await agent.execute(AgentState.of(prompt), max_runs=...)``.  The model is
the library's own ``ScriptedModel`` with an async script.  ``ScriptedModel``
records every request it gets, so a model shared by many runs would keep
them all; each run clears the record when it ends, leaving only the append.

The library is the installed ``agentfsm`` (``pip install -e '.[bench]'`` from
the repository's root measures the working tree).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import agentfsm
from agentfsm import Agent, AgentState, Message, tool
from agentfsm.providers import ScriptedModel, call_tool, say

import workload as w

NAME = "agentfsm"


def version() -> str:
    try:
        from importlib.metadata import version as dist_version

        return f"agentfsm {dist_version('agentfsm')} (tree)"
    except Exception:
        return f"agentfsm {agentfsm.__version__} (tree)"


def _last_result(messages: Sequence[Message]) -> object:
    last = messages[-1]
    if last.role == "tool" and last.tool_results:
        return last.tool_results[0].text
    return None


async def _script(messages: Sequence[Message]) -> Message:
    n, wants_tool = await w.model_turn()
    if n >= 2:
        w.check_last_result(n, _last_result(messages))
    if wants_tool:
        return call_tool(w.TOOL_NAME, {"a": n, "b": 1}, call_id=f"call_{n}")
    return say(w.final_text())


@tool  # type: ignore[untyped-decorator]
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return await w.tool_add(a, b)


MODEL = ScriptedModel(_script)
AGENT = Agent(model=MODEL, tools=[add])


async def _run(ctx: w.RunCtx) -> str:
    try:
        state = await AGENT.execute(AgentState.of(w.PROMPT), max_runs=ctx.k + 5)
    finally:
        MODEL.requests.clear()
    if state.status != "ok":
        raise w.WorkloadError(f"run ended {state.status}: {state.error}")
    return str(state.messages[-1].text)


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
