"""One module per library under test, all with the same small interface.

Each module exposes::

    NAME: str                                  # row label
    def version() -> str                       # the library's version
    async def run_once(k: int) -> None         # one run of k tool rounds, checked
    async def idle_run(event: asyncio.Event) -> None
        # one run (k = 1) whose model awaits ``event`` before its first reply

A module imports its library at top level, so a missing library shows up as
an ImportError when the module is imported; the runner skips it with a note.
"""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType
from typing import Protocol, cast

__all__ = ["ADAPTERS", "FLOORS", "REFERENCE", "Adapter", "load"]

#: Every adapter, in table order.
ADAPTERS: tuple[str, ...] = (
    "floor_asyncio",
    "floor_transitions",
    "floor_lean",
    "agentfsm",
    "agentfsm_model",
    "pydantic_ai",
    "langgraph",
    "openai_agents",
    "burr",
)
#: The rows every other row is divided by: Python alone, and Python firing the
#: same lean ``transitions`` triggers agentfsm fires.
FLOORS: tuple[str, ...] = ("floor_asyncio", "floor_lean")
REFERENCE = "agentfsm"


class Adapter(Protocol):
    NAME: str

    def version(self) -> str: ...

    async def run_once(self, k: int) -> None: ...

    async def idle_run(self, event: asyncio.Event) -> None: ...


def load(name: str) -> Adapter:
    """Import ``adapters.<name>``; raises ImportError when its library is missing."""
    if name not in ADAPTERS:
        raise KeyError(f"unknown adapter {name!r}; known: {', '.join(ADAPTERS)}")
    module: ModuleType = importlib.import_module(f"{__name__}.{name}")
    return cast(Adapter, module)
