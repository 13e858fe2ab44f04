"""Burr (``apache-burr``): a two-action graph, ``model`` and ``tool``.

The graph (actions and transitions) is built once with ``GraphBuilder``; each
run builds its ``Application`` from it with the run's initial state, as Burr
keeps state on the application, and runs ``await app.arun(halt_after=...)``.
``model`` appends the assistant message and sets ``call`` (or clears it and
sets ``answer``); ``tool`` runs the call and appends its result.  With no
call pending, ``model`` goes to ``finish``, which halts the run.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version as _dist_version
from typing import Any

from burr.core import Application, ApplicationBuilder, State, default, when
from burr.core.action import action
from burr.core.graph import GraphBuilder

import workload as w

NAME = "burr"


def version() -> str:
    return f"apache-burr {_dist_version('apache-burr')}"


@action(reads=["messages"], writes=["messages", "call", "answer"])
async def model(state: State[Any]) -> State[Any]:
    n, wants_tool = await w.model_turn()
    if n >= 2:
        w.check_last_result(n, state["messages"][-1].get("content"))
    if wants_tool:
        call = {"id": f"call_{n}", "name": w.TOOL_NAME, "args": {"a": n, "b": 1}}
        reply: dict[str, Any] = {"role": "assistant", "tool_calls": [call]}
        return state.append(messages=reply).update(call=call)
    text = w.final_text()
    reply = {"role": "assistant", "content": text}
    return state.append(messages=reply).update(call=None, answer=text)


TOOLS = {w.TOOL_NAME: w.tool_add}


@action(reads=["call"], writes=["messages", "call"])
async def tool(state: State[Any]) -> State[Any]:
    call = state["call"]
    result = await TOOLS[call["name"]](**call["args"])
    message = {"role": "tool", "tool_call_id": call["id"], "content": result}
    return state.append(messages=message).update(call=None)


@action(reads=["answer"], writes=[])
async def finish(state: State[Any]) -> State[Any]:
    return state


GRAPH = (
    GraphBuilder()  # type: ignore[no-untyped-call]
    .with_actions(model=model, tool=tool, finish=finish)
    .with_transitions(
        ("model", "tool", when(call__isnot=None)),  # type: ignore[no-untyped-call]
        ("model", "finish", default),
        ("tool", "model", default),
    )
    .build()
)


async def _run(ctx: w.RunCtx) -> str:
    app: Application[Any] = (
        ApplicationBuilder()  # type: ignore[no-untyped-call]
        .with_graph(GRAPH)
        .with_state(messages=[{"role": "user", "content": w.PROMPT}], call=None, answer=None)
        .with_entrypoint("model")
        .build()
    )
    _, _, state = await app.arun(halt_after=["finish"])
    return str(state["answer"])


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
