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

from ._base import RunDigest

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
