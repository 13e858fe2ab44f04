"""Callbacks that may be slow: run them off the event loop, in order, with a bounded queue.

A chain fires its callbacks synchronously on the event loop, so that a raising
callback fails the run (``callback_error``) with the chain as it was. The price:
a callback that blocks (a network call, a slow disk) stalls every run on that
loop. Keep loop callbacks short (count, log, put on a queue), or wrap slow ones
in :func:`off_loop`: the loop only enqueues, one worker thread calls them in
order, and a queue of at most ``max_pending`` events bounds the memory a
stalled handler can hold. What does not fit is dropped and counted, never
waited for. A handler's exception is kept in ``errors``; it cannot fail the
run, which has moved on.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

__all__ = ["OffLoop", "off_loop"]

_STOP: Final = object()


class OffLoop(Mapping[str, Callable[..., Any]]):
    """Callbacks whose handlers run on a worker thread; pass it in ``callbacks=[...]``."""

    def __init__(self, handlers: Mapping[str, Callable[..., Any]], max_pending: int) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be a positive integer, got: {max_pending!r}")
        self._handlers = dict(handlers)
        self._queue: queue.Queue[Any] = queue.Queue(max_pending)
        self._wrapped = {name: self._enqueuer(name) for name in self._handlers}
        #: Events dropped because ``max_pending`` were waiting.
        self.dropped = 0
        #: ``(callback name, exception)`` of handlers that raised (the last 100).
        self.errors: list[tuple[str, BaseException]] = []
        self._worker = threading.Thread(target=self._work, name="agentfsm callbacks", daemon=True)
        self._worker.start()

    def _enqueuer(self, name: str) -> Callable[..., None]:
        def enqueue(*args: Any) -> None:
            try:
                self._queue.put_nowait((name, args))
            except queue.Full:
                self.dropped += 1

        return enqueue

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                name, args = item
                try:
                    self._handlers[name](*args)
                except Exception as exc:
                    self.errors = [*self.errors[-99:], (name, exc)]
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every event queued so far was handled (call it off the loop, or at exit)."""
        self._queue.join()

    def close(self) -> None:
        """Handle what is queued, then stop the worker."""
        self._queue.put(_STOP)
        self._worker.join()

    def __getitem__(self, name: str) -> Callable[..., Any]:
        return self._wrapped[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._wrapped)

    def __len__(self) -> int:
        return len(self._wrapped)


def off_loop(handlers: Mapping[str, Callable[..., Any]], *, max_pending: int = 1000) -> OffLoop:
    """``handlers`` run in order on a worker thread instead of on the event loop."""
    return OffLoop(handlers, max_pending)
