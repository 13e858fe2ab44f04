"""Durable runs on DBOS Transact: SQLite on one machine, PostgreSQL on many.

One run is one DBOS workflow; each model call and each tool call is one
recorded step whose output is an agentfsm JSON document, and every other state
is pure and replays. A worker killed mid-run is replaced by another that
replays the recorded steps (no recorded tool runs twice) and goes on; a worker
told to drain pauses its runs at their next state boundary with reason
``"draining"`` and hands them back to the queue. A run waiting for approval
takes :meth:`Engine.decide` from any process, and one whose wait timed out
(it ended ``interrupted``) is resumed by it later.

Install with ``pip install 'agentfsm[dbos]'``::

    engine = Engine("postgresql://localhost/agents")    # or a SQLite file path
    engine.register("support", agent)                    # workers: before launch
    engine.launch()                                      # serves the queue agentfsm:support
    run_id = engine.submit(AgentState.of("hi"), agent="support", run_id="job-1")
    engine.status(run_id).status                         # "queued", "running", "waiting"...
    engine.result(run_id).state

Each agent's runs go to its own queue (named after the agent), so workers of
different agents share one database and never take each other's runs.
"""

from __future__ import annotations

try:
    import dbos as _dbos  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "agentfsm.durable runs on DBOS Transact: pip install 'agentfsm[dbos]'"
    ) from exc

from .._moved import forward, show_at
from ._engine import (
    Engine,
    RunRecord,
    RunResult,
    list_runs,
)

__all__ = [
    "Engine",
    "RunRecord",
    "RunResult",
    "list_runs",
]

#: The last release's names this face no longer exports, kept one more release.
__getattr__ = forward(
    __name__,
    ("agentfsm", "agentfsm.durable._engine"),
    frozenset(
        {
            "agent_queue",
            "app_version",
            "database_url",
            "DecisionConflictError",
            "DurableError",
            "ResumeError",
            "RunExistsError",
            "RunNotFoundError",
            "StoreError",
        }
    ),
)
show_at(__name__, globals())
