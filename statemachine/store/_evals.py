"""The store's table of evals: one row per eval report, its JSON as the store keeps it.

:mod:`agentfsm.evals` writes and reads reports through :class:`SQLiteStore`'s
``save_eval``, ``evals`` and ``read_eval``; the SQL is here, the store's own.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from .._errors import StoreError

__all__ = ["EVALS_SCHEMA", "list_evals", "read_eval", "write_eval"]

EVALS_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS evals (
    eval_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    dataset TEXT NOT NULL,
    created REAL NOT NULL,
    doc TEXT NOT NULL
)
"""


def _has_table(con: sqlite3.Connection) -> bool:
    row = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'evals'")
    return row.fetchone() is not None


def write_eval(
    con: sqlite3.Connection, eval_id: str, doc: str, name: str, dataset: str, created: float
) -> None:
    """Keep one report (a new id; an id already kept is refused)."""
    con.execute(EVALS_SCHEMA)  # a store made before evals gets the table on its first one
    try:
        con.execute(
            "INSERT INTO evals (eval_id, name, dataset, created, doc) VALUES (?, ?, ?, ?, ?)",
            (eval_id, name, dataset, created, doc),
        )
    except sqlite3.IntegrityError:
        raise StoreError(f"an eval {eval_id!r} is already saved; evals are kept once") from None


def list_evals(con: sqlite3.Connection) -> list[tuple[str, str, str, float]]:
    """``(eval_id, name, dataset, created)`` of every kept report, newest first."""
    if not _has_table(con):
        return []
    rows = con.execute(
        "SELECT eval_id, name, dataset, created FROM evals ORDER BY created DESC, eval_id"
    ).fetchall()
    return [(str(i), str(n), str(d), float(c)) for i, n, d, c in rows]


def read_eval(con: sqlite3.Connection, eval_id: str) -> str | None:
    """The JSON of the report kept under ``eval_id``; None when there is none."""
    if not _has_table(con):
        return None
    row = con.execute("SELECT doc FROM evals WHERE eval_id = ?", (eval_id,)).fetchone()
    return None if row is None else str(row[0])
