"""The studio's index over a large store: filters and searches read the checkpoints' text,
not every run loaded, and find what loading would; the rows shown are loaded and checked.

(How long it takes is measured by benchmarks/studio_index.py, by hand.)
"""

from __future__ import annotations

import pathlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")

from agentfsm import Agent, AgentState, Message, start_run
from agentfsm.providers import ScriptedModel, call_tool
from agentfsm.store import SQLiteStore, load_run
from agentfsm.studio import _catalog
from tests.support import add, as_format
from tests.test_studio import make_store


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """The studio's test store, treated as a large one, with a few more runs."""
    db = make_store(tmp_path)
    with SQLiteStore(db) as store:
        for i in range(5):
            model = ScriptedModel(
                [call_tool("add", {"a": i, "b": 1}), Message.assistant(f"Ünïcode answer {i}")]
            )
            agent = Agent(model, [add])
            start_run(agent, AgentState.of(f"sum {i}"), store, run_id=f"sum-{i}").run_sync()
    monkeypatch.setattr(_catalog, "EAGER", 1)
    yield db


def _page(catalog: _catalog.Catalog, **filters: Any) -> list[str]:
    return sorted(r["run_id"] for r in catalog.page(**filters)["runs"])


def test_a_format_1_store_is_searched_as_a_format_2_one(large: pathlib.Path) -> None:
    queries = [{"query": "finite-state"}, {"query": "ünïcode answer 3"}, {"tool": "add"}]
    catalog = _catalog.Catalog(str(large))
    try:
        found = [_page(catalog, **q) for q in queries]
    finally:
        catalog.close()
    assert all(found)
    as_format(large, 1)
    catalog = _catalog.Catalog(str(large))
    try:
        assert [_page(catalog, **q) for q in queries] == found
    finally:
        catalog.close()


def test_a_large_store_is_filtered_as_a_small_one_is(
    large: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = [
        {"query": "finite-state"},  # a tool's result
        {"query": "ÜNÏCODE ANSWER 3"},  # any case
        {"query": "sum-"},  # the run id
        {"query": "window.pwned"},
        {"tool": "add"},
        {"tool": "write_file", "status": "interrupted"},
        {"machine": "standard", "query": "summary.md"},
        {"query": "nothing like it"},
    ]
    catalog = _catalog.Catalog(str(large))
    loads = 0
    real = _catalog.load_run

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal loads
        loads += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_catalog, "load_run", counted)
    try:
        found = [_page(catalog, **q) for q in queries]
        # Only the rows shown are loaded (here every match, the pages being short).
        assert loads <= sum(len(f) for f in found)
        assert "write_file" in catalog.page()["tools"] and "add" in catalog.page()["tools"]
    finally:
        catalog.close()
    monkeypatch.setattr(_catalog, "EAGER", 10_000)
    eager = _catalog.Catalog(str(large))
    try:
        assert found == [_page(eager, **q) for q in queries]
    finally:
        eager.close()
    assert found[0] == ["finished"] and found[1] == ["sum-3"] and len(found[4]) == 5


def test_a_run_that_moved_is_searched_as_it_is_now(large: pathlib.Path) -> None:
    catalog = _catalog.Catalog(str(large))
    try:
        assert _page(catalog, query="a later answer") == []
        with SQLiteStore(large) as store:
            model = ScriptedModel([Message.assistant("a later answer")])
            start_run(Agent(model, []), AgentState.of("late"), store, run_id="late").run_sync()
            store.delete("sum-0")
        assert _page(catalog, query="a later answer") == ["late"]
        assert "sum-0" not in _page(catalog, query="sum-")
    finally:
        catalog.close()


def test_a_damaged_run_is_found_and_shown_with_what_is_wrong(large: pathlib.Path) -> None:
    con = sqlite3.connect(large)
    con.execute("UPDATE log SET doc = replace(doc, 'expanding', 'nowhere') WHERE run_id = 'sum-2'")
    con.execute("INSERT INTO log SELECT run_id, 0, 1, 'x', 1.0, 'not json' FROM runs LIMIT 1")
    con.commit()
    con.close()
    catalog = _catalog.Catalog(str(large))
    try:
        (row,) = catalog.page(query="ünïcode answer 2")["runs"]
        assert row["run_id"] == "sum-2" and row["problem"]  # loaded, and refused
    finally:
        catalog.close()


def test_the_store_digests_runs_alike_with_and_without_sqlite_json(
    large: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.store import _search

    with SQLiteStore(large, read_only=True) as store:
        ids = [info.run_id for info in store.runs()]
        taken = store.digests(ids)
        assert taken is not None and set(taken) == set(ids)
        assert "add" in taken["sum-3"].tools and "ünïcode answer 3" in taken["sum-3"].text
        # An SQLite without JSON functions: every document is parsed in Python instead.
        monkeypatch.setattr(_search, "_MESSAGES", "no_such_function(doc)")
        assert store.digests(ids) == taken
        monkeypatch.setattr(_search, "_ONE_PASS", 0)  # one pass over the whole log
        assert store.digests(ids) == taken


def test_the_store_says_when_a_run_moved_and_when_each_step_was_saved(
    large: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    with SQLiteStore(large) as store:
        before = store.last_change("sum-1")
        times = store.checkpoint_times("sum-1")
        steps = load_run(store, "sum-1", strict=False).steps
        assert before is not None and store.last_change("nothing") is None
        assert times and times[-1][0] == steps
        assert [t for t, _ in times] == sorted(t for t, _ in times)
        store.delete("sum-1")
        assert store.last_change("sum-1") is None and store.checkpoint_times("sum-1") == []
    assert SQLiteStore.tables_in(large) is not None
    assert {"runs", "log", "meta"} <= (SQLiteStore.tables_in(large) or set())
    (tmp_path / "text.db").write_text("not a database")
    assert SQLiteStore.tables_in(tmp_path / "text.db") is None


def test_the_search_index_is_kept_in_the_store_and_follows_runs_made_anew(
    large: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.store import _search

    with SQLiteStore(large, read_only=True) as store:
        before = {i.run_id: load_run(store, i.run_id, strict=False) for i in store.runs()}
    assert "search_text" not in (SQLiteStore.tables_in(large) or set())  # made when searched
    catalog = _catalog.Catalog(str(large))
    try:
        assert _page(catalog, query="ünïcode answer 4") == ["sum-4"]
        with SQLiteStore(large) as store:  # the same id, another run
            store.delete("sum-4")
            model = ScriptedModel([Message.assistant("made anew")])
            start_run(Agent(model, []), AgentState.of("again"), store, run_id="sum-4").run_sync()
        assert _page(catalog, query="ünïcode answer 4") == []
        assert _page(catalog, query="made anew") == ["sum-4"]
        assert _page(catalog, tool="add") == ["sum-0", "sum-1", "sum-2", "sum-3"]
    finally:
        catalog.close()
    assert {"search_runs", "search_text"} <= (SQLiteStore.tables_in(large) or set())
    with SQLiteStore(large, read_only=True) as store:  # the runs themselves are as they were
        for run_id, saved in before.items():
            if run_id != "sum-4":
                assert load_run(store, run_id, strict=False) == saved
    # An SQLite without JSON functions builds the same index from whole documents.
    con = sqlite3.connect(large)
    con.executescript("DROP TABLE search_runs; DROP TABLE search_text;")
    con.execute("DELETE FROM meta WHERE key = 'search_upto'")
    con.commit()
    con.close()
    monkeypatch.setattr(_search, "_MESSAGES", "no_such_function(doc)")
    catalog = _catalog.Catalog(str(large))
    try:
        assert _page(catalog, query="made anew") == ["sum-4"]
        assert _page(catalog, query="finite-state") == ["finished"]
        assert "write_file" in catalog.page()["tools"]
    finally:
        catalog.close()


def test_a_store_whose_sqlite_has_no_fts5_is_searched_from_its_checkpoints(
    large: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.store import _search

    bare = ("CREATE VIRTUAL TABLE IF NOT EXISTS search_text USING no_such_module(text)",)
    monkeypatch.setattr(_search, "_INDEX_SCHEMA", bare)
    catalog = _catalog.Catalog(str(large))
    try:
        assert _page(catalog, query="ünïcode answer 3") == ["sum-3"]
        assert _page(catalog, tool="add") == [f"sum-{i}" for i in range(5)]
        assert "write_file" in catalog.page()["tools"]  # every run's, read from the log
    finally:
        catalog.close()
    assert "search_text" not in (SQLiteStore.tables_in(large) or set())  # nothing half made
