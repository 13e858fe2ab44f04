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
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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


@pytest.mark.parametrize("shape", ["subagent"])  # a plain agent's: test_store_approval_kills
def test_an_approved_call_runs_once_whichever_boundary_the_resumer_dies_at(
    shape: str, tmp_path: Path
) -> None:
    # One saved run that stops for approval, copied for each trial: what a start process
    # leaves is the same every time (a fixed script, the run and its child at rest).
    base = tmp_path / "base"
    base.mkdir()
    _worker(shape, "start", base / "runs.db", base / "ledger", 0)

    def copy(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(base, folder)
        return folder

    # How many transitions a resume that is never killed hears.
    count = copy("count")
    before = _steps(count / "runs.db")
    assert _worker(shape, "resume", count / "runs.db", count / "ledger", 0) == 0
    total = _steps(count / "runs.db") - before
    assert total >= 7

    # One trial per boundary, each in its own copy and processes; a few at once.
    folders = {kill_at: copy(f"kill-{kill_at}") for kill_at in range(1, total + 1)}

    def trial(kill_at: int) -> None:
        db, ledger = folders[kill_at] / "runs.db", folders[kill_at] / "ledger"
        assert _worker(shape, "resume", db, ledger, kill_at) == -9, f"killed at {kill_at}"
        assert _worker(shape, "resume", db, ledger, 0) == 0, f"killed at {kill_at}"

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(trial, folders))
    for kill_at, folder in folders.items():
        lines = (folder / "ledger").read_text().split()
        assert lines.count("done") == 1, f"killed at transition {kill_at}: {lines}"
        with SQLiteStore(folder / "runs.db") as store:
            assert load_run(store, "job", strict=False).status == "ok"
