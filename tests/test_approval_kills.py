"""A subagent's approved call is exactly-once: kill -9 at every boundary after the decision.

A lead's subagent stops for approval; a resumer process approves it and is killed right
after its N-th transition was checkpointed (every N the resume has, the lead's and the
child's alike), then a fresh process finishes the run. The approved tool must have run
exactly once: it is never in flight at these kills, and the child's run is saved beside
its parent's, so its resume goes on where it was. (A plain agent's kills, in flight ones
included: tests/test_store_approval_kills.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm.store import SQLiteStore, load_run

ROOT = Path(__file__).resolve().parent.parent


def _worker(shape: str, mode: str, db: Path, ledger: Path, kill_at: int) -> int:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests._approval_kill_worker",
            shape,
            mode,
            str(db),
            str(ledger),
            str(kill_at),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode not in (0, -9):
        raise AssertionError(f"{mode} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.returncode


def _steps(db: Path) -> int:
    """The steps of the saved run and of its children, saved beside it."""
    with SQLiteStore(db) as store:
        return sum(load_run(store, info.run_id, strict=False).steps for info in store.runs())


def _transitions(shape: str, tmp: Path) -> int:
    """How many transitions a resume that is never killed hears."""
    db, ledger = tmp / "count.db", tmp / "count.log"
    _worker(shape, "start", db, ledger, 0)
    before = _steps(db)
    assert _worker(shape, "resume", db, ledger, 0) == 0
    return _steps(db) - before


@pytest.mark.parametrize("shape", ["subagent"])  # a plain agent's: test_store_approval_kills
def test_an_approved_call_runs_once_whichever_boundary_the_resumer_dies_at(
    shape: str, tmp_path: Path
) -> None:
    total = _transitions(shape, tmp_path)
    assert total >= 7
    for kill_at in range(1, total + 1):
        db, ledger = tmp_path / f"{kill_at}.db", tmp_path / f"{kill_at}.log"
        _worker(shape, "start", db, ledger, 0)
        assert _worker(shape, "resume", db, ledger, kill_at) == -9
        assert _worker(shape, "resume", db, ledger, 0) == 0, f"killed at {kill_at}"
        lines = ledger.read_text().split()
        assert lines.count("done") == 1, f"killed at transition {kill_at}: {lines}"
        with SQLiteStore(db) as store:
            assert load_run(store, "job", strict=False).status == "ok"
