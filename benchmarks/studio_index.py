"""The studio's index over a large store: how long a page, a filter and a search take.

    python benchmarks/studio_index.py [--runs 10000] [--db FILE] [--repeat 3]

It saves ``--runs`` runs (a tool call and an answer each, 14 steps; kept in ``--db``
for the next time when given), then times the index as the studio serves it
(:class:`agentfsm.studio._catalog.Catalog`): the first page of a store never indexed
(it builds the store's search index, once), a fresh studio's first page, another page,
a status filter, a tool filter, a text search (the first, in a fresh studio, and
again), and a search once one more run was saved. It prints one table, the median of
``--repeat`` fresh studios for the first-time rows (``--no-index``: as the studio searched
before its index, for comparison). Run it by hand; no test times anything.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentfsm import Agent, AgentState, Message, start_run, tool  # noqa: E402
from agentfsm.providers import ScriptedModel, call_tool  # noqa: E402
from agentfsm.store import SQLiteStore  # noqa: E402
from agentfsm.studio._catalog import Catalog  # noqa: E402


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _save(store: SQLiteStore, i: int) -> None:
    name = "multiply" if i % 10 == 0 else "add"
    model = ScriptedModel(
        [call_tool(name, {"a": i, "b": 2}), Message.assistant(f"the answer is ready, word{i}")]
    )
    agent = Agent(model, [add, multiply])
    prompt = f"please {name} {i} and 2, about topic{i % 97}"
    start_run(agent, AgentState.of(prompt), store, run_id=f"run-{i:05d}").run_sync()


def _fill(path: str, runs: int) -> float:
    """Save runs up to ``runs`` in the store; the seconds it took."""
    started = time.perf_counter()
    with SQLiteStore(path, synchronous="OFF") as store:
        have = len(store.runs())
        for i in range(have, runs):
            _save(store, i)
    return time.perf_counter() - started


def _timed(catalog: Catalog, **filters: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    found = catalog.page(**filters)
    return time.perf_counter() - started, found


def _drop_index(path: str) -> None:
    """The store as one made before the search index: its runs, no index."""
    con = sqlite3.connect(path)
    con.executescript("DROP TABLE IF EXISTS search_runs; DROP TABLE IF EXISTS search_text;")
    con.execute("DELETE FROM meta WHERE key = 'search_upto'")
    con.commit()
    con.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--db", help="the store to fill (and keep); default: a temporary file")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--no-index", action="store_true", help="search as before the index: every checkpoint"
    )
    args = parser.parse_args()
    if args.no_index:
        SQLiteStore.search_index = lambda self: None  # type: ignore[method-assign]
    folder = tempfile.mkdtemp()
    path = args.db or os.path.join(folder, "index.db")
    filled = _fill(path, args.runs)
    print(f"{args.runs} runs in {path} ({filled:.1f} s to save the missing ones)")

    rows: dict[str, list[float]] = {}

    def note(what: str, seconds: float, found: Any) -> None:
        rows.setdefault(what, []).append(seconds)
        counts[what] = found["total"]

    counts: dict[str, int] = {}
    for _ in range(args.repeat):
        _drop_index(path)
        catalog = Catalog(path)
        note("first page, store never indexed", *_timed(catalog))
        catalog.close()
        catalog = Catalog(path)
        note("first page, fresh studio", *_timed(catalog))
        note("another page", *_timed(catalog, page=5))
        note("status filter", *_timed(catalog, status="ok", page=3))
        note("tool filter", *_timed(catalog, tool="multiply"))
        catalog.close()
        catalog = Catalog(path)
        note("first search, fresh studio", *_timed(catalog, query="word4242"))
        note("search again", *_timed(catalog, query="topic13"))
        with SQLiteStore(path) as store:
            _save(store, args.runs + 1000)
        note("search after one more run", *_timed(catalog, query="word"))
        with SQLiteStore(path) as store:
            store.delete(f"run-{args.runs + 1000:05d}")
        catalog.close()
    width = max(map(len, rows))
    print(f"{'':{width}}  {'median ms':>10}  {'max ms':>8}  {'matched':>7}")
    for what, times in rows.items():
        median, worst = statistics.median(times) * 1e3, max(times) * 1e3
        print(f"{what:{width}}  {median:>10.1f}  {worst:>8.1f}  {counts[what]:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
