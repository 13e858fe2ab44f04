"""The one bridge behind every ``*_sync`` method: an event loop driven from plain code.

A bridge keeps its loop across calls (a run stepped with ``step_sync`` keeps its
model's pooled connections between steps) and, once the work is finished,
closes the model's connections on that same loop before closing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["SyncBridge", "close_model", "run_sync"]

_T = TypeVar("_T")


async def _boxed(coroutine: Coroutine[Any, Any, _T], box: list[_T]) -> None:
    """Keep the result off the task: on its way out, ``asyncio.Runner`` formats its main
    task (restoring the SIGINT handler), and a task's repr holds its result's repr, which
    for a finished run is the whole conversation."""
    box.append(await coroutine)


async def close_model(model: Any) -> None:
    """Close a model's connections, if it holds any (``aclose``)."""
    close = getattr(model, "aclose", None)
    if close is not None:
        await close()


class SyncBridge:
    """Runs coroutines for sync callers on one event loop, kept until the work is done."""

    __slots__ = ("_runner",)

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None

    def run(
        self,
        coroutine: Coroutine[Any, Any, _T],
        model: Any,
        finished: Callable[[], bool] = lambda: True,
    ) -> _T:
        """Run ``coroutine`` to its end; when ``finished()``, close ``model`` and the loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coroutine.close()
            raise RuntimeError(
                "A *_sync method was called inside a running event loop; await the async "
                "method instead (run.step(), run.run(), agent.execute(...), chain.run(...))."
            )
        if self._runner is None:
            self._runner = asyncio.Runner()
        box: list[_T] = []
        try:
            self._runner.run(_boxed(coroutine, box))
            return box[0]
        finally:
            if finished():
                try:
                    self._runner.run(close_model(model))
                finally:
                    self._runner.close()
                    self._runner = None


def run_sync(coroutine: Coroutine[Any, Any, _T], model: Any) -> _T:
    """Run ``coroutine`` once, then close ``model``'s connections and the loop."""
    return SyncBridge().run(coroutine, model)
