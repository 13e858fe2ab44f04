"""The workload every adapter runs, and the checks that keep adapters honest.

A run is one conversation with a fake, zero-latency model:

* model call ``n`` (1-based) for ``n <= k`` asks for one tool call, ``add(a=n, b=1)``;
* model call ``k + 1`` answers with the final text ``"done <k>"``.

So a run makes ``k`` tool calls and ``k + 1`` model calls.  From its second
call on, the model also checks that the conversation it was handed ends with
the previous tool result (``n``), so an adapter cannot skip feeding results
back.  The per-run bookkeeping lives in a :class:`RunCtx` reached through a
context variable: every library under test copies the asyncio context into
the tasks it spawns, so the fake model and the tool find their own run's
counters without any library-specific plumbing, and each step stays O(1).

For the idle-memory measurement a run carries a ``gate``: its first model
call registers with :data:`ARRIVALS` and then awaits the gate before replying.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "ARRIVALS",
    "IDLE_K",
    "PROMPT",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "Arrivals",
    "RunCtx",
    "WorkloadError",
    "check_last_result",
    "current",
    "drive",
    "final_text",
    "model_turn",
    "tool_add",
]

TOOL_NAME = "add"
TOOL_DESCRIPTION = "Add two integers."
PROMPT = "Count with the add tool, then say done."
#: Tool rounds of an idle run once released: its memory is measured at the gate,
#: before the first reply, so K does not change it; 0 makes releasing 10,000 quick.
IDLE_K = 0


class WorkloadError(AssertionError):
    """An adapter did not run the workload as specified."""


@dataclass(slots=True)
class RunCtx:
    """Counters of one run."""

    k: int
    gate: asyncio.Event | None = None
    model_calls: int = 0
    tool_calls: int = 0


class Arrivals:
    """Counts runs that reached their gate; wakes a waiter when enough did."""

    __slots__ = ("count", "reached", "target")

    def __init__(self) -> None:
        self.count = 0
        self.target = 0
        self.reached: asyncio.Event | None = None

    def expect(self, target: int) -> asyncio.Event:
        self.count = 0
        self.target = target
        self.reached = asyncio.Event()
        return self.reached

    def arrive(self) -> None:
        self.count += 1
        if self.reached is not None and self.count >= self.target:
            self.reached.set()


ARRIVALS = Arrivals()
_CURRENT: ContextVar[RunCtx] = ContextVar("peers_run_ctx")


def current() -> RunCtx:
    return _CURRENT.get()


async def model_turn() -> tuple[int, bool]:
    """Account one model call; return ``(n, wants_tool)``.

    Awaits the run's gate on the first call when the run has one.
    """
    ctx = _CURRENT.get()
    ctx.model_calls += 1
    if ctx.gate is not None and ctx.model_calls == 1:
        ARRIVALS.arrive()
        await ctx.gate.wait()
    n = ctx.model_calls
    return n, n <= ctx.k


def check_last_result(n: int, observed: object) -> None:
    """On model call ``n >= 2`` the last message must be the result ``n``."""
    if n >= 2 and str(observed) != str(n):
        raise WorkloadError(f"model call {n}: expected last tool result {n!r}, got {observed!r}")


def final_text() -> str:
    return f"done {_CURRENT.get().k}"


async def tool_add(a: int, b: int) -> int:
    """The tool body shared by every adapter (wrapped per library)."""
    _CURRENT.get().tool_calls += 1
    return a + b


async def drive(
    run: Callable[[RunCtx], Awaitable[str]],
    k: int,
    gate: asyncio.Event | None = None,
) -> None:
    """Run one conversation through ``run`` and check it did the workload."""
    ctx = RunCtx(k=k, gate=gate)
    token = _CURRENT.set(ctx)
    try:
        answer = await run(ctx)
    finally:
        _CURRENT.reset(token)
    if ctx.tool_calls != k:
        raise WorkloadError(f"tool ran {ctx.tool_calls} times, expected {k}")
    if ctx.model_calls != k + 1:
        raise WorkloadError(f"model called {ctx.model_calls} times, expected {k + 1}")
    if answer != f"done {k}":
        raise WorkloadError(f"final answer {answer!r}, expected {f'done {k}'!r}")
