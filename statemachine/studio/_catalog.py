"""The runs of a store as the studio lists them: one row per run, filtered, searched, paged.

A row is built by loading the run once (checked as every load is) and kept until the
run changes (its newest checkpoint moves), so an index of many finished runs reads
each of them once. A large store is filtered and searched without loading its runs:
what a filter needs of a run (its machine, its tools, the text of its messages) is
the store's digest of it (:meth:`SQLiteStore.digests
<agentfsm.store.SQLiteStore.digests>`), read for the whole store and again only for
a run that moved; the rows shown are loaded and checked. Each step's wall-clock time
and a run's last change are the store's to say too.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import attrs

from .._errors import AgentfsmError, StoreError
from .._machine import UnknownMachineError
from .._serialization import FormatError, UnknownToolError
from .._steps import get_run_count
from .._view import wall_clock
from ..store import RunDigest, RunInfo, SavedRun, SQLiteStore, load_run
from ._forks import shown_status

__all__ = ["EAGER", "PAGE_SIZE", "Catalog", "Row"]

#: Rows on one page of the index.
PAGE_SIZE: Final = 50

#: A store of up to this many runs is read whole for its index (machines and tools known).
EAGER: Final = 500

#: The order of the index: runs waiting for a human first (a fork nothing runs waits for
#: someone to resume it).
_FIRST: Final = {"interrupted": 0, "paused": 1, "waiting": 1, "running": 2}

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
    #: Whether the run is a fork (its first segment another run's past).
    forked: bool = False

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
    # made once (a large store's index lists every run from its listing alone)
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
        problem=problem if saved is None else None,
        # a row not loaded says it by the summary a fork is saved with
        forked=(info.summary or "").startswith("forked from"),
    )
    if saved is None:
        return base
    # Each segment's chain counts the model calls its machine made, whatever its states
    # are named; a chain that counts none (a machine that keeps no count) is read by its
    # standard state instead.
    calls = sum(get_run_count(t.transitions[-1].chain) for t in saved.traces if t.transitions)
    calls = calls or sum(
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
        forked=saved.forked_from is not None,
        model_calls=calls,
        tokens=tokens,
        tools=tuple(sorted(tools)),
        text="\n".join(texts).lower(),
    )


def _shown(row: Row, status: str) -> dict[str, Any]:
    """The row as the index shows it, in ``status``, the one every page shows the run
    with (:func:`~agentfsm.studio._forks.shown_status`: a fork nothing runs is waiting)."""
    out = row.as_json()
    out["status"] = status
    return out


class _Facts(NamedTuple):
    """What the filters need of a run, read from its checkpoints: kept until it moves (a
    tuple: a large store's index makes one per run)."""

    key: tuple[float, float, int]
    digest: RunDigest


def _key(info: RunInfo) -> tuple[float, float, int]:
    return (info.created, info.updated, info.steps)


class Catalog:
    """The runs of the store at ``path``, read-only."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.store = SQLiteStore(path, read_only=True)
        self._rows: dict[str, tuple[tuple[float, int], Row]] = {}
        self._infos: dict[str, RunInfo] = {}
        self._facts: dict[str, _Facts] = {}
        self._lock = threading.Lock()
        #: The store's search index once opened; None before, False when it cannot be had.
        self._index: Any = None
        self._index_lock = threading.Lock()

    def close(self) -> None:
        self.store.close()
        if self._index:
            self._index.close()

    def _search(self, **filters: str) -> tuple[set[str] | None, list[str], list[str]] | None:
        """The runs the index finds for ``filters`` (None: no filter), with every machine
        and tool of the store; None when the store has no index to keep (one made before
        the log, or one this user may not write), and the runs are read instead."""
        with self._index_lock:
            if self._index is None:
                try:
                    self._index = self.store.search_index() or False
                except StoreError:
                    self._index = False
            if not self._index:
                return None
            try:
                found: tuple[set[str] | None, list[str], list[str]] = self._index.search(**filters)
            except StoreError as exc:
                if not any(word in str(exc) for word in ("locked", "busy")):
                    # a store this user may only read, an SQLite without FTS5: never kept
                    self._index.close()
                    self._index = False
                return None  # (a store busy now: read as before, and tried again next time)
        return found

    def rows(self, *, detailed: bool = True, infos: Sequence[RunInfo] | None = None) -> list[Row]:
        """Every run, waiting ones first, then the most recently changed.

        Without ``detailed``, a run not read yet is listed from the store's listing
        alone (no machine, counts or text): a large store's first page needs only its
        own runs read. ``infos`` is the store's listing when it was just read.
        """
        infos = self.store.runs() if infos is None else infos
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

        A store of up to :data:`EAGER` runs is read whole; a larger one is filtered,
        searched and offered every machine and tool by the store's search index (kept in
        the store, caught up with its log here), and only the page's runs are read.
        """
        needle = query.strip().lower()
        infos = self.store.runs()
        eager = len(infos) <= EAGER
        rows = self.rows(detailed=eager, infos=infos)
        # Counted, filtered and ordered by the status every page shows (a fork nothing
        # runs is waiting, not running); the store's unheld runs read once, for a fork only.
        unheld = functools.cache(self.store.unheld)
        shown = {r.run_id: shown_status(r.run_id, r.status, r.forked, unheld) for r in rows}
        if any(shown[r.run_id] != r.status for r in rows):
            rows.sort(key=lambda r: (_FIRST.get(shown[r.run_id], 3), -r.updated, r.run_id))
        counts: dict[str, int] = {}
        for r in rows:
            counts[shown[r.run_id]] = counts.get(shown[r.run_id], 0) + 1
        picked = [r for r in rows if not status or shown[r.run_id] == status]
        indexed = None if eager else self._search(machine=machine, tool=tool, text=needle)
        if indexed is not None:
            found, every_machine, every_tool = indexed
            if found is not None:
                picked = [r for r in picked if r.run_id in found]
        elif machine or tool or needle:
            if eager:
                known = {r.run_id: (r.machine, r.tools, r.text) for r in rows}
            else:
                facts = self._facts_of(infos)
                known = {
                    k: (f.digest.machine, tuple(f.digest.tools), f.digest.text)
                    for k, f in facts.items()
                }
            none: tuple[str | None, tuple[str, ...], str] = (None, (), "")
            picked = [
                r
                for r in picked
                if (not machine or known.get(r.run_id, none)[0] == machine)
                and (not tool or tool in known.get(r.run_id, none)[1])
                and (not needle or needle in known.get(r.run_id, none)[2])
            ]
        pages = max(1, -(-len(picked) // PAGE_SIZE))
        page = min(max(1, page), pages)
        page_rows = self._detail(picked[(page - 1) * PAGE_SIZE : page * PAGE_SIZE])
        with self._lock:
            read = [row for _, row in self._rows.values()]
            seen = [f.digest for f in self._facts.values()]
        if indexed is not None:
            machines, tools = every_machine, every_tool
        else:
            if not eager and not seen:  # the choices are every run's: read their facts
                seen = [f.digest for f in self._facts_of(infos).values()]
            machines = sorted(
                {r.machine for r in read if r.machine} | {f.machine for f in seen if f.machine}
            )
            tools = sorted({t for r in read for t in r.tools} | {t for f in seen for t in f.tools})
        return {
            "runs": [_shown(r, shown[r.run_id]) for r in page_rows],
            "total": len(picked),
            "all": len(rows),
            "page": page,
            "pages": pages,
            "statuses": counts,
            "machines": machines,
            "tools": tools,
        }

    def _facts_of(self, infos: Sequence[RunInfo]) -> dict[str, _Facts]:
        """Every run's facts, those of runs that moved (or are new) read again."""
        with self._lock:
            live = {info.run_id for info in infos}
            for gone in set(self._facts) - live:
                del self._facts[gone]
            stale = [
                info
                for info in infos
                if (known := self._facts.get(info.run_id)) is None or known.key != _key(info)
            ]
        if stale:
            fresh = self._read_facts(stale)
            with self._lock:
                self._facts.update(fresh)
        with self._lock:
            return dict(self._facts)

    def _read_facts(self, infos: Sequence[RunInfo]) -> dict[str, _Facts]:
        """The facts of ``infos``' runs, from the store's digests of their checkpoints
        (loaded, when the store cannot say: one made before the log, or a log SQLite
        cannot read, which loading explains run by run)."""
        digests = self.store.digests([info.run_id for info in infos])
        if digests is None:
            return {info.run_id: self._loaded_facts(info) for info in infos}
        return {info.run_id: _Facts(_key(info), digests[info.run_id]) for info in infos}

    def _loaded_facts(self, info: RunInfo) -> _Facts:
        row = self._load(info)
        digest = RunDigest(machine=row.machine, tools=frozenset(row.tools), text=row.text)
        return _Facts(_key(info), digest)

    def head(self, run_id: str) -> str | None:
        """The run's newest checkpoint and status, cheaply: it changes when the run moves."""
        return self.store.last_change(run_id)

    def clock(self, run_id: str, steps: int) -> Sequence[float | None]:
        """Each step's wall-clock time: when the checkpoint that saved it was written."""
        return wall_clock(self.store, run_id, steps)
