"""Durable runs on Temporal: the same durable contract as :mod:`agentfsm.durable`.

One run is one Temporal workflow (``agentfsm.run``) that drives the agent's
machine; each model call and each tool call is one activity, whose result the
history records as an agentfsm JSON document (through its data converter).
Every other state is pure and replays, in Temporal's sandbox. A worker killed
mid-run is replaced by any other worker of the run's task queue, which replays
the history (no recorded call runs again) and goes on. A run waiting for
approval takes :meth:`Engine.decide` from any process, as a Temporal update:
the first decisions that fit win, any other raise :class:`DecisionConflictError`,
and the same ones again change nothing.

Install with ``pip install 'agentfsm[temporal]'``::

    engine = Engine("127.0.0.1:7233")                    # a Temporal server's address
    engine.register("support", agent)                    # workers: before launch
    engine.launch()                                      # serves the task queue agentfsm:support
    run_id = engine.submit(AgentState.of("hi"), agent="support", run_id="job-1")
    engine.status(run_id).status                         # "queued", "running", "waiting"...
    engine.result(run_id).state

Each agent's runs go to its own task queue (``agentfsm:NAME``), so workers of
different agents share one server and never take each other's runs.
"""

from __future__ import annotations

try:
    import temporalio as _temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "agentfsm.temporal runs on Temporal: pip install 'agentfsm[temporal]'"
    ) from exc

from .._moved import show_at
from ._engine import Engine

__all__ = ["Engine"]

show_at(__name__, globals())
