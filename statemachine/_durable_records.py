"""What a durable engine (DBOS or Temporal) says of a run: its record in a listing, its result.

Both engines answer with these, so a program moves from one to the other without
changing what it reads.
"""

from __future__ import annotations

from typing import Literal

import attrs

from ._state import AgentState
from ._trace import Trace

__all__ = ["RunRecord", "RunResult", "RunState"]

RunState = Literal[
    "queued",
    "running",
    "waiting",
    "orphaned",
    "ok",
    "paused",
    "interrupted",
    "error",
    "cancelled",
    "failed",
]


@attrs.frozen
class RunResult:
    """A finished run: the state to keep and one trace per segment (each a machine path)."""

    run_id: str
    state: AgentState
    traces: tuple[Trace, ...]
    #: How each segment ended: ``"ok"``, ``"interrupted"``, ``"paused: draining"``...
    ends: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return self.state.status


@attrs.frozen
class RunRecord:
    """A run as a listing shows it: ``queued`` (on ``queue``, for a worker serving it),
    ``running``, ``waiting`` (for decisions), ``orphaned`` (DBOS only; nothing runs it: its worker
    is gone, or runs another version now, and none took it over yet; ``reason`` says
    which, and what to do), or how it ended."""

    run_id: str
    status: RunState
    agent: str | None
    executor: str | None
    created: float | None
    updated: float | None
    queue: str | None = None
    #: Why an ``orphaned`` run is, and what takes it over (None for any other).
    reason: str | None = None
