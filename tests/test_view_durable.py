"""``agentfsm view RUN --db`` over a durable engine's (DBOS) database: one --db syntax for
every command, a path or a URL."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the durable engine needs the dbos extra")

from agentfsm import AgentState
from agentfsm.durable import Engine
from tests.test_durable import _record_agent


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    """A DBOS SQLite database with one finished run, and its engine (runs in this process)."""
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    engine = Engine(url, polling_interval=0.05)
    engine.register("plain", _record_agent())
    engine.register("gated", _record_agent(gated=True))
    engine.launch(executor_id="in-process")
    try:
        engine.result(
            engine.submit(AgentState.of("job"), agent="plain", run_id="job-1"), timeout=60
        )
        yield url, engine
    finally:
        engine.close()


def _view(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", "view", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _data(page: str) -> dict[str, object]:
    found = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page)
    assert found
    return dict(json.loads(found.group(1)))


def test_view_writes_a_durable_runs_page_from_a_path_or_a_url(
    durable: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = durable
    path = url.removeprefix("sqlite:///")
    for given, out in ((url, "by-url.html"), (path, "by-path.html")):
        done = _view("job-1", "--db", given, "--out", out, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"wrote {out}"
        data = _data((tmp_path / out).read_text(encoding="utf-8"))
        assert data["run_id"] == "job-1" and data["title"] == "run job-1"
        steps = data["steps"]
        assert isinstance(steps, list) and steps[-1]["dest"] == "ok"
        segments = data["segments"]
        assert isinstance(segments, list) and segments[-1]["outcome"]["terminal"] == "ok"
    result = engine.result("job-1", timeout=10)
    assert len(steps) == sum(len(t) for t in result.traces)


def test_a_durable_run_not_ended_or_missing_is_one_line(
    durable: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = durable
    engine.submit(AgentState.of("job"), agent="gated", run_id="waits")
    started = time.monotonic()
    while engine.status("waits").status != "waiting":
        assert time.monotonic() - started < 60, "the run never waited"
        time.sleep(0.05)
    waiting = _view("waits", "--db", url, cwd=tmp_path)
    assert waiting.returncode == 2 and len(waiting.stderr.splitlines()) == 1, waiting.stderr
    assert "run waits waits for decisions" in waiting.stderr
    assert "agentfsm runs show waits" in waiting.stderr
    missing = _view("nobody", "--db", url, cwd=tmp_path)
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1, missing.stderr
    assert not list(tmp_path.glob("*.html"))


def test_a_store_is_named_by_a_path_or_a_sqlite_url_too(tmp_path: Path) -> None:
    from agentfsm import Agent, Message, start_run
    from agentfsm.providers import ScriptedModel
    from agentfsm.store import SQLiteStore

    with SQLiteStore(tmp_path / "runs.db") as store:
        agent = Agent(ScriptedModel([Message.assistant("hi")]), [])
        start_run(agent, AgentState.of("hello"), store, run_id="plain").run_sync()
    done = _view("plain", "--db", f"sqlite:///{tmp_path / 'runs.db'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _data((tmp_path / "plain.html").read_text(encoding="utf-8"))["run_id"] == "plain"
