"""Shared test helpers: small tools and agents on the scripted model."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sqlite3
from collections.abc import Callable
from typing import Any

from agentfsm import LLMChain, Message, ToolOutput, tool
from agentfsm._serialization import Packer
from agentfsm.providers import ScriptedModel
from agentfsm.store import SQLiteStore, load_run

LOOP = "expanding calling interrupt_check executing propagating until_check deciding"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def submit(answer: str) -> str:
    """Submit the final answer."""
    if answer == "bad":
        raise ValueError("answer rejected")
    return f"submitted {answer}"


@tool
def search(q: str) -> str:
    """Search the notes."""
    return f"results for {q}"


@tool
def boom() -> str:
    """Always fails."""
    raise RuntimeError("kaput")


@tool
def remember(key: str, value: Any) -> ToolOutput:
    """Store a value in the agent state."""
    return ToolOutput(f"remembered {key}", state_updates={key: value})


def registered_runs(table: Any) -> int:
    """Runs registered with ``table``'s shared machine, after a collection: runs that earlier
    tests abandoned leave it when the collector finds them, so a count taken without one
    changes whenever a collection happens to run mid-test."""
    gc.collect()
    return len(table.machine.models)


def chain_of(model: ScriptedModel, *tools: Any, prompt: str = "go") -> LLMChain:
    return LLMChain(model, tools=tools).add_message(Message.user(prompt))


def texts(chain: LLMChain) -> list[tuple[str, str]]:
    """(role, text or tool summary) of every message: what the test reads."""
    out = []
    for m in chain.messages:
        if m.tool_results:
            out.append((m.role, "|".join(str(r.content) for r in m.tool_results)))
        elif m.tool_calls:
            out.append((m.role, "calls:" + ",".join(c.name for c in m.tool_calls)))
        else:
            out.append((m.role, m.text))
    return out


# ---------------------------------------------------------------- a store file's saved rows

#: What ``edit_saved`` does to a row: edit its JSON in place, replace its text, or delete it.
Change = Callable[[Any], None] | str | None


def saved_rows(db: str | os.PathLike[str], run_id: str = "r") -> list[tuple[str, int, int, str]]:
    """Every saved row of a run in a ``SQLiteStore`` file: ``(kind, segment, index, text)``,
    kind one of ``header`` (its index is the segment), ``transitions``, ``messages`` and
    ``contexts``."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        logged = con.execute(
            "SELECT segment, doc FROM log WHERE run_id = ? ORDER BY rowid", (run_id,)
        ).fetchall()
    rows = []
    for segment, text in logged:
        doc = json.loads(text)
        if "header" in doc:
            rows.append(("header", segment, segment, _as_text(doc["header"])))
        for kind in ("messages", "contexts", "transitions"):
            rows += [(kind, segment, index, _as_text(row)) for index, row in doc.get(kind, [])]
    return rows


def _as_text(row: Any) -> str:
    """A saved row's JSON text (a store holds it as an object, or as text if older)."""
    return row if isinstance(row, str) else json.dumps(row)


def edit_saved(
    db: str | os.PathLike[str],
    kind: str,
    index: int,
    change: Change,
    *,
    run_id: str = "r",
    segment: int = 0,
) -> None:
    """Change one saved row of a run as anyone who can write the store's file could (see
    :func:`saved_rows` for the kinds; a transition's ``index`` is its place in ``segment``)."""

    def changed(row: Any) -> Any:
        """The row changed: text in place of it, or its JSON edited (kept as the store
        keeps it: an object, or text in a store of the older format)."""
        if change is None or isinstance(change, str):
            return change
        data = json.loads(row) if isinstance(row, str) else row
        change(data)
        return json.dumps(data) if isinstance(row, str) else data

    edited = 0
    with contextlib.closing(sqlite3.connect(db)) as con:
        for rowid, row_segment, text in con.execute(
            "SELECT rowid, segment, doc FROM log WHERE run_id = ?", (run_id,)
        ).fetchall():
            doc = json.loads(text)
            if kind == "header":
                if row_segment != index or "header" not in doc:
                    continue
                new = changed(doc.pop("header"))
                if new is not None:
                    doc["header"] = new
            else:
                if kind == "transitions" and row_segment != segment:
                    continue
                pairs = doc.get(kind, [])
                if not any(i == index for i, _ in pairs):
                    continue
                doc[kind] = [
                    (i, new)
                    for i, row in pairs
                    for new in [changed(row) if i == index else row]
                    if new is not None
                ]
            con.execute("UPDATE log SET doc = ? WHERE rowid = ?", (json.dumps(doc), rowid))
            edited += 1
        con.commit()
    assert edited, f"run {run_id!r} has no saved {kind} {index}"


def as_format(db: str | os.PathLike[str], version: int) -> None:
    """Rewrite a store file as an older format wrote it: format 2 wrote every chain in
    full, format 1 also each row's JSON as a string in its document."""
    with SQLiteStore(db, read_only=True) as store:
        saved = {info.run_id: load_run(store, info.run_id, strict=False) for info in store.runs()}
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute("SELECT rowid, run_id, segment, doc FROM log").fetchall()
        for rowid, run_id, segment, text in rows:
            doc = json.loads(text)
            run = saved[run_id]
            packer = Packer(run.messages, run.contexts)  # the file's own tables
            trace = run.traces[segment].transitions
            if "transitions" in doc:
                doc["transitions"] = [
                    [i, packer.transition(trace[i])] for i, _ in doc["transitions"]
                ]
            if version == 1:
                if "header" in doc:
                    doc["header"] = json.dumps(doc["header"])
                for kind in ("messages", "contexts", "transitions"):
                    if kind in doc:
                        doc[kind] = [[i, json.dumps(row)] for i, row in doc[kind]]
            con.execute("UPDATE log SET doc = ? WHERE rowid = ?", (json.dumps(doc), rowid))
        con.execute("UPDATE meta SET value = ? WHERE key = 'format'", (f"agentfsm/{version}",))
        con.commit()


def edit_store(db: str | os.PathLike[str], sql: str, *params: Any) -> None:
    """Run one SQL statement on a store's file, as anyone who can write it could."""
    with contextlib.closing(sqlite3.connect(db)) as con:
        con.execute(sql, params)
        con.commit()
