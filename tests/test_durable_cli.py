"""Durable runs as users meet them on the command line and in the client: a run that
ended before its first step, a drain while a run waits, a worker of another release,
database mistakes, and two agents on one queue."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable engine needs the dbos extra")

from agentfsm import AgentState
from agentfsm.durable import Engine
from tests.test_durable import ROOT, _record_agent
from tests.test_durable import db as db  # a fixture
from tests.test_durable import pg_server as pg_server  # a fixture


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _path(db: str) -> str:
    return db.removeprefix("sqlite:///")


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_view_of_a_run_that_ended_before_its_first_step_is_one_line_and_exit_2(
    db: str, tmp_path: Path
) -> None:
    with Engine(db, polling_interval=0.05) as warm:  # a worker made the database
        warm.register("warm", _record_agent())
        warm.launch(executor_id="warm")
    with Engine(db, polling_interval=0.05) as client:  # no worker of "early" yet
        run_id = client.submit(
            AgentState.of("x"), agent="early", run_id="early-1", until_tool="missing"
        )
    with Engine(db, polling_interval=0.05) as engine:
        engine.register("early", _record_agent())
        engine.launch(executor_id="early-worker")
        result = engine.result(run_id, timeout=30)
    assert (result.status, result.traces) == ("error", ())
    assert result.state.error is not None and result.state.error.type == "invalid_options"
    shown = _cli("runs", "show", run_id, "--db", _path(db))
    assert shown.returncode == 0, shown.stderr
    viewed = _cli("view", run_id, "--db", _path(db), "--out", str(tmp_path / "page.html"))
    assert viewed.returncode == 2, viewed.stderr
    assert viewed.stderr.splitlines() == [
        f"agentfsm view: error: run early-1 ended error before its first step, so it has no path "
        f"to draw: {result.state.error}; 'agentfsm runs show early-1 --db {_path(db)}' "
        "shows it"
    ], viewed.stderr
    assert not (tmp_path / "page.html").exists()
