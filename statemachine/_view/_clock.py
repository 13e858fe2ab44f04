"""Each step's wall-clock time, read from a SQLite store's log of checkpoints.

A run's transitions keep how long each took, not when; the store's log keeps when
each checkpoint was written and how many steps the run had then.
"""

from __future__ import annotations

import os

from .._errors import StoreError
from .._serialization import FormatError
from ..store import SQLiteStore

__all__ = ["wall_clock"]


def wall_clock(
    store: SQLiteStore | str | os.PathLike[str], run_id: str, steps: int
) -> list[float | None]:
    """When each of the run's ``steps`` was saved (seconds since the epoch), or None.

    ``store`` is an open store or the path of one. The times are for showing: a store
    that cannot say (one made before the log, a file that is not a store) leaves them
    all unknown.
    """
    out: list[float | None] = [None] * steps
    try:
        if isinstance(store, SQLiteStore):
            times = store.checkpoint_times(run_id)
        else:
            with SQLiteStore(store, read_only=True) as opened:
                times = opened.checkpoint_times(run_id)
    except (StoreError, FormatError):
        return out
    done = 0
    for saved, when in times:
        for k in range(done, min(saved, steps)):
            out[k] = when
        done = max(done, min(saved, steps))
    return out
