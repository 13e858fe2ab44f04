"""Floor: the hand-written loop of ``floor_asyncio`` driven through stock ``transitions``.

One :class:`transitions.Machine` is built once at import; each run is a model
object added with ``machine.add_model(model, initial=...)`` and removed at the
end, and every round fires the same seven triggers the agent machine does::

    expanding --expanded--> calling --called--> interrupt_check --clear-->
    executing --executed--> propagating --propagated--> until_check
    --unsatisfied--> deciding --loop--> expanding | --done--> ok

Events are fired through the machine (``machine.events[name].trigger(model)``)
and the machine binds nothing onto the models (no ``is_<state>`` helpers, no
per-trigger methods): the leanest way to share one machine among many runs.
States, transitions and events are the library's stock classes.  The
difference to ``floor_asyncio`` is what stock ``transitions`` costs;
``floor_lean`` runs the same loop on agentfsm's lean machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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


class _UnboundMachine(Machine):
    """Binds no convenience methods onto models (they cost time and memory per run)."""

    def _checked_assignment(self, model: Any, name: str, func: Any) -> None:
        return None

    def _add_model_to_state(self, state: Any, model: Any) -> None:
        return None


MACHINE_ARGS: dict[str, Any] = {
    "model": None,
    "states": STATES,
    "transitions": TRANSITIONS,
    "initial": None,
    "auto_transitions": False,
    "ignore_invalid_triggers": False,
}

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


def loop(machine: Machine) -> Callable[[w.RunCtx], Awaitable[str]]:
    """The workload's loop, firing ``machine``'s seven triggers per round."""
    events = machine.events
    expanded, called, clear, executed, propagated, unsatisfied, loop_, done = (
        events[name].trigger
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

    async def run(ctx: w.RunCtx) -> str:
        run = _Run()
        machine.add_model(run, initial="expanding")
        try:
            messages = run.messages
            while True:
                expanded(run)
                reply = await _model(messages)
                messages.append(reply)
                called(run)
                clear(run)
                calls = reply.get("tool_calls") or ()
                for call in calls:
                    result = await TOOLS[call["name"]](**call["args"])
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
                executed(run)
                propagated(run)
                unsatisfied(run)
                if not calls:
                    done(run)
                    return str(reply["content"])
                loop_(run)
        finally:
            machine.remove_model(run)

    return run


_RUN = loop(_UnboundMachine(**MACHINE_ARGS))


async def run_once(k: int) -> None:
    await w.drive(_RUN, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_RUN, w.IDLE_K, gate=event)
