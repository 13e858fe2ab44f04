"""Saved runs: checkpoints at every state boundary, and resuming from the last one.

:mod:`~agentfsm.store.base` says what a store is, :mod:`~agentfsm.store.sqlite`
is the embedded one, :mod:`~agentfsm.store.checkpoint` saves and restores runs.
"""

from .base import (
    ResumeError,
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
from .checkpoint import (
    Checkpointer,
    SavedRun,
    checkpoint,
    fork_run,
    load_run,
    restore_run,
    start_run,
)
from .sqlite import SQLiteStore

__all__ = [
    "Checkpointer",
    "ResumeError",
    "RunExistsError",
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
