"""Whatever the path or the id: a typed error in one line, and nobody else's file changed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from agentfsm import AgentState, Approval, FormatError, StoreError, start_run
from agentfsm._cli._main import main
from agentfsm.store import SQLiteStore, load_run
from tests import _race_worker as race


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def test_another_applications_sqlite_file_is_never_changed(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("CREATE TABLE users (name TEXT)")
        con.execute("INSERT INTO users VALUES ('ada')")
        con.commit()
    before = path.read_bytes()
    with pytest.raises(FormatError, match="not an agentfsm store"):
        SQLiteStore(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no WAL, no journal
    status, _, err = run_cli("runs", "list", "--db", str(path))
    assert status == 2 and err.count("\n") == 1 and "not an agentfsm store" in err
    assert path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_a_store_error_and_stays_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_a_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        SQLiteStore(tmp_path)
    for argv in (["runs", "list"], ["runs", "show", "r"], ["view", "r"]):
        status, _, err = run_cli(*argv, "--db", str(tmp_path))
        assert status == 2 and err.count("\n") == 1, err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    SQLiteStore(path).close()
    path.chmod(0)
    with pytest.raises(StoreError):
        SQLiteStore(path)


def test_a_run_in_use_is_refused_by_runs_resume_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    ledger = tmp_path / "ledger.txt"
    race.interrupted(db, ledger)
    with SQLiteStore(db) as store:
        state = load_run(store, "r", strict=False).agent_state
        store.claim("r", f"{os.uname().nodename}:{os.getpid()}:holder", None)
    assert state is not None
    approve = [d.to_data() for d in Approval.of(state.interrupt_data).approve_all()]
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("AGENTFSM_TEST_LEDGER", str(ledger))
    status, _, err = run_cli(
        "runs",
        "resume",
        "r",
        "--db",
        str(db),
        "--agent",
        "tests._race_worker:agent",
        "--decisions",
        json.dumps(approve),
    )
    assert status == 2 and err.count("\n") == 1, err
    assert "another process" in err and "Traceback" not in err
    assert not ledger.exists()


def test_a_long_run_id_does_not_crash_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    status, _, err = run_cli("view", "x" * 300, "--db", str(db.with_name("none.db")))
    assert status == 2 and err.count("\n") == 1, err
    long_id = "run-" + "y" * 296
    with SQLiteStore(db) as store:
        start_run(
            race.make_agent(tmp_path / "ledger", nap=0),
            AgentState.of("go"),
            store,
            run_id=long_id,
        ).run_sync()
    status, _, err = run_cli("view", long_id, "--db", str(db))
    assert status == 0, err
    (page,) = tmp_path.glob("*.html")
    assert len(page.name) <= 105 and page.name.startswith("run-yyy")
    status, _, err = run_cli("view", "z" * 300 + "\x00", "--db", str(db))
    assert status == 2 and err.count("\n") == 1, err


def test_the_current_folder_goes_on_sys_path_only_for_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    (tmp_path / "tempfile.py").write_text("raise SystemExit('a stray tempfile.py ran')\n")
    status, _, err = run_cli("runs", "resume", "r", "--db", str(tmp_path / "none.db"))
    assert status == 2 and "no store" in err
    assert str(tmp_path) not in sys.path
    status, _, err = run_cli(
        "runs",
        "resume",
        "r",
        "--db",
        str(tmp_path / "none.db"),
        "--agent",
        "agentfsm._demo:demo_agent",
    )
    assert status == 2
    assert sys.path[-1] == str(tmp_path)  # after the installed packages, never in front


def test_tables_named_like_a_stores_without_its_format_are_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "look-alike.db"
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        con.execute("CREATE TABLE runs (id TEXT)")
        con.commit()
    before = path.read_bytes()
    with pytest.raises(FormatError, match="not an agentfsm store"):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_processes_making_one_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "new.db"
    errors: list[Exception] = []
    start = threading.Barrier(6)

    def opener() -> None:
        start.wait()
        try:
            SQLiteStore(path).close()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    with SQLiteStore(path) as store:
        assert store.runs() == []
