"""The runs of a store as the studio lists them: one row per run, filtered, searched, paged.

A row is built by loading the run once and kept until the run changes (its newest
checkpoint moves), so an index of many finished runs reads each of them once. Each
step's wall-clock time and a run's head are read straight from the SQLite log, which
keeps the time of every checkpoint.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..errors import AgentfsmError
from ..machine import UnknownMachineError
from ..serialization import FormatError, UnknownToolError
from ..store import RunInfo, SavedRun, SQLiteStore, StoreError, load_run
from ..view import wall_clock

__all__ = ["EAGER", "PAGE_SIZE", "Catalog", "Row"]

#: Rows on one page of the index.
PAGE_SIZE: Final = 50

#: A store of up to this many runs is read whole for its index (machines and tools known).
EAGER: Final = 500

#: The order of the index: runs waiting for a human first.
_FIRST: Final = {"interrupted": 0, "paused": 1, "running": 2}

#: What loading a run may raise when the run (or its machine) cannot be shown.
_UNREADABLE: Final = (
    FormatError,
    UnknownToolError,
    UnknownMachineError,
    StoreError,
    RecursionError,
)


@attrs.frozen
class Row:
    """One run as the index lists it."""

    run_id: str
    status: str
    state: str
    steps: int
    segments: int
    summary: str | None
    created: float
    updated: float
    machine: str | None = None
    model_calls: int = 0
    tokens: int = 0
    tools: tuple[str, ...] = ()
    #: Every message's text, lower-cased, for the search box.
    text: str = attrs.field(default="", repr=False)
    #: Why the run cannot be shown, if it cannot.
    problem: str | None = None

    @property
    def duration(self) -> float:
        return max(0.0, self.updated - self.created)

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "state": self.state,
            "steps": self.steps,
            "segments": self.segments,
            "summary": self.summary,
            "created": self.created,
            "updated": self.updated,
            "duration": self.duration,
            "machine": self.machine,
            "model_calls": self.model_calls,
            "tokens": self.tokens,
            "tools": list(self.tools),
            "problem": self.problem,
        }


def _row(info: RunInfo, saved: SavedRun | None, problem: str | None) -> Row:
    base = Row(
        run_id=info.run_id,
        status=info.status,
        state=info.state,
        steps=info.steps,
        segments=info.segments,
        summary=info.summary,
        created=info.created,
        updated=info.updated,
        text=info.run_id.lower(),
    )
    if saved is None:
        return attrs.evolve(base, problem=problem)
    calls = sum(
        1
        for trace in saved.traces
        for t in trace
        if t.source == "calling" and not (t.detail and t.detail.get("requested"))
    )
    tokens = 0
    texts = [saved.run_id]
    tools: set[str] = set()
    for message in saved.messages:
        usage = message.metadata.get("usage")
        if isinstance(usage, Mapping):
            tokens += sum(
                v
                for k, v in usage.items()
                if k in ("input_tokens", "output_tokens")
                and isinstance(v, int)
                and not isinstance(v, bool)
            )
        texts.append(message.text)
        tools.update(c.name for c in message.tool_calls)
        texts.extend(r.text for r in message.tool_results)
    return attrs.evolve(
        base,
        machine=saved.trace.machine,
        model_calls=calls,
        tokens=tokens,
        tools=tuple(sorted(tools)),
        text="\n".join(texts).lower(),
    )


class Catalog:
    """The runs of the store at ``path``, read-only."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.store = SQLiteStore(path, read_only=True)
        self._rows: dict[str, tuple[tuple[float, int], Row]] = {}
        self._infos: dict[str, RunInfo] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self.store.close()

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)
        con.execute("PRAGMA query_only = ON")
        return con

    def rows(self, *, detailed: bool = True) -> list[Row]:
        """Every run, waiting ones first, then the most recently changed.

        Without ``detailed``, a run not read yet is listed from the store's listing
        alone (no machine, counts or text): a large store's first page needs only its
        own runs read.
        """
        infos = self.store.runs()
        out = []
        with self._lock:
            seen = set()
            for info in infos:
                seen.add(info.run_id)
                key = (info.updated, info.steps)
                known = self._rows.get(info.run_id)
                if known is None or known[0] != key:
                    self._infos[info.run_id] = info
                    if not detailed:
                        out.append(_row(info, None, None))
                        continue
                    known = (key, self._load(info))
                    self._rows[info.run_id] = known
                out.append(known[1])
            for gone in set(self._rows) - seen:
                del self._rows[gone]
        out.sort(key=lambda r: (_FIRST.get(r.status, 3), -r.updated, r.run_id))
        return out

    def _detail(self, rows: list[Row]) -> list[Row]:
        """``rows`` with what reading each run adds (read once, kept until it changes)."""
        out = []
        with self._lock:
            for row in rows:
                info = self._infos.get(row.run_id)
                known = self._rows.get(row.run_id)
                if known is None and info is not None:
                    known = ((info.updated, info.steps), self._load(info))
                    self._rows[row.run_id] = known
                out.append(row if known is None else known[1])
        return out

    def _load(self, info: RunInfo) -> Row:
        try:
            return _row(info, load_run(self.store, info.run_id, strict=False), None)
        except _UNREADABLE as exc:
            return _row(info, None, " ".join(str(exc).split()) or type(exc).__name__)
        except AgentfsmError as exc:
            return _row(info, None, " ".join(str(exc).split()))

    def page(
        self,
        *,
        status: str = "",
        machine: str = "",
        tool: str = "",
        query: str = "",
        page: int = 1,
    ) -> dict[str, Any]:
        """One page of the index, filtered by status, machine and tool, searched for text.

        A store of up to :data:`EAGER` runs is read whole; a larger one only as far as
        the page needs (every run for a machine, tool or text filter), and its machine
        and tool choices are those of the runs read so far.
        """
        needs_all = bool(machine or tool or query.strip())
        rows = self.rows(detailed=False)
        if needs_all or len(rows) <= EAGER:
            rows = self.rows()
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.status] = counts.get(r.status, 0) + 1
        needle = query.strip().lower()
        picked = [
            r
            for r in rows
            if (not status or r.status == status)
            and (not machine or r.machine == machine)
            and (not tool or tool in r.tools)
            and (not needle or needle in r.text)
        ]
        pages = max(1, -(-len(picked) // PAGE_SIZE))
        page = min(max(1, page), pages)
        shown = self._detail(picked[(page - 1) * PAGE_SIZE : page * PAGE_SIZE])
        with self._lock:
            read = [row for _, row in self._rows.values()]
        machines = sorted({r.machine for r in read if r.machine})
        tools = sorted({t for r in read for t in r.tools})
        return {
            "runs": [r.as_json() for r in shown],
            "total": len(picked),
            "all": len(rows),
            "page": page,
            "pages": pages,
            "statuses": counts,
            "machines": machines,
            "tools": tools,
        }

    def head(self, run_id: str) -> str | None:
        """The run's newest checkpoint and status, cheaply: it changes when the run moves."""
        con = self._connect()
        try:
            row = con.execute(
                "SELECT status, updated, (SELECT max(rowid) FROM log WHERE run_id = ?1) "
                "FROM runs WHERE run_id = ?1",
                (run_id,),
            ).fetchone()
        except sqlite3.OperationalError:  # a store made before the log
            row = con.execute(
                "SELECT status, updated, steps FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        finally:
            con.close()
        return None if row is None else f"{row[0]}:{row[1]!r}:{row[2]!r}"

    def clock(self, run_id: str, steps: int) -> Sequence[float | None]:
        """Each step's wall-clock time: when the checkpoint that saved it was written."""
        return wall_clock(self.path, run_id, steps)
