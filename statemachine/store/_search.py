"""What a search needs of runs, read from their checkpoints in the log without loading them.

A run's machine, the tools its messages call and the text of its messages are read
straight from its checkpoint documents: SQLite takes each document's messages and
header machine out (the transitions, most of a document, stay unparsed), or, in an
SQLite without JSON functions, each whole document is parsed here. The documents are
untrusted text (a file may have been edited): what is not what a store writes is left
out, and loading the run says what is wrong with it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ._base import RunDigest, StoreError

#: Runs past this many are read in one pass over the log, not one by one.
_ONE_PASS: Final = 64

# What a search needs of a checkpoint document; a document that is not JSON gives none.
_MESSAGES: Final = "CASE WHEN json_valid(doc) THEN json_extract(doc, '$.messages') END"
_MACHINE: Final = (
    "CASE WHEN json_valid(doc) AND json_valid(json_extract(doc, '$.header')) "
    "THEN json_extract(json_extract(doc, '$.header'), '$.machine') END"
)


def _content_text(content: object) -> str:
    """A message's content as :func:`agentfsm.messages.content_text` reads it, from JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["content"]
            for p in content
            if isinstance(p, Mapping)
            and p.get("type", "text") == "text"
            and isinstance(p.get("content"), str)
        )
    return ""


def _saved_row(row: object) -> dict[str, Any] | None:
    """A saved row as an object: as it is (format 2), parsed from its text (format 1);
    None for anything else."""
    if isinstance(row, str):
        try:
            row = json.loads(row)
        except (ValueError, RecursionError):
            return None
    return row if isinstance(row, dict) else None


class _Reader:
    """One run's digest gathered from its checkpoint documents."""

    def __init__(self, run_id: str) -> None:
        self.texts = [run_id]
        self.tools: set[str] = set()
        self.machine: str | None = None

    def add(self, doc_text: object) -> None:
        """One checkpoint's document, parsed here."""
        try:
            doc = json.loads(doc_text) if isinstance(doc_text, str) else None
        except (ValueError, RecursionError):
            return
        if not isinstance(doc, dict):
            return
        header = _saved_row(doc.get("header"))  # an object, or its text in a format-1 store
        machine = header.get("machine") if header is not None else None
        self.machine = machine if isinstance(machine, str) else self.machine
        self._pairs(doc.get("messages"))

    def add_parts(self, messages: object, machine: object) -> None:
        """One checkpoint's messages (JSON text) and machine, as SQLite took them out."""
        if isinstance(machine, str):
            self.machine = machine
        if isinstance(messages, str):
            try:
                self._pairs(json.loads(messages))
            except (ValueError, RecursionError):
                return

    def _pairs(self, pairs: object) -> None:
        for pair in pairs if isinstance(pairs, list) else ():
            if isinstance(pair, list) and len(pair) == 2:
                message = _saved_row(pair[1])
                if message is not None:
                    self._message(message)

    def _message(self, message: dict[str, Any]) -> None:
        self.texts.append(_content_text(message.get("content")))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, Mapping) and isinstance(call.get("name"), str):
                self.tools.add(call["name"])
        results = message.get("tool_results")
        for result in results if isinstance(results, list) else ():
            if isinstance(result, Mapping):
                self.texts.append(_content_text(result.get("content")))

    def digest(self) -> RunDigest:
        return RunDigest(
            machine=self.machine,
            tools=frozenset(self.tools),
            text="\n".join(self.texts).lower(),
        )


def _parts(
    con: sqlite3.Connection, run_ids: Sequence[str]
) -> Iterable[tuple[object, object, object]]:
    """Each checkpoint's run, messages and machine, taken out of its document by SQLite."""
    select = f"SELECT run_id, {_MESSAGES}, {_MACHINE} FROM log"
    if len(run_ids) > _ONE_PASS:
        yield from con.execute(f"{select} ORDER BY rowid")
        return
    for run_id in run_ids:
        yield from con.execute(f"{select} WHERE run_id = ? ORDER BY rowid", (run_id,))


def _docs(con: sqlite3.Connection, run_ids: Sequence[str]) -> Iterable[tuple[object, object]]:
    """Each checkpoint's run and whole document."""
    if len(run_ids) > _ONE_PASS:
        yield from con.execute("SELECT run_id, doc FROM log ORDER BY rowid")
        return
    for run_id in run_ids:
        query = "SELECT run_id, doc FROM log WHERE run_id = ? ORDER BY rowid"
        yield from con.execute(query, (run_id,))


def digests(con: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, RunDigest]:
    """The digests of ``run_ids``' runs from the log read on ``con``: taken out of the
    documents by SQLite, or, in an SQLite without JSON functions, parsed here. Raises
    :class:`sqlite3.DatabaseError` for a log that cannot be read."""
    readers = {run_id: _Reader(run_id) for run_id in run_ids}
    try:
        for run_id, messages, machine in _parts(con, run_ids):
            reader = readers.get(run_id) if isinstance(run_id, str) else None
            if reader is not None:
                reader.add_parts(messages, machine)
    except sqlite3.OperationalError:  # an SQLite without JSON: parsed here
        readers = {run_id: _Reader(run_id) for run_id in run_ids}
        for run_id, doc in _docs(con, run_ids):
            reader = readers.get(run_id) if isinstance(run_id, str) else None
            if reader is not None:
                reader.add(doc)
    return {run_id: reader.digest() for run_id, reader in readers.items()}


# ---------------------------------------------------------------- the index

# The search index, kept in the store's own file beside the log and built from it: a
# row per run (its machine, the tools it called, and when it was made, so a run deleted
# and made again under its id is read anew) and the text of each checkpoint's messages
# in an FTS5 table whose trigram tokens find any substring of three characters or more.
# It only adds tables: a store without them is indexed when first searched, and the
# log stays the one record (the index can always be dropped and built again).
_INDEX_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS search_runs (run_id TEXT PRIMARY KEY, created REAL NOT NULL, "
    "machine TEXT, tools TEXT NOT NULL)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_text USING fts5("
    "run_id UNINDEXED, text, tokenize = 'trigram')",
)
#: The newest log row the index holds (``meta``'s key).
_UPTO: Final = "search_upto"
# Runs the index holds that the store no longer has as they were (deleted, or made anew).
_STALE: Final = (
    "SELECT s.run_id FROM search_runs AS s LEFT JOIN runs AS r ON r.run_id = s.run_id "
    "WHERE r.run_id IS NULL OR r.created != s.created"
)


_SAME: Final = (
    "SELECT (SELECT count(*) FROM runs) = (SELECT count(*) FROM search_runs) "
    "AND (SELECT total(created) FROM runs) = (SELECT total(created) FROM search_runs)"
)


def _like(needle: str) -> str:
    return "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class SearchIndex:
    """The store's search index on a connection of its own (which may write its tables).

    :meth:`catch_up` reads the log rows written since it last ran (one pass over the
    whole log the first time); :meth:`find` and :meth:`choices` answer from the index.
    """

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def close(self) -> None:
        self.con.close()

    def _upto(self) -> int:
        row = self.con.execute("SELECT value FROM meta WHERE key = ?", (_UPTO,)).fetchone()
        return int(row[0]) if row is not None and str(row[0]).isdigit() else 0

    def catch_up(self) -> None:
        """Index the log rows written since the last catch-up, and forget runs deleted or
        made anew (their rows are read again). Raises :class:`sqlite3.Error` when the
        index cannot be written (a store the user may only read)."""
        con = self.con
        names = {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
        if "search_runs" in names:
            upto = self._upto()
            (newest,) = con.execute("SELECT coalesce(max(rowid), 0) FROM log").fetchone()
            # Every run has a checkpoint, so the index holds every run: the same count and
            # times of making say no run was deleted or made anew since.
            same = con.execute(_SAME).fetchone()[0]
            if newest == upto and same:
                return  # nothing moved: a few cheap looks
        con.execute("BEGIN IMMEDIATE")
        try:
            for statement in _INDEX_SCHEMA:
                con.execute(statement)
            self._index(con)
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def _index(self, con: sqlite3.Connection) -> None:
        upto = self._upto()
        stale = [run_id for (run_id,) in con.execute(_STALE)]
        for run_id in stale:
            con.execute("DELETE FROM search_text WHERE run_id = ?", (run_id,))
            con.execute("DELETE FROM search_runs WHERE run_id = ?", (run_id,))
        (newest,) = con.execute("SELECT coalesce(max(rowid), 0) FROM log").fetchone()
        known = {
            run_id: (created, machine, tools)
            for run_id, created, machine, tools in con.execute(
                "SELECT run_id, created, machine, tools FROM search_runs"
            )
        }
        created = dict(con.execute("SELECT run_id, created FROM runs"))
        # A run made anew is read from its first row; every other from where the index is.
        again = [run_id for run_id in stale if run_id in created]
        rows = list(_since(con, upto, newest))
        for run_id in again:
            rows.extend(_since(con, 0, upto, run_id))
        texts: list[tuple[str, str]] = []
        runs: dict[str, _Reader] = {}
        for run_id, messages, machine in rows:
            if not isinstance(run_id, str) or run_id not in created:
                continue
            reader = _Reader(run_id)
            if machine is _WHOLE:
                reader.add(messages)
            else:
                reader.add_parts(messages, machine)
            said = "\n".join(t for t in reader.texts[1:] if t).lower()
            if said:
                texts.append((run_id, said))
            into = runs.setdefault(run_id, _Reader(run_id))
            into.machine = reader.machine or into.machine
            into.tools |= reader.tools
        for run_id, reader in runs.items():
            old = known.get(run_id)
            if old is None:
                texts.append((run_id, run_id.lower()))
            else:
                reader.machine = reader.machine or old[1]
                reader.tools |= set(filter(None, str(old[2]).split("\n")))
            tools = "\n" + "\n".join(sorted(reader.tools)) + "\n"
            con.execute(
                "INSERT OR REPLACE INTO search_runs VALUES (?, ?, ?, ?)",
                (run_id, created[run_id], reader.machine, tools),
            )
        con.executemany("INSERT INTO search_text (run_id, text) VALUES (?, ?)", texts)
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_UPTO, str(newest)))

    def find(self, *, machine: str = "", tool: str = "", text: str = "") -> set[str]:
        """The runs of ``machine`` that called ``tool`` and whose messages (or id) hold
        ``text`` (lower-cased), each filter left out when empty."""
        where, args = [], []
        if machine:
            where.append("machine = ?")
            args.append(machine)
        if tool:
            where.append("instr(tools, ?) > 0")
            args.append("\n" + tool + "\n")
        if text:
            where.append("run_id IN (SELECT run_id FROM search_text WHERE text LIKE ? ESCAPE '\\')")
            args.append(_like(text))
        query = "SELECT run_id FROM search_runs"
        if where:
            query += " WHERE " + " AND ".join(where)
        return {run_id for (run_id,) in self.con.execute(query, args)}

    def search(
        self, *, machine: str = "", tool: str = "", text: str = ""
    ) -> tuple[set[str] | None, list[str], list[str]]:
        """Caught up, the runs :meth:`find` finds (None when no filter is given), and
        :meth:`choices`; a :class:`StoreError` when the index cannot be kept (a store
        this user may only read)."""
        try:
            self.catch_up()
            found = self.find(machine=machine, tool=tool, text=text)
            return (found if machine or tool or text else None), *self.choices()
        except sqlite3.Error as exc:
            raise StoreError(f"the store's search index cannot be kept: {exc}") from exc

    def choices(self) -> tuple[list[str], list[str]]:
        """Every machine and every tool of the store's runs, sorted."""
        machines = [
            m
            for (m,) in self.con.execute(
                "SELECT DISTINCT machine FROM search_runs WHERE machine IS NOT NULL ORDER BY 1"
            )
        ]
        tools: set[str] = set()
        for (joined,) in self.con.execute("SELECT DISTINCT tools FROM search_runs"):
            tools.update(filter(None, str(joined).split("\n")))
        return machines, sorted(tools)


#: The machine of a row read whole (its document parsed here, not by SQLite).
_WHOLE: Final = object()


def _since(
    con: sqlite3.Connection, after: int, upto: int, run_id: str | None = None
) -> Iterable[tuple[object, object, object]]:
    """Each log row after ``after`` up to ``upto`` (of ``run_id`` alone, when given): its
    run, messages and machine, taken out by SQLite (or its document, in an SQLite
    without JSON functions, with :data:`_WHOLE` for its machine)."""
    where = "rowid > ? AND rowid <= ?" + (" AND run_id = ?" if run_id is not None else "")
    args: tuple[object, ...] = (after, upto) if run_id is None else (after, upto, run_id)
    try:
        return con.execute(
            f"SELECT run_id, {_MESSAGES}, {_MACHINE} FROM log WHERE {where} ORDER BY rowid", args
        ).fetchall()
    except sqlite3.OperationalError:
        rows = con.execute(f"SELECT run_id, doc FROM log WHERE {where} ORDER BY rowid", args)
        return [(r, doc, _WHOLE) for r, doc in rows]
