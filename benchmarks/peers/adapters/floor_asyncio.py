"""Floor: the tool loop written by hand on plain asyncio, no machine at all.

What Python itself costs for one model call plus one tool call: a message
list, an awaited fake model, an awaited tool, two appends.
"""

from __future__ import annotations

import asyncio
import platform
from typing import Any

import workload as w

NAME = "floor_asyncio"

Message = dict[str, Any]


def version() -> str:
    return f"python {platform.python_version()}"


async def _model(messages: list[Message]) -> Message:
    n, wants_tool = await w.model_turn()
    w.check_last_result(n, messages[-1].get("content"))
    if wants_tool:
        return {
            "role": "assistant",
            "tool_calls": [{"id": f"call_{n}", "name": w.TOOL_NAME, "args": {"a": n, "b": 1}}],
        }
    return {"role": "assistant", "content": w.final_text()}


TOOLS = {w.TOOL_NAME: w.tool_add}


async def _run(ctx: w.RunCtx) -> str:
    messages: list[Message] = [{"role": "user", "content": w.PROMPT}]
    while True:
        reply = await _model(messages)
        messages.append(reply)
        calls = reply.get("tool_calls")
        if not calls:
            return str(reply["content"])
        for call in calls:
            result = await TOOLS[call["name"]](**call["args"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
