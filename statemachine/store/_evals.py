"""The store's table of evals: one row per eval report, its JSON as the store keeps it.

:mod:`agentfsm.evals` writes and reads reports through :class:`SQLiteStore`'s
``save_eval``, ``evals`` and ``read_eval``; the SQL is here, the store's own.
"""

from __future__ import annotations

import difflib
import sqlite3
import threading
from typing import Final

from .._errors import StoreError
from ._file import _guard

__all__ = ["EVALS_SCHEMA", "EvalRows", "list_evals", "read_eval", "write_eval"]

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
    try:
        con.execute(EVALS_SCHEMA)  # a store made before evals gets the table with its first
        con.execute(
            "INSERT INTO evals (eval_id, name, dataset, created, doc) VALUES (?, ?, ?, ?, ?)",
            (eval_id, name, dataset, created, doc),
        )
    except sqlite3.IntegrityError:
        raise StoreError(f"an eval {eval_id!r} is already saved; evals are kept once") from None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot save eval {eval_id!r}: {exc}") from exc


def list_evals(con: sqlite3.Connection) -> list[tuple[str, str, str, float]]:
    """``(eval_id, name, dataset, created)`` of every kept report, newest first."""
    if not _has_table(con):
        return []
    rows = con.execute(
        "SELECT eval_id, name, dataset, created FROM evals ORDER BY created DESC, eval_id"
    ).fetchall()
    return [(str(i), str(n), str(d), float(c)) for i, n, d, c in rows]


def read_eval(con: sqlite3.Connection, eval_id: str, path: str) -> str:
    """The JSON of the report kept under ``eval_id``; a StoreError naming the closest id
    kept (or how many are) when there is none."""
    row = None
    if _has_table(con):
        row = con.execute("SELECT doc FROM evals WHERE eval_id = ?", (eval_id,)).fetchone()
    if row is not None:
        return str(row[0])
    kept = [row[0] for row in list_evals(con)]
    close = difflib.get_close_matches(eval_id, kept, n=1)
    said = (
        f"did you mean {close[0]!r}?"
        if close
        else (f"it keeps {len(kept)}: agentfsm eval list" if kept else "it keeps none")
    )
    raise StoreError(f"no eval {eval_id!r} in {path}; {said}")


class EvalRows:
    """What :class:`SQLiteStore` does with eval reports: keep, list and read them."""

    path: str
    _con: sqlite3.Connection
    _lock: threading.Lock

    def save_eval(self, eval_id: str, doc: str, *, name: str, dataset: str, created: float) -> None:
        """Keep an eval report's JSON (:mod:`agentfsm.evals`) under a new ``eval_id``."""
        with self._lock, _guard(self.path):
            write_eval(self._con, eval_id, doc, name, dataset, created)

    def evals(self) -> list[tuple[str, str, str, float]]:
        """``(eval_id, name, dataset, created)`` of every kept eval report, newest first."""
        with self._lock, _guard(self.path):
            return list_evals(self._con)

    def read_eval(self, eval_id: str) -> str:
        """The JSON of the eval report kept under ``eval_id`` (StoreError: none is)."""
        with self._lock, _guard(self.path):
            return read_eval(self._con, eval_id, self.path)
