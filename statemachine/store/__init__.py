"""Saved runs: checkpoints at every state boundary, resuming from the last one, documents.

:class:`SQLiteStore` is the embedded store (:class:`Store` says what any store is;
:class:`Leases` and :class:`Deletes` are what a store may also do).
:class:`Checkpointer` saves a run as it moves, :func:`load_run` reads one back,
:func:`fork_run` starts a new run from a step of another. The store knows runs,
never agents: :func:`agentfsm.start_run` and :func:`agentfsm.restore_run` bind
a saved run to an agent. :func:`dump`/:func:`load` (and their string forms) write and read one
chain, state or trace as a versioned JSON document. Errors are
:class:`agentfsm.StoreError` and its kinds.
"""

from __future__ import annotations

from .._moved import forward, keep_names, show_at
from .._serialization import dump, dumps, load, load_trace, loads
from ._base import Deletes, Leases, RunDigest, RunInfo, Store, StoredRun, StoreWrite
from ._checkpointer import Checkpointer, checkpoint
from ._fork import fork_run, migrate_run
from ._load import SavedRun, load_run
from ._sqlite import SQLiteStore

__all__ = [
    "Checkpointer",
    "Deletes",
    "Leases",
    "RunDigest",
    "RunInfo",
    "SQLiteStore",
    "SavedRun",
    "Store",
    "StoreWrite",
    "StoredRun",
    "checkpoint",
    "dump",
    "dumps",
    "fork_run",
    "load",
    "load_run",
    "load_trace",
    "loads",
    "migrate_run",
]

#: The last release's names this face no longer exports, kept one more release.
__getattr__ = forward(
    __name__,
    ("agentfsm", "agentfsm.store._base", "agentfsm._serialization"),
    frozenset(
        {
            "ResumeError",
            "dump_trace",
            "restore_run",
            "start_run",
            "RunExistsError",
            "RunFinishedError",
            "RunInUseError",
            "RunNotFoundError",
            "RunStatus",
            "StoreError",
        }
    ),
)


show_at(__name__, globals())
keep_names(__name__)
