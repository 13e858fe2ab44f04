"""RunHook: the one way to observe a run.

A hook is any object with one or more of these methods; a run looks them up once,
when the hook is attached, and calls only those it found:

* ``run_started(run)`` -- the run was made, before its first step (hooks attached
  later do not hear it: the run has started by then);
* ``transition(run, transition)`` -- after each transition is recorded in
  ``run.trace``, the run's ``chain`` (and, at a terminal, ``result``) updated;
* ``run_ended(run)`` -- after the ``transition`` into a terminal, ``run.result`` set.

Checkpoints, OpenTelemetry, the console's live view and edge coverage plug in here.
A run's hooks are the global ones (in the order they were added), then those given to
``Run(hooks=...)``, then those added with :meth:`Run.add_hook` in turn;
``add_hook(hook, first=True)`` puts a hook ahead of every hook the run has so far (a
checkpointer saves a transition before anything else hears it). Every hook hears an
event before the next hook does.

A hook that raises stops the event there: the exception propagates out of the step
(or out of ``Run(...)`` for ``run_started``), the transition stays recorded, and the
hooks after it do not hear that event.

Global hooks (:func:`add_global_hook`, :func:`global_hooks`) are attached to every
run made while they are registered, in any thread; a global hook that wants per-run
state attaches a hook of its own to the run from ``run_started``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from ._run import Run
    from ._trace import Transition

__all__ = [
    "Hook",
    "RunEndedHook",
    "RunHook",
    "RunStartedHook",
    "TransitionHook",
    "add_global_hook",
    "current_global_hooks",
    "global_hooks",
]


class RunStartedHook(Protocol):
    """Hears a run being made, before its first step."""

    def run_started(self, run: Run) -> None: ...


class TransitionHook(Protocol):
    """Hears each transition once it is recorded."""

    def transition(self, run: Run, transition: Transition) -> None: ...


class RunEndedHook(Protocol):
    """Hears the run reach its terminal, after that transition."""

    def run_ended(self, run: Run) -> None: ...


class RunHook(RunStartedHook, TransitionHook, RunEndedHook, Protocol):
    """A hook that hears all three events; a hook may implement any subset (:data:`Hook`)."""


#: What a run accepts as a hook: an object with at least one of the three methods.
Hook: TypeAlias = RunStartedHook | TransitionHook | RunEndedHook

_lock = threading.Lock()
# Replaced whole under the lock, never changed in place: a run reads it without locking.
_registered: tuple[Hook, ...] = ()


def current_global_hooks() -> tuple[Hook, ...]:
    """The hooks every run made now is given, in the order they were added."""
    return _registered


def add_global_hook(hook: Hook) -> Callable[[], None]:
    """Attach ``hook`` to every run made from now on, in any thread, until the
    function returned is called (calling it again does nothing)."""
    global _registered
    with _lock:
        _registered = (*_registered, hook)
    removed = False

    def remove() -> None:
        global _registered
        nonlocal removed
        with _lock:
            if removed:
                return
            removed = True
            index = next(i for i, h in enumerate(_registered) if h is hook)
            _registered = _registered[:index] + _registered[index + 1 :]

    return remove


@contextlib.contextmanager
def global_hooks(*hooks: Hook) -> Iterator[None]:
    """Attach ``hooks`` to every run made inside the block (in any thread), and to
    none made after it."""
    removers = [add_global_hook(hook) for hook in hooks]
    try:
        yield
    finally:
        for remove in reversed(removers):
            remove()
