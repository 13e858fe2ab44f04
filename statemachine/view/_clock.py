"""Each step's wall-clock time, read from a SQLite store's log of checkpoints.

A run's transitions keep how long each took, not when; the store's log keeps when
each checkpoint was written and how many steps the run had then.
"""

from __future__ import annotations

import sqlite3

__all__ = ["wall_clock"]


def wall_clock(path: str, run_id: str, steps: int) -> list[float | None]:
    """When each of the run's ``steps`` was saved (seconds since the epoch), or None."""
    out: list[float | None] = [None] * steps
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return out
    try:
        rows = con.execute(
            "SELECT steps, updated FROM log WHERE run_id = ? ORDER BY rowid", (run_id,)
        ).fetchall()
    except sqlite3.Error:  # a store made before the log
        return out
    finally:
        con.close()
    done = 0
    for saved, when in rows:
        if isinstance(saved, int) and isinstance(when, float | int):
            for k in range(done, min(saved, steps)):
                out[k] = float(when)
            done = max(done, min(saved, steps))
    return out
