"""Durable runs as users meet them on the command line and in the client: a run that
ended before its first step, a drain while a run waits, a worker of another release,
database mistakes, and two agents on one queue."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the durable engine needs the dbos extra")

from agentfsm import STANDARD, Agent, AgentfsmError, AgentState, Approval, StoreError
from agentfsm.durable import Engine, list_runs
from tests.test_durable import ROOT, _record_agent, _wait_for_decisions, _Workers
from tests.test_durable import db as db  # a fixture


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
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


# ---------------------------------------------------------------- databases named wrong


EMPTY = (
    "--db is empty: give a SQLite file path or a URL "
    "(postgresql://USER@HOST/DATABASE, sqlite:///FILE)"
)
MYSQL = (
    "--db mysql://me:***@db-host/agents: mysql:// is not a database agentfsm runs on; did you "
    "mean postgresql://USER@HOST/DATABASE, or a SQLite file (a path, or sqlite:///FILE)?"
)
PORT = (
    "--db postgresql://me@db-host:fivefour/agents: the port 'fivefour' is not a number "
    "from 1 to 65535"
)


def test_the_client_refuses_a_database_no_worker_made_in_one_typed_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "never.db"
    with Engine(missing) as engine, pytest.raises(StoreError) as refused:
        engine.submit(AgentState.of("x"), agent="plain")
    assert str(refused.value) == (
        f"no durable database at {missing}: start a worker on it first (it creates the "
        "database and its tables), or check the path"
    )
    assert not missing.exists()  # never made empty by a client
    with pytest.raises(StoreError, match="no durable database at"):
        list_runs(missing)
    assert capfd.readouterr().err == ""


def test_the_client_on_a_postgresql_database_no_worker_made_says_what_to_do(
    pg_server: str, capfd: pytest.CaptureFixture[str]
) -> None:
    url = pg_server.rsplit("/", 1)[0] + "/nobody_made_this"
    with Engine(url) as engine, pytest.raises(StoreError) as refused:
        engine.submit(AgentState.of("x"), agent="plain")
    said = str(refused.value)
    assert isinstance(refused.value, AgentfsmError) and "\n" not in said
    assert said.startswith(f"the durable database {url} cannot be used: ")
    assert said.endswith(
        '"nobody_made_this" does not exist; no worker ever started on it: start a worker '
        "first (it creates the database and its tables), or create the database"
    ), said
    assert capfd.readouterr().err == ""  # DBOS logs nothing of it: the error says it all
    listed = _cli("runs", "list", "--db", url)
    assert listed.returncode == 2
    assert listed.stderr.splitlines() == [f"agentfsm runs: {said}"]


@pytest.mark.parametrize(
    ("db", "said"),
    [
        ("mysql://me:secret@db-host/agents", MYSQL),
        ("postgresql://me@db-host:fivefour/agents", PORT),
        ("", EMPTY),
    ],
)
def test_a_db_that_names_no_database_is_refused_alike_everywhere(db: str, said: str) -> None:
    with pytest.raises(StoreError) as refused:
        Engine(db)
    assert str(refused.value) == said.replace("--db", "db", 1)
    commands = {
        "worker": ["worker", "--db", db, "tests._durable_agent:agent"],
        "runs": ["runs", "list", "--db", db],
        "view": ["view", "some-run", "--db", db],
    }
    for command, argv in commands.items():
        done = _cli(*argv)
        assert done.returncode == 2, (command, done.stderr)
        prefix = "agentfsm view: error:" if command == "view" else f"agentfsm {command}:"
        assert done.stderr.splitlines() == [f"{prefix} {said}"], (command, done.stderr)


# ---------------------------------------------------------------- one queue, one agent


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_worker_refuses_a_queue_a_live_worker_of_another_agent_serves(
    db: str, tmp_path: Path
) -> None:
    with Engine(db, queue="shared", polling_interval=0.05) as alpha:
        alpha.register("alpha", _record_agent())
        alpha.launch(executor_id="alpha-worker")
        beta = _cli(
            "worker", "--db", db, "tests._durable_agent:agent", "--name", "beta",
            "--queue", "shared", "--executor-id", "beta-worker",
        )  # fmt: skip
        assert beta.returncode == 2, beta.stderr
        assert beta.stderr.splitlines() == [
            f"agentfsm worker: cannot start on {db}: queue 'shared' is served by worker "
            "'alpha-worker', running 'alpha'; a worker of 'beta' on it would take their runs "
            "and they its: give each agent its own queue (drop --queue, or name another)"
        ]
        # the runs of the queue stay alpha's: none ends unknown_agent
        ids = [alpha.submit(AgentState.of(f"a{n}"), agent="alpha") for n in range(4)]
        results = [alpha.result(i, timeout=30) for i in ids]
        assert [r.status for r in results] == ["ok"] * 4
        # another worker of the same agent shares the queue (a second machine, a release)
        same = subprocess.Popen(
            [sys.executable, "-m", "agentfsm", "worker", "--db", db,
             "tests._durable_agent:agent", "--name", "alpha", "--queue", "shared",
             "--executor-id", "alpha-2"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert same.stdout is not None
            assert "running 'alpha' on shared" in same.stdout.readline()
        finally:
            same.terminate()
            same.communicate(timeout=60)
    assert same.returncode == 0


# ---------------------------------------------------------------- a release under one id


def _released() -> Agent:
    """The gated agent on changed machines: another application version."""

    def keep(result: Any, opts: Any = None) -> Any:
        return result

    other = STANDARD.replace("deciding", (*STANDARD.steps["deciding"], keep), name="released")
    agent = _record_agent(gated=True)
    return Agent(agent.model, agent.tools, middleware=agent.middleware, machine=other)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_run_left_by_a_worker_started_again_on_another_version_shows_orphaned(
    db: str,
) -> None:
    first = Engine(db, polling_interval=0.05)
    first.register("rel", _record_agent(gated=True))
    first.launch(executor_id="box")
    old = first.app_version
    run_id = first.submit(AgentState.of("rel"), agent="rel", run_id="left")
    _wait_for_decisions(first, run_id, "rel-0")
    first.close()  # killed: nothing drained, nothing handed back
    with Engine(db, polling_interval=0.05) as second:
        second.register("rel", _released())
        second.launch(executor_id="box")  # the same id, the next release
        new = second.app_version
        assert new != old
        record = second.status(run_id)
        listed = {r.run_id: r.status for r in second.runs()}
        shown = _cli("runs", "show", run_id, "--db", _path(db))
        as_list = _cli("runs", "list", "--db", _path(db))
    reason = (
        f"its worker box runs version {new} now, not the run's {old}: start a worker of the "
        "run's version (its agents' machines as they were) with --recover box"
    )
    assert (record.status, record.executor, record.reason) == ("orphaned", "box", reason)
    assert listed[run_id] == "orphaned"
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1] == f"orphaned: {reason}"
    assert shown.stdout.startswith("run left: orphaned (agent rel")
    [row] = [line for line in as_list.stdout.splitlines() if line.startswith("left ")]
    assert row.split()[1] == "orphaned"


# ---------------------------------------------------------------- a drain while a run waits


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_run_drained_while_it_waits_keeps_its_wait_and_the_worker_says_so(
    db: str, tmp_path: Path
) -> None:
    workers = _Workers(
        db, tmp_path / "calls.log", model_delay=0, tool_delay=0, agent="tests._durable_agent:gated"
    )
    client = Engine(db, polling_interval=0.05)
    try:
        first = workers.start("first", "--name", "gated")
        run_id = client.submit(AgentState.of("held"), agent="gated", run_id="held")
        [asked] = Approval.of(_wait_for_decisions(client, run_id, "held-0")).requests
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert out.splitlines() == [
            "agentfsm worker first: drained, 1 run(s) handed back to the queue (1 of them "
            "waiting for decisions, handed back as they wait: the next worker takes their "
            "decisions)"
        ]
        assert client.status(run_id).status == "queued"
        client.decide(run_id, [asked.approve().to_data()])  # while no worker runs it
        workers.start("second", "--name", "gated")
        for call in ("held-1", "held-2"):
            _wait_for_decisions(client, run_id, call)
            client.decide(run_id, [{"type": "approve"}], unbound=True)
        result = client.result(run_id, timeout=60)
        record = client.status(run_id)
    finally:
        client.close()
        workers.close()
    assert (result.status, record.executor) == ("ok", "second")
    assert "paused: draining" not in result.ends  # handed back as it waited, not paused
    assert result.ends[0] == "interrupted"
    tools = [m.tool_results[0].text for m in result.state.messages if m.role == "tool"]
    assert len(tools) == 3 and all(t.startswith("recorded ") for t in tools), tools
