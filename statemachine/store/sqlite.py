"""SQLiteStore: runs in one SQLite file (stdlib ``sqlite3``, WAL), the embedded store.

``synchronous="NORMAL"`` survives a killed process; ``"FULL"`` also a power cut.
A running run's writer holds a lease on it (renewed by every checkpoint, given
up when the run ends), so a second process resuming the same run is refused
until the run ends or the lease expires (the holder died).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Final, Literal

from ..serialization import FORMAT, FormatError, check_format
from .base import (
    RunExistsError,
    RunInfo,
    RunInUseError,
    RunNotFoundError,
    StoredRun,
    StoreError,
    StoreWrite,
)

__all__ = ["SQLiteStore"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    state TEXT NOT NULL,
    segments INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    summary TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    result TEXT,
    agent_state TEXT,
    owner TEXT,
    lease_until REAL
);
CREATE TABLE IF NOT EXISTS segments (
    run_id TEXT NOT NULL, segment INTEGER NOT NULL, header TEXT NOT NULL,
    PRIMARY KEY (run_id, segment)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS contexts (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS transitions (
    run_id TEXT NOT NULL, segment INTEGER NOT NULL, seq INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (run_id, segment, seq)
);
"""
# transitions is a rowid table (stores made before keep theirs WITHOUT ROWID; both read and
# write alike): its rows, most of a checkpoint's bytes, are appended at the end of the rowid
# b-tree, which grows by a fresh page, where a WITHOUT ROWID b-tree rebalances three leaves.
# A checkpoint writes a seventh fewer WAL frames.

_UPSERT_RUN: Final = """
INSERT INTO runs (run_id, created, status, state, segments, steps, summary, updated,
                  result, agent_state, owner, lease_until)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    status = excluded.status, state = excluded.state, segments = excluded.segments,
    steps = excluded.steps, summary = excluded.summary, updated = excluded.updated,
    result = excluded.result, agent_state = excluded.agent_state,
    owner = excluded.owner, lease_until = excluded.lease_until
"""

_RENEW_RUN: Final = """
UPDATE runs SET status = ?, state = ?, segments = ?, steps = ?, summary = ?, updated = ?,
    result = ?, agent_state = ?, owner = ?, lease_until = ?
WHERE run_id = ? AND owner = ?
"""

_TABLES: Final = ("runs", "segments", "messages", "contexts", "transitions")


def _alive(owner: str) -> bool:
    """Whether a lease holder (``host:pid:token``) may still be running: a process
    of this host that is gone holds nothing, whatever its lease says."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _store_error(path: str, exc: sqlite3.DatabaseError) -> StoreError:
    """SQLite's error about the file itself as a :class:`StoreError` that names it."""
    if isinstance(exc, sqlite3.OperationalError):
        if "locked" in str(exc) or "busy" in str(exc):
            return StoreError(
                f"The store {path} stayed locked by another process past the timeout: {exc}"
            )
        return StoreError(f"The store {path} cannot be used: {exc}")
    return StoreError(
        f"The store {path} is damaged or is not an agentfsm store ({exc}); "
        "restore it from a backup or start a new one."
    )


@contextlib.contextmanager
def _guard(path: str) -> Iterator[None]:
    """:func:`_store_error` around a block."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise _store_error(path, exc) from exc


def _open_read_only(path: str, timeout: float) -> sqlite3.Connection:
    """A connection that cannot write (SQLite's ``mode=ro``), to a checked agentfsm store."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    con = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
    try:
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
        if not {"meta", "runs"} <= tables:
            raise FormatError(f"{path} is not an agentfsm store (it has no agentfsm tables)")
        row = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        check_format({"format": None if row is None else row[0]})
    except sqlite3.DatabaseError as exc:
        con.close()
        raise FormatError(f"{path} is not an agentfsm store, or a damaged one: {exc}") from exc
    except FormatError:
        con.close()
        raise
    return con


class SQLiteStore:
    """Runs in one SQLite file (WAL mode): the embedded default :class:`Store`.

    A checkpoint is one short transaction of a few inserts. ``synchronous``
    trades durability for speed: ``"NORMAL"`` (default) loses nothing when the
    process is killed, ``"FULL"`` nothing on a power cut either. ``read_only``
    opens an existing store for reading and never writes to the file (a file
    that is not an agentfsm store raises :class:`FormatError`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        timeout: float = 5.0,
        read_only: bool = False,
        lease: float = 60.0,
    ) -> None:
        self.path = os.fspath(path)
        self._synchronous = synchronous
        #: Seconds a running run stays claimed after its last checkpoint.
        self.lease = lease
        self._lock = threading.Lock()
        if read_only:
            self._con = _open_read_only(self.path, timeout)
            self._cursor = self._con.cursor()
            return
        self._con = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        try:
            with _guard(self.path):
                self._open()
        except BaseException:
            self._con.close()
            raise
        self._cursor = self._con.cursor()  # the writes' own: no cursor made per statement

    def _open(self) -> None:
        con = self._con
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(f"PRAGMA synchronous={self._synchronous}")
        con.executescript(_SCHEMA)
        columns = {row[1] for row in con.execute("PRAGMA table_info(runs)")}
        for column, kind in (("owner", "TEXT"), ("lease_until", "REAL")):
            if column not in columns:  # a store written before leases
                con.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")
        row = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        if row is None:
            con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
        else:
            try:
                check_format({"format": row[0]})
            except FormatError as exc:
                raise FormatError(f"{self.path}: {exc}") from exc

    def write(self, run_id: str, write: StoreWrite) -> None:
        now = time.time()
        running = write.status == "running"
        row = (
            write.status,
            write.state,
            write.segment + 1,
            write.steps,
            write.summary,
            now,
            write.result,
            write.agent_state,
            write.owner if running else None,
            now + self.lease if running else None,
        )
        with self._lock:
            con, cur = self._con, self._cursor
            try:
                cur.execute("BEGIN IMMEDIATE")
                try:
                    # The lease holder's write renews its lease in one statement; a write
                    # that finds another owner (or none, or no run) is checked in full.
                    if (
                        write.create
                        or cur.execute(_RENEW_RUN, (*row, run_id, write.owner)).rowcount != 1
                    ):
                        self._check_claim(cur, run_id, write, now)
                        cur.execute(_UPSERT_RUN, (run_id, now, *row))
                    self._insert(cur, run_id, write)
                    cur.execute("COMMIT")
                except BaseException:
                    if con.in_transaction:
                        cur.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                raise _store_error(self.path, exc) from exc

    def renew(self, run_id: str, owner: str) -> bool:
        """Extend ``owner``'s lease on a running run by :attr:`lease` seconds from now;
        False when ``owner`` no longer holds it (it ended, or another process took it)."""
        with self._lock:
            try:  # one statement: it commits by itself
                renewed = self._con.execute(
                    "UPDATE runs SET lease_until = ? "
                    "WHERE run_id = ? AND owner = ? AND status = 'running'",
                    (time.time() + self.lease, run_id, owner),
                )
            except sqlite3.DatabaseError as exc:
                raise _store_error(self.path, exc) from exc
        return renewed.rowcount == 1

    @staticmethod
    def _insert(cur: sqlite3.Cursor, run_id: str, write: StoreWrite) -> None:
        if write.header is not None:
            cur.execute(
                "INSERT OR REPLACE INTO segments VALUES (?, ?, ?)",
                (run_id, write.segment, write.header),
            )
        if write.messages:
            cur.executemany(
                "INSERT OR REPLACE INTO messages VALUES (?, ?, ?)",
                [(run_id, i, doc) for i, doc in write.messages],
            )
        if write.contexts:
            cur.executemany(
                "INSERT OR REPLACE INTO contexts VALUES (?, ?, ?)",
                [(run_id, i, doc) for i, doc in write.contexts],
            )
        if write.transitions:
            cur.executemany(
                "INSERT OR REPLACE INTO transitions VALUES (?, ?, ?, ?)",
                [(run_id, write.segment, seq, doc) for seq, doc in write.transitions],
            )

    def _check_claim(self, cur: sqlite3.Cursor, run_id: str, write: StoreWrite, now: float) -> None:
        row = cur.execute(
            "SELECT owner, lease_until, steps FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return
        if write.create:
            if not write.replace:
                raise RunExistsError(
                    f"A run {run_id!r} exists in {self.path}; pick another id, resume it, "
                    "or start with replace=True to overwrite it."
                )
            for table in _TABLES:
                cur.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            return
        owner, until, steps = row
        if not write.claim and owner != write.owner and write.steps < steps:
            raise RunInUseError(
                f"Run {run_id!r} went on in another process ({steps} steps saved, this "
                f"writer has {write.steps}); this copy stops so the two do not splice."
            )
        if (
            owner is not None
            and owner != write.owner
            and until is not None
            and until > now
            and _alive(owner)
        ):
            raise RunInUseError(
                f"Run {run_id!r} is being run by another process (its lease holds for "
                f"{until - now:.0f}s more, renewed at each checkpoint); resume it from one "
                "place at a time. If that process died, resume after the lease expires."
            )

    def read(self, run_id: str) -> StoredRun:
        with self._lock, _guard(self.path):
            con = self._con
            row = con.execute(
                "SELECT status, state, segments, result, agent_state FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"No run {run_id!r} in {self.path}")
            status, state, segments, result, agent_state = row
            headers = [
                h
                for (h,) in con.execute(
                    "SELECT header FROM segments WHERE run_id = ? ORDER BY segment", (run_id,)
                )
            ]
            by_segment: list[list[str]] = [[] for _ in range(segments)]
            for segment, doc in con.execute(
                "SELECT segment, doc FROM transitions WHERE run_id = ? ORDER BY segment, seq",
                (run_id,),
            ):
                by_segment[segment].append(doc)
            messages = self._table(con, "messages", run_id)
            contexts = self._table(con, "contexts", run_id)
        return StoredRun(
            run_id,
            status,
            state,
            tuple(headers),
            tuple(tuple(t) for t in by_segment),
            messages,
            contexts,
            result,
            agent_state,
        )

    @staticmethod
    def _table(con: sqlite3.Connection, table: str, run_id: str) -> tuple[str, ...]:
        rows = con.execute(
            f"SELECT idx, doc FROM {table} WHERE run_id = ? ORDER BY idx", (run_id,)
        ).fetchall()
        if any(i != n for n, (i, _) in enumerate(rows)):
            raise FormatError(f"The {table} of run {run_id!r} have gaps: the store is damaged")
        return tuple(doc for _, doc in rows)

    def runs(self) -> list[RunInfo]:
        with self._lock, _guard(self.path):
            rows = self._con.execute(
                "SELECT run_id, status, state, steps, segments, summary, created, updated "
                "FROM runs ORDER BY updated DESC, run_id"
            ).fetchall()
        return [RunInfo(*row) for row in rows]

    def delete(self, run_id: str) -> None:
        """Forget a run and everything saved of it."""
        with self._lock, _guard(self.path):
            con = self._con
            con.execute("BEGIN IMMEDIATE")
            try:
                for table in _TABLES:
                    con.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"


# ---------------------------------------------------------------- loading
