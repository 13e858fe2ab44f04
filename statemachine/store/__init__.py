"""Saved runs: checkpoints at every state boundary, and resuming from the last one.

:mod:`~agentfsm.store.base` says what a store is, :mod:`~agentfsm.store.sqlite`
is the embedded one, :mod:`~agentfsm.store.checkpointer` saves runs,
:mod:`~agentfsm.store.load` loads them and :mod:`~agentfsm.store.fork` saves forks
and migrations. The store knows runs, never agents: :func:`start_run` and
:func:`restore_run`, which bind a saved run to an agent, live on the agent side
(``agentfsm._resume``) and are exported here as they always were.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The deprecated module is imported before the function of the same name is bound, so
# that importing it later (which sets the package's attribute) never hides the function.
from . import checkpoint as _deprecated  # noqa: F401
from .base import (
    Deletes,
    Leases,
    ResumeError,
    RunDigest,
    RunExistsError,
    RunFinishedError,
    RunInfo,
    RunInUseError,
    RunNotFoundError,
    RunStatus,
    Store,
    StoredRun,
    StoreError,
    StoreWrite,
)
from .checkpointer import Checkpointer, checkpoint
from .fork import fork_run
from .load import SavedRun, load_run
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .._resume import restore_run, start_run

__all__ = [
    "Checkpointer",
    "Deletes",
    "Leases",
    "ResumeError",
    "RunExistsError",
    "RunDigest",
    "RunFinishedError",
    "RunInUseError",
    "RunInfo",
    "RunNotFoundError",
    "RunStatus",
    "SQLiteStore",
    "SavedRun",
    "Store",
    "StoreError",
    "StoreWrite",
    "StoredRun",
    "checkpoint",
    "fork_run",
    "load_run",
    "restore_run",
    "start_run",
]


def __getattr__(name: str) -> Any:
    """``start_run`` and ``restore_run``, from the agent side when first asked for (the
    agent side imports the store, so the store cannot import it as it loads)."""
    if name in ("start_run", "restore_run"):
        from .. import _resume

        return getattr(_resume, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
