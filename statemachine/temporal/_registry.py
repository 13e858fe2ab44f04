"""The agents this process's worker runs, and the runs it holds, by name.

A workflow finds its agent here by the name it was submitted under (agents are
never serialized into a history). The module is passed through Temporal's
sandbox, so the worker and its workflows share these objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from agentfsm import Agent

__all__ = ["AGENTS", "HELD", "LISTENERS", "SETTINGS", "Held", "Listener", "tell"]

#: Agents by the stable name runs are submitted under.
AGENTS: dict[str, Agent] = {}


class Held:
    """Run ids whose workflow this worker has in hand: the ones a drain tells to pause."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, int] = {}

    def enter(self, run_id: str) -> None:
        with self._lock:
            self._runs[run_id] = self._runs.get(run_id, 0) + 1

    def leave(self, run_id: str) -> None:
        with self._lock:
            left = self._runs.get(run_id, 1) - 1
            if left > 0:
                self._runs[run_id] = left
            else:
                self._runs.pop(run_id, None)

    def runs(self) -> list[str]:
        with self._lock:
            return sorted(self._runs)


HELD: Final = Held()

#: Worker settings the workflows read: ``policy`` (``pinned`` or ``compatible``).
SETTINGS: dict[str, str] = {"policy": "pinned"}

#: A listener of a worker's runs: ``(event, run_id, detail)``, event ``start`` (a run's
#: first execution began here) or ``end`` (it ended here, ``detail["status"]``).
Listener = Callable[[str, str, Mapping[str, Any]], None]
LISTENERS: list[Listener] = []


def tell(event: str, run_id: str, detail: Mapping[str, Any]) -> None:
    """Tell the listeners; one that fails never fails the run."""
    for listener in list(LISTENERS):
        try:
            listener(event, run_id, detail)
        except Exception:  # a log line is not worth a run
            continue
