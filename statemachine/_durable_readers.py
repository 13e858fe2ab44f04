"""Durable runs as the views read them: the engine a ``--db`` names, its runs, one run.

``--db`` names a DBOS database (a SQLite path, a ``postgresql://`` URL) or a Temporal
server (``temporal://HOST:PORT/NAMESPACE``); both engines answer with the same
records (:mod:`agentfsm._durable_records`), so the ``runs`` and ``view`` commands and
the studio read either through these three calls. Each engine's extra is imported
when its kind of ``--db`` is read, never before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._db_url import temporal_target
from ._durable_records import RunRecord, RunResult
from ._errors import DurableError
from ._results import Failed, Interrupted, Ok, Paused, Terminal

__all__ = ["is_durable", "list_durable", "open_engine", "read_run", "show_run", "terminal"]


def is_durable(db: str) -> bool:
    """Whether ``db`` names a durable engine's (DBOS) database or a Temporal server, not
    an agentfsm store (a SQLite file is DBOS's when it holds DBOS's tables and no runs
    of a store)."""
    if db.startswith(("postgresql://", "postgres://", "postgresql+")):
        return True
    if temporal_target(db) is not None:
        return True
    path = db[len("sqlite:///") :] if db.startswith("sqlite:///") else db
    if not os.path.isfile(path):
        return False
    # the store's own reader of a file's tables: only a SQLite file needs it
    from .store import SQLiteStore

    if SQLiteStore.holds_runs(path):
        return False
    names = SQLiteStore.tables_in(path)
    return names is not None and "workflow_status" in names


def open_engine(db: str | os.PathLike[str]) -> Any:
    """The engine that reads ``db``: Temporal's for a ``temporal://`` URL, else DBOS's."""
    target = temporal_target(os.fspath(db))
    if target is not None:
        # the temporal extra: only a Temporal server needs it
        from .temporal import Engine as TemporalEngine

        return TemporalEngine(target[0], namespace=target[1])
    # the dbos extra: only a DBOS database needs it
    from .durable import Engine as DBOSEngine

    return DBOSEngine(db)


def list_durable(db: str | os.PathLike[str], *, limit: int = 100) -> list[RunRecord]:
    """The runs of a DBOS database or a Temporal server, newest first."""
    with open_engine(db) as engine:
        runs: list[RunRecord] = engine.runs(limit=limit)
    return runs


def show_run(
    db: str | os.PathLike[str], run_id: str
) -> tuple[RunRecord, RunResult | None, Mapping[str, Any] | None]:
    """One run: where it stands, its result if it ended (a Temporal run still going: its
    segments so far, when a worker tells them), and what it waits for, if anything."""
    with open_engine(db) as engine:
        return read_run(engine, run_id)


def read_run(
    engine: Any, run_id: str
) -> tuple[RunRecord, RunResult | None, Mapping[str, Any] | None]:
    """:func:`show_run` with an engine already open (a server keeps one)."""
    record: RunRecord = engine.status(run_id)
    result: RunResult | None = engine.result(run_id, wait=False)
    if result is None and hasattr(engine, "progress"):
        try:
            result = engine.progress(run_id)
        except DurableError:
            result = None  # no worker up to tell it: where it stands is all there is
    waiting = engine.waiting(run_id) if record.status in ("waiting", "orphaned") else None
    return record, result, waiting


def terminal(result: RunResult) -> Terminal | None:
    """The last segment's end as a run page shows it, from the state the run kept."""
    last = result.traces[-1].transitions if result.traces else ()
    if not last:
        return None
    chain = last[-1].chain
    state = result.state
    if state.status == "ok":
        return Ok(chain, state.tool_result)
    if state.status == "interrupted" and state.interrupt_data is not None:
        return Interrupted(chain, state.interrupt_data)
    if state.status == "error" and state.error is not None:
        return Failed(chain, state.error)
    if state.status == "paused":
        return Paused(chain, state.pause_reason)
    return None
