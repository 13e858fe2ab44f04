"""Floor: the hand-written loop of ``floor_asyncio`` driven through ``transitions``.

One :class:`transitions.Machine` is built once at import; each run is a model
object added with ``machine.add_model(model, initial=...)`` and removed at the
end, and every round fires the same seven triggers the agent machine does::

    expanding --expanded--> calling --called--> interrupt_check --clear-->
    executing --executed--> propagating --propagated--> until_check
    --unsatisfied--> deciding --loop--> expanding | --done--> ok

Events are fired through the machine (``machine.events[name].trigger(model)``)
and the machine binds nothing onto the models (no ``is_<state>`` helpers, no
per-trigger methods): the leanest way to share one machine among many runs.
States and transitions are the library's stock classes.  The difference to
``floor_asyncio`` is what the machine library costs.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version as _dist_version
from typing import Any

from transitions import Machine

import workload as w

NAME = "floor_transitions"

STATES = [
    "expanding",
    "calling",
    "interrupt_check",
    "executing",
    "propagating",
    "until_check",
    "deciding",
    "ok",
    "error",
]
TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "expanded", "source": "expanding", "dest": "calling"},
    {"trigger": "called", "source": "calling", "dest": "interrupt_check"},
    {"trigger": "clear", "source": "interrupt_check", "dest": "executing"},
    {"trigger": "executed", "source": "executing", "dest": "propagating"},
    {"trigger": "propagated", "source": "propagating", "dest": "until_check"},
    {"trigger": "unsatisfied", "source": "until_check", "dest": "deciding"},
    {"trigger": "loop", "source": "deciding", "dest": "expanding"},
    {"trigger": "done", "source": "deciding", "dest": "ok"},
    {"trigger": "fail", "source": "*", "dest": "error"},
]


class _LeanMachine(Machine):
    """Binds no convenience methods onto models (they cost time and memory per run)."""

    def _checked_assignment(self, model: Any, name: str, func: Any) -> None:
        return None

    def _add_model_to_state(self, state: Any, model: Any) -> None:
        return None


MACHINE = _LeanMachine(
    model=None,
    states=STATES,
    transitions=TRANSITIONS,
    initial=None,
    auto_transitions=False,
    ignore_invalid_triggers=False,
)
EVENTS = MACHINE.events
EXPANDED, CALLED, CLEAR, EXECUTED, PROPAGATED, UNSATISFIED, LOOP, DONE = (
    EVENTS[name].trigger
    for name in (
        "expanded",
        "called",
        "clear",
        "executed",
        "propagated",
        "unsatisfied",
        "loop",
        "done",
    )
)

Message = dict[str, Any]


def version() -> str:
    return f"transitions {_dist_version('transitions')}"


class _Run:
    """The per-run model object the machine moves."""

    state: str

    def __init__(self) -> None:
        self.messages: list[Message] = [{"role": "user", "content": w.PROMPT}]


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
    run = _Run()
    MACHINE.add_model(run, initial="expanding")
    try:
        messages = run.messages
        while True:
            EXPANDED(run)
            reply = await _model(messages)
            messages.append(reply)
            CALLED(run)
            CLEAR(run)
            calls = reply.get("tool_calls") or ()
            for call in calls:
                result = await TOOLS[call["name"]](**call["args"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            EXECUTED(run)
            PROPAGATED(run)
            UNSATISFIED(run)
            if not calls:
                DONE(run)
                return str(reply["content"])
            LOOP(run)
    finally:
        MACHINE.remove_model(run)


async def run_once(k: int) -> None:
    await w.drive(_run, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_run, w.IDLE_K, gate=event)
