"""A run's rows as the log keeps them: a checkpoint written as one document, and read back.

What is read is untrusted (a file's owner may have written anything there): every
row is checked to be what a store writes, or the run is refused as damaged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeGuard

from .._serialization import FormatError, compact_json, parse_json
from ._base import RunInfo, RunStatus, StoredRun, StoreWrite

_STATUSES: Final = ("running", "ok", "paused", "interrupted", "error")


def _checkpoint_doc(write: StoreWrite) -> str:
    """A checkpoint's new rows as one JSON document, each row's JSON text set in as it
    is: ``{"header": {...}, "messages": [[index, {...}], ...], ...}``. Escaping the rows
    again as strings, as format 1 did, cost more than writing them."""
    parts = []
    if write.header is not None:
        parts.append('"header":' + write.header)
    if write.messages:  # each kind written out: a run writes two documents per model call
        parts.append('"messages":[' + ",".join([f"[{i},{t}]" for i, t in write.messages]) + "]")
    if write.contexts:
        parts.append('"contexts":[' + ",".join([f"[{i},{t}]" for i, t in write.contexts]) + "]")
    if write.transitions:
        rows = ",".join([f"[{i},{t}]" for i, t in write.transitions])
        parts.append('"transitions":[' + rows + "]")
    return "{" + ",".join(parts) + "}"


class _Rows:
    """A run's rows gathered from its checkpoints, a later row replacing an earlier one of
    the same place (a write retried after a failure writes its rows again)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.headers: dict[int, str] = {}
        self.transitions: dict[int, dict[int, str]] = {}
        self.messages: dict[int, str] = {}
        self.contexts: dict[int, str] = {}

    def damaged(self, what: str) -> FormatError:
        return FormatError(f"Run {self.run_id!r} {what}: the store is damaged")

    def legacy(self, con: sqlite3.Connection) -> None:
        """The rows of a store made before the log."""
        key = (self.run_id,)
        for segment, header in self._checked(
            con.execute("SELECT segment, header FROM segments WHERE run_id = ?", key)
        ):
            self.headers[segment] = header
        for segment, seq, doc in con.execute(
            "SELECT segment, seq, doc FROM transitions WHERE run_id = ?", key
        ):
            if not (_is_index(segment) and _is_index(seq) and isinstance(doc, str)):
                raise self.damaged("has a transition row that is not one")
            self.transitions.setdefault(segment, {})[seq] = doc
        self.messages.update(
            self._checked(con.execute("SELECT idx, doc FROM messages WHERE run_id = ?", key))
        )
        self.contexts.update(
            self._checked(con.execute("SELECT idx, doc FROM contexts WHERE run_id = ?", key))
        )

    def _checked(self, rows: Iterable[Sequence[object]]) -> list[tuple[int, str]]:
        """``rows`` as ``(index, text)`` pairs, each checked."""
        checked = []
        for index, text in rows:
            if not (_is_index(index) and isinstance(text, str)):
                raise self.damaged("has a row that is not (index, text)")
            checked.append((index, text))
        return checked

    def add(self, segment: object, text: object) -> None:
        """One checkpoint's document (untrusted: a file may have been edited)."""
        doc = parse_json(text) if isinstance(text, str) else None
        if not isinstance(doc, dict) or not _is_index(segment):
            raise self.damaged("has a checkpoint that is not one")
        header = doc.get("header")
        if header is not None:
            self.headers[segment] = self._text(header, "a segment header")
        self.messages.update(self._pairs(doc, "messages"))
        self.contexts.update(self._pairs(doc, "contexts"))
        self.transitions.setdefault(segment, {}).update(self._pairs(doc, "transitions"))

    def _text(self, row: object, what: str) -> str:
        """A row as JSON text: format 2 holds it as an object, format 1 as its text."""
        if isinstance(row, dict):
            return compact_json(row)
        if isinstance(row, str):
            return row
        raise self.damaged(f"has {what} that is neither an object nor text")

    def _pairs(self, doc: dict[str, Any], kind: str) -> list[tuple[int, str]]:
        pairs = doc.get(kind, [])
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 for p in pairs
        ):
            raise self.damaged(f"has {kind} that are not (index, text) pairs")
        return self._checked((index, self._text(row, kind)) for index, row in pairs)

    def stored(
        self,
        status: RunStatus,
        state: str,
        result: str | None,
        agent_state: str | None,
        head: str | None,
    ) -> StoredRun:
        segments = len(self.headers)
        if sorted(self.headers) != list(range(segments)) or not set(self.transitions) <= set(
            self.headers
        ):
            raise self.damaged("has segments without their header")
        return StoredRun(
            run_id=self.run_id,
            status=status,
            state=state,
            headers=tuple(self.headers[n] for n in range(segments)),
            transitions=tuple(
                tuple(doc for _, doc in sorted(self.transitions.get(n, {}).items()))
                for n in range(segments)
            ),
            messages=self._table("messages", self.messages),
            contexts=self._table("contexts", self.contexts),
            result=result,
            agent_state=agent_state,
            head=head,
        )

    def _table(self, kind: str, rows: dict[int, str]) -> tuple[str, ...]:
        if sorted(rows) != list(range(len(rows))):
            raise FormatError(f"The {kind} of run {self.run_id!r} have gaps: the store is damaged")
        return tuple(rows[i] for i in range(len(rows)))


def _info(row: Sequence[Any]) -> RunInfo:
    """One row of a listing, checked: a file's owner may have written anything there."""
    run_id, status, state, steps, segments, summary, created, updated = row
    if not (
        isinstance(run_id, str)
        and status in _STATUSES
        and isinstance(state, str)
        and _is_index(steps)
        and _is_index(segments)
        and isinstance(summary, str | None)
        and _is_time(created)
        and _is_time(updated)
    ):
        raise FormatError(f"The row of run {str(run_id)[:80]!r} is damaged: the store was edited")
    return RunInfo(
        run_id=run_id,
        status=status,
        state=state,
        steps=steps,
        segments=segments,
        summary=summary,
        created=float(created),
        updated=float(updated),
    )


def _is_time(value: object) -> bool:
    """A time a store writes: seconds since the epoch, before the year 5000."""
    return type(value) in (int, float) and 0 <= value < 1e11  # type: ignore[operator]


def _is_index(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0
