"""SQLiteStore: runs in one SQLite file (stdlib ``sqlite3``, WAL), the embedded store.

``synchronous="NORMAL"`` survives a killed process; ``"FULL"`` also a power cut.
A running run's writer holds a lease on it (renewed by a checkpoint once half of
it is spent, given up when the run ends), so a second process resuming the same
run is refused until the run ends or the lease expires (the holder died).

One idea: the one class that holds the store's SQLite connection, so every statement
on the file (writes, claims, listings, the search index's connection) takes its lock
and its error translation.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Final, Literal

from .._serialization import FormatError
from . import _search
from ._base import (
    RunDigest,
    RunExistsError,
    RunFinishedError,
    RunInfo,
    RunInUseError,
    RunNotFoundError,
    StoredRun,
    StoreError,
    StoreWrite,
)
from ._evals import EVALS_SCHEMA, EvalRows
from ._file import (
    _FORMAT,
    _check_format,
    _guard,
    _open_read_only,
    _read_only_uri,
    _store_error,
    _tables,
)
from ._rows import _STATUSES, _checkpoint_doc, _info, _Rows

__all__ = ["SQLiteStore"]

_SCHEMA: Final = (
    """
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
CREATE TABLE IF NOT EXISTS log (
    run_id TEXT NOT NULL, segment INTEGER NOT NULL, steps INTEGER NOT NULL,
    state TEXT NOT NULL, updated REAL NOT NULL, doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS log_run ON log (run_id);
"""
    + EVALS_SCHEMA
)

# A checkpoint is one row of ``log``: every row it adds, as one JSON document. SQLite's
# cost per commit is its pages (each a WAL frame and two writes): a row appended to one
# table and one index entry is two pages, where a table per kind of row was five. The
# ``runs`` row is written when the run starts, ends, changes hands or its lease is half
# spent; listings read a running run's state and steps from its newest log row. Stores
# made before the log keep their tables (segments, messages, contexts, transitions):
# their rows are read first, the log's after, and new rows go to the log.

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

_APPEND: Final = "INSERT INTO log VALUES (?, ?, ?, ?, ?, ?)"

# A run's head: when its row was made and its newest checkpoint. A write or claim that
# names a head extends exactly that run as its writer read it, or is refused.
_HEAD: Final = (
    "SELECT status, owner, lease_until, created, "
    "(SELECT max(rowid) FROM log WHERE run_id = ?1) FROM runs WHERE run_id = ?1"
)
_HEAD_LEGACY: Final = "SELECT status, owner, lease_until, created, NULL FROM runs WHERE run_id = ?1"

_FINISHED: Final = ("ok", "error")

# The holder's checkpoint while more than half its lease is left: one statement, so one
# transaction of its own, that appends only if the run's row says so.
_APPEND_HELD: Final = """
INSERT INTO log SELECT ?1, ?2, ?3, ?4, ?5, ?6 FROM runs
WHERE run_id = ?1 AND owner = ?7 AND status = 'running' AND lease_until > ?8
"""

# A run's state, steps and time are its newest checkpoint's (the runs row may be older).
_LIST: Final = """
SELECT r.run_id, r.status, coalesce(l.state, r.state), coalesce(l.steps, r.steps),
       max(r.segments, coalesce(l.segment + 1, 0)), r.summary, r.created,
       max(r.updated, coalesce(l.updated, 0)) AS last
FROM runs AS r LEFT JOIN log AS l
    ON l.rowid = (SELECT max(rowid) FROM log WHERE run_id = r.run_id)
ORDER BY last DESC, r.run_id
"""
_LIST_LEGACY: Final = (
    "SELECT run_id, status, state, steps, segments, summary, created, updated FROM runs "
    "ORDER BY updated DESC, run_id"
)


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


def _head(created: object, newest: object) -> str:
    """The opaque head of a run: its row's birth and its newest checkpoint."""
    return f"{created!r}:{newest!r}"


class SQLiteStore(EvalRows):
    """Runs in one SQLite file (WAL mode): the embedded default :class:`Store`.

    A checkpoint is one short transaction that appends one row. ``synchronous``
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
        self._timeout = timeout
        #: Seconds a running run stays claimed after its writer last renewed it.
        self.lease = lease
        self._lock = threading.Lock()
        self._older = False
        self._leases = False  # the runs table has its lease columns (checked until seen)
        if os.path.isdir(self.path):
            raise StoreError(f"The store {self.path} is a directory, not a store file")
        with _guard(self.path):
            if read_only:
                self._con = _open_read_only(self.path, timeout)
            else:
                self._con = sqlite3.connect(
                    self.path, timeout=timeout, isolation_level=None, check_same_thread=False
                )
        try:
            with _guard(self.path):
                if not read_only:
                    self._open()
                self._tables = _tables(self._con)
        except BaseException:
            self._con.close()
            raise
        self._cursor = self._con.cursor()  # the writes' own: no cursor made per statement

    def _open(self) -> None:
        con = self._con
        # Another application's file is never changed: tables (and WAL) only in an
        # empty file or one that is already an agentfsm store.
        existing = self._check_is_store()
        self._enter_wal()
        con.execute(f"PRAGMA synchronous={self._synchronous}")
        con.execute("BEGIN IMMEDIATE")  # a new store is made whole or not at all
        try:
            if not existing:
                self._check_is_store()  # another process may have made it meanwhile
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    con.execute(statement)
            columns = {row[1] for row in con.execute("PRAGMA table_info(runs)")}
            for column, kind in (("owner", "TEXT"), ("lease_until", "REAL")):
                if column not in columns:  # a store written before leases
                    con.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")
            con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (_FORMAT,))
            (fmt,) = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            self._older = fmt != _FORMAT  # its first write makes it the current format
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def _enter_wal(self) -> None:
        """Switch the file to WAL. SQLite answers "locked" at once, without waiting, when
        another process switches it at the same moment, so the switch is retried here
        until the store's timeout."""
        deadline = time.monotonic() + self._timeout
        pause = 0.001
        while True:
            try:
                self._con.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _check_is_store(self) -> bool:
        """Whether the file is an agentfsm store (False: an empty file); FormatError for a
        file with other tables or a store of a format this version does not read."""
        con = self._con
        names = {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
        if not names:
            return False
        row = None
        if {"meta", "runs"} <= names:
            row = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        if row is None:
            raise FormatError(
                f"{self.path} is not an agentfsm store (it has other tables); it was left as it is"
            )
        _check_format(self.path, row[0])
        return True

    def write(self, run_id: str, write: StoreWrite) -> None:
        now = time.time()
        doc = _checkpoint_doc(write)
        with self._lock:
            con, cur = self._con, self._cursor
            try:
                upgrade = self._older
                owner = write.owner
                if (  # the holder's checkpoint with more than half its lease left: one statement
                    write.head is None
                    and not upgrade
                    and write.status == "running"
                    and not write.create
                    and owner is not None
                ):
                    held = (run_id, write.segment, write.steps, write.state, now, doc, owner)
                    if cur.execute(_APPEND_HELD, (*held, now + self.lease / 2)).rowcount == 1:
                        return
                row = (run_id, write.segment, write.steps, write.state, now, doc)
                cur.execute("BEGIN IMMEDIATE")
                try:
                    if write.head is not None and not write.create:
                        self._check_head(cur, run_id, write.head)
                    self._write_run(cur, run_id, write, now)
                    cur.execute(_APPEND, row)
                    if upgrade:
                        cur.execute("UPDATE meta SET value = ? WHERE key = 'format'", (_FORMAT,))
                    cur.execute("COMMIT")
                    self._older = False
                except BaseException:
                    if con.in_transaction:
                        cur.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                raise _store_error(self.path, exc) from exc

    def _write_run(self, cur: sqlite3.Cursor, run_id: str, write: StoreWrite, now: float) -> None:
        """The run's row: its holder renews its lease in one statement; a write that finds
        another owner (or none, or no run) is checked in full."""
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
        if write.create or cur.execute(_RENEW_RUN, (*row, run_id, write.owner)).rowcount != 1:
            self._check_claim(cur, run_id, write, now)
            cur.execute(_UPSERT_RUN, (run_id, now, *row))

    def _check_head(self, cur: sqlite3.Cursor, run_id: str, head: str) -> None:
        """Refuse a write or claim that does not extend the run as its writer read it."""
        row = cur.execute(_HEAD if "log" in self._tables else _HEAD_LEGACY, (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"No run {run_id!r} in {self.path} (it was deleted)")
        status, _, _, created, newest = row
        if status in _FINISHED:
            raise RunFinishedError(
                f"Run {run_id!r} ended {status} in another process after it was read here; "
                "a finished run is not run again."
            )
        if _head(created, newest) != head:
            raise RunInUseError(
                f"Run {run_id!r} went on in another process after it was read here; "
                "this copy stops so the two do not splice. Load it again to see where it is."
            )

    def claim(self, run_id: str, owner: str, head: str | None) -> None:
        """Take the run's lease for ``owner`` before anything runs, as one compare-and-set:
        refused when the run ended (:class:`RunFinishedError`), went on since ``head`` was
        read, or another live process holds it (:class:`RunInUseError`)."""
        now = time.time()
        with self._lock:
            con, cur = self._con, self._cursor
            try:
                cur.execute("BEGIN IMMEDIATE")
                try:
                    if head is not None:
                        self._check_head(cur, run_id, head)
                    row = cur.execute(_HEAD_LEGACY, (run_id,)).fetchone()
                    if row is None:
                        raise RunNotFoundError(f"No run {run_id!r} in {self.path}")
                    status, holder, until, _, _ = row
                    if status in _FINISHED:
                        raise RunFinishedError(f"Run {run_id!r} ended {status}: it is over")
                    if holder not in (None, owner):
                        self._check_lease(run_id, holder, until, now)
                    cur.execute(
                        "UPDATE runs SET owner = ?, lease_until = ? WHERE run_id = ?",
                        (owner, now + self.lease, run_id),
                    )
                    cur.execute("COMMIT")
                except BaseException:
                    if con.in_transaction:
                        cur.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                raise _store_error(self.path, exc) from exc

    def release(self, run_id: str, owner: str, *, running: bool = False) -> None:
        """Give back ``owner``'s claim on a run it has not written since (nothing ran);
        with ``running``, also one it left running that nothing runs (a migration's)."""
        with self._lock, _guard(self.path):  # one statement: it commits by itself
            self._con.execute(
                "UPDATE runs SET owner = NULL, lease_until = NULL "
                "WHERE run_id = ? AND owner = ? AND (status != 'running' OR ?)",
                (run_id, owner, running),
            )

    def _check_lease(self, run_id: str, owner: str, until: object, now: float) -> None:
        """Refuse when ``owner`` (not the writer) holds a live lease on the run."""
        if isinstance(until, int | float) and until > now and _alive(owner):
            raise RunInUseError(
                f"Run {run_id!r} is being run by another process (its lease holds for "
                f"{until - now:.0f}s more, renewed while it runs); resume it from one "
                "place at a time. If that process died, resume after the lease expires."
            )

    def renew(self, run_id: str, owner: str) -> bool:
        """Extend ``owner``'s lease on a run it holds by :attr:`lease` seconds from now;
        False when ``owner`` no longer holds it (it ended, or another process took it)."""
        with self._lock:
            try:  # one statement: it commits by itself
                renewed = self._con.execute(
                    "UPDATE runs SET lease_until = ? "
                    "WHERE run_id = ? AND owner = ? AND status NOT IN ('ok', 'error')",
                    (time.time() + self.lease, run_id, owner),
                )
            except sqlite3.DatabaseError as exc:
                raise _store_error(self.path, exc) from exc
        return renewed.rowcount == 1

    def _check_claim(self, cur: sqlite3.Cursor, run_id: str, write: StoreWrite, now: float) -> None:
        row = cur.execute(
            "SELECT status, owner, lease_until, max(steps, coalesce("
            "(SELECT max(steps) FROM log WHERE run_id = ?1), 0)) FROM runs WHERE run_id = ?1",
            (run_id,),
        ).fetchone()
        if row is None:
            return
        if write.create:
            if not write.replace:
                raise RunExistsError(
                    f"A run {run_id!r} exists in {self.path}; pick another id, resume it, "
                    "or start with replace=True to overwrite it."
                )
            self._forget(cur, run_id)
            return
        status, owner, until, steps = row
        if not write.claim:  # the writer held the run: another process took it since
            raise RunInUseError(
                f"Run {run_id!r} was taken over by another process (this writer's lease "
                "lapsed); this copy stops so the two do not splice."
            )
        if status in _FINISHED:
            raise RunFinishedError(
                f"Run {run_id!r} ended {status}: a finished run is not run again"
            )
        if write.head is None and write.steps < steps:  # a head was checked already
            raise RunInUseError(
                f"Run {run_id!r} went on in another process ({steps} steps saved, this "
                f"writer has {write.steps}); this copy stops so the two do not splice."
            )
        if owner is not None and owner != write.owner:
            self._check_lease(run_id, owner, until, now)

    def _forget(self, cur: sqlite3.Cursor, run_id: str) -> None:
        for table in ("runs", *self._tables):
            cur.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    def read(self, run_id: str) -> StoredRun:
        """The run's rows, read in one transaction: the run's row and its log agree."""
        with self._lock, _guard(self.path):
            con = self._con
            con.execute("BEGIN")
            try:
                stored = self._read(con, run_id)
            finally:
                if con.in_transaction:
                    con.execute("COMMIT")
        return stored

    def _read(self, con: sqlite3.Connection, run_id: str) -> StoredRun:
        row = con.execute(
            "SELECT status, state, result, agent_state, created FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise RunNotFoundError(f"No run {run_id!r} in {self.path}")
        status, state, result, agent_state, created = row
        if status not in _STATUSES or not isinstance(state, str):
            raise FormatError(
                f"Run {run_id!r} has a status row that is not one: the store is damaged"
            )
        if not all(isinstance(text, str | None) for text in (result, agent_state)):
            raise FormatError(f"Run {run_id!r} has a result that is not text: the store is damaged")
        rows = _Rows(run_id)
        if "segments" in self._tables:
            rows.legacy(con)
        newest = None
        if "log" in self._tables:
            for rowid, segment, then, doc in con.execute(
                "SELECT rowid, segment, state, doc FROM log WHERE run_id = ? ORDER BY rowid",
                (run_id,),
            ):
                rows.add(segment, doc)
                state, newest = then, rowid  # the newest checkpoint's (the runs row may be older)
        if not isinstance(state, str):
            raise rows.damaged("has a checkpoint state that is not text")
        return rows.stored(status, state, result, agent_state, _head(created, newest))

    def runs(self) -> list[RunInfo]:
        with self._lock, _guard(self.path):
            query = _LIST if "log" in self._tables else _LIST_LEGACY
            rows = self._con.execute(query).fetchall()
        return [_info(row) for row in rows]

    def digests(self, run_ids: Sequence[str]) -> dict[str, RunDigest] | None:
        """What a search needs of each of ``run_ids``' runs (:class:`RunDigest`), read from
        their checkpoints without loading them: in one pass over the log for many runs,
        run by run for a few, on a connection of its own (a long read holds up no other
        call of this store).

        None when the checkpoints cannot say: a store made before the log keeps its rows
        in tables of their own, and a log SQLite cannot read is for loading each run to
        explain. A document that is not what a store writes gives nothing.
        """
        if "log" not in self._tables or "segments" in self._tables:
            return None
        with self._scanning() as con:
            try:
                return _search.digests(con, run_ids)
            except sqlite3.DatabaseError:
                return None

    def unheld(self, run_id: str | None = None) -> set[str]:
        """The runs saved running that no live lease holds: nothing runs them now (a
        fork, a migration, a run whose process died); a resume may take them at once.
        With ``run_id``, that run alone is looked at (a live page asks of its own run
        several times a second): ``{run_id}`` or nothing."""
        with self._lock, _guard(self.path):
            if not self._leases:
                columns = {r[1] for r in self._con.execute("PRAGMA table_info(runs)")}
                if "lease_until" not in columns:  # a store written before leases
                    return set()
                self._leases = True  # a column, once there, stays
            query = (
                "SELECT run_id FROM runs WHERE status = 'running' "
                "AND (owner IS NULL OR lease_until IS NULL OR lease_until < ?)"
            )
            now = time.time()
            if run_id is None:
                rows = self._con.execute(query, (now,)).fetchall()
            else:
                rows = self._con.execute(query + " AND run_id = ?", (now, run_id)).fetchall()
        return {found for (found,) in rows}

    def search_index(self) -> _search.SearchIndex | None:
        """The store's search index (:class:`~agentfsm.store._search.SearchIndex`) on a
        connection of its own, which writes the index's tables as it catches up with the
        log; None for a store made before the log, or one kept in memory."""
        if "log" not in self._tables or "segments" in self._tables:
            return None
        if self.path in ("", ":memory:"):
            return None
        with _guard(self.path):  # a file that cannot be opened: a StoreError
            con = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
        return _search.SearchIndex(con)

    @contextlib.contextmanager
    def _scanning(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection for a long read; an in-memory store has only its own,
        held meanwhile."""
        if self.path in ("", ":memory:"):
            with self._lock:
                yield self._con
            return
        with _guard(self.path):
            con = sqlite3.connect(_read_only_uri(self.path), uri=True, timeout=self._timeout)
        try:
            with _guard(self.path):
                con.execute("PRAGMA query_only = ON")
            yield con
        finally:
            con.close()

    def last_change(self, run_id: str) -> str | None:
        """An opaque mark of where the run is, read in one cheap statement: it changes
        whenever the run moves (a checkpoint, a new status), so a page can watch it.
        None when the store has no such run."""
        with self._lock, _guard(self.path):
            if "log" in self._tables:
                query = (
                    "SELECT status, updated, (SELECT max(rowid) FROM log WHERE run_id = ?1) "
                    "FROM runs WHERE run_id = ?1"
                )
            else:  # a store made before the log: its steps move with it
                query = "SELECT status, updated, steps FROM runs WHERE run_id = ?1"
            row = self._con.execute(query, (run_id,)).fetchone()
        return None if row is None else f"{row[0]}:{row[1]!r}:{row[2]!r}"

    def checkpoint_times(self, run_id: str) -> list[tuple[int, float]]:
        """When each of the run's checkpoints was written (seconds since the epoch) and how
        many steps the run had then, oldest first; none in a store made before the log,
        which keeps no times. A row that is not (steps, time) is left out: the times are
        for showing, and loading the run says what is wrong with it."""
        with self._lock, _guard(self.path):
            if "log" not in self._tables:
                return []
            rows = self._con.execute(
                "SELECT steps, updated FROM log WHERE run_id = ? ORDER BY rowid", (run_id,)
            ).fetchall()
        return [
            (steps, float(when))
            for steps, when in rows
            if isinstance(steps, int) and isinstance(when, float | int)
        ]

    @staticmethod
    def tables_in(path: str | os.PathLike[str]) -> frozenset[str] | None:
        """The names in the schema of the SQLite file at ``path`` (its tables and indexes),
        read without writing; None when it is no SQLite file or cannot be read. It tells
        an agentfsm store from another application's database before either is opened."""
        try:
            con = sqlite3.connect(_read_only_uri(path), uri=True)
            try:
                return frozenset(name for (name,) in con.execute("SELECT name FROM sqlite_master"))
            finally:
                con.close()
        except sqlite3.Error:
            return None

    @staticmethod
    def holds_runs(path: str | os.PathLike[str]) -> bool:
        """Whether the SQLite file at ``path`` has a store's table of runs, read without
        writing (False for no SQLite file): the store's tables are its own to name."""
        names = SQLiteStore.tables_in(path)
        return names is not None and "runs" in names

    def delete(self, run_id: str) -> None:
        """Forget a run and everything saved of it."""
        with self._lock, _guard(self.path):
            con = self._con
            con.execute("BEGIN IMMEDIATE")
            try:
                self._forget(self._cursor, run_id)
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
