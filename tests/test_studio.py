"""agentfsm studio over HTTP: the JSON it serves, its pages, and who may act.

The studio runs as it does for a user: uvicorn serving the app on a free loopback
port, in a thread of the test; requests go over the network with httpx.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")
uvicorn = pytest.importorskip("uvicorn", reason="agentfsm[studio] is not installed")

from agentfsm import Agent, AgentState, HumanInTheLoop, Message, start_run, tool  # noqa: E402
from agentfsm._demo import DEMO_PROMPT, demo_agent, file_writer  # noqa: E402
from agentfsm.providers import ScriptedModel, call_tool  # noqa: E402
from agentfsm.store import SQLiteStore, load_run  # noqa: E402
from agentfsm.studio import create_app  # noqa: E402
from agentfsm.studio._app import CSRF_HEADER  # noqa: E402

HOSTILE = '</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served on a free loopback port until the block ends; its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the studio did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def approval_agent(
    folder: pathlib.Path, gate: threading.Event | None = None, *, resumed: bool = False
) -> Agent:
    """An agent that (after ``gate`` opens) asks to write a file, which needs approval;
    ``resumed``: the same agent after the approval (its model's script goes on there)."""

    @tool
    def hold() -> str:
        """Wait until the test lets the run go on."""
        if gate is not None:
            gate.wait(30)
        return "go on"

    script = [
        call_tool("hold"),
        call_tool("write_file", {"path": "a.md", "content": "hello " + HOSTILE}),
        Message.assistant("I wrote a.md."),
    ]
    model = ScriptedModel(script[2:] if resumed else script)
    return Agent(
        model,
        [hold, file_writer(folder)],
        middleware=[HumanInTheLoop({"write_file": {"allowed_decisions": ["approve", "reject"]}})],
    )


def make_store(tmp_path: pathlib.Path) -> pathlib.Path:
    """A store with a finished demo run, a waiting one, and one full of hostile text."""
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        agent = demo_agent(delay=0, stream=False, folder=tmp_path)
        start_run(agent, AgentState.of(DEMO_PROMPT), store, run_id="finished").run_sync()
        agent.resume_run_sync("finished", store, [{"type": "approve"}], unbound=True)
        agent = approval_agent(tmp_path)
        start_run(agent, AgentState.of("write it " + HOSTILE), store, run_id="waiting").run_sync()
        start_run(
            Agent(ScriptedModel([Message.assistant(HOSTILE)]), []),
            AgentState.of(HOSTILE),
            store,
            run_id=HOSTILE,
        ).run_sync()
    return db


def addon_data(page: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="addon-data">(.*?)</script>', page)
    assert found, "the run page carries the studio's data"
    return dict(json.loads(found.group(1)))


@pytest.fixture
def store(tmp_path: pathlib.Path) -> pathlib.Path:
    return make_store(tmp_path)


def test_the_index_lists_every_run_waiting_first(store: pathlib.Path) -> None:
    with serving(create_app(str(store))) as base:
        listing = httpx.get(f"{base}/api/runs").json()
        ids = [r["run_id"] for r in listing["runs"]]
        assert ids[0] == "waiting" and set(ids) == {"waiting", "finished", HOSTILE}
        finished = next(r for r in listing["runs"] if r["run_id"] == "finished")
        assert finished["status"] == "ok" and finished["machine"] == "standard"
        assert finished["model_calls"] == 4 and finished["segments"] == 2
        assert finished["steps"] == 29 and finished["duration"] >= 0
        assert set(finished["tools"]) == {"search_notes", "read_note", "write_file"}
        assert listing["statuses"] == {"interrupted": 1, "ok": 2}

        def ids_of(**query: str) -> list[str]:
            return [r["run_id"] for r in httpx.get(f"{base}/api/runs", params=query).json()["runs"]]

        assert ids_of(status="ok") == sorted(ids_of(status="ok"), key=ids.index)
        assert set(ids_of(status="ok")) == {"finished", HOSTILE}
        assert ids_of(tool="hold") == ["waiting"]
        assert ids_of(q="FINITE-STATE machine") == ["finished"]  # message text, any case
        assert ids_of(q="no such words") == []
        assert ids_of(machine="standard", status="interrupted") == ["waiting"]

        page = httpx.get(base + "/")
        meta = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page.text)
        assert page.status_code == 200 and meta
        assert "default-src 'none'" in html_unescape(meta.group(1))
        assert page.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert page.headers["x-frame-options"] == "DENY"
        assert HOSTILE not in page.text and "&lt;/script&gt;" in page.text
        # One script, the studio's own (allowed by its hash), keeps the table live.
        assert page.text.count("<script>") == 1 and "<script " not in page.text
        assert "script-src 'sha256-" in html_unescape(meta.group(1))
        assert "connect-src 'self'" in html_unescape(meta.group(1))
        assert page.text.index("waiting") < page.text.index("finished")


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_a_run_page_and_its_json(store: pathlib.Path) -> None:
    with serving(create_app(str(store))) as base:
        page = httpx.get(f"{base}/runs/finished")
        assert page.status_code == 200 and "connect-src 'self'" in html_unescape(page.text)
        data = httpx.get(f"{base}/api/runs/finished").json()
        assert data["status"] == "ok" and data["requests"] == []
        steps = data["page"]["steps"]
        assert len(steps) == 29 and all(isinstance(s["wall"], float) for s in steps)
        assert steps[0]["wall"] <= steps[-1]["wall"] <= time.time()
        (decision,) = data["page"]["segments"][1]["decisions"]
        assert decision["decision"] == "approved" and decision["tool"] == "write_file"

        waiting = httpx.get(f"{base}/api/runs/waiting").json()
        (request,) = waiting["requests"]
        assert request["tool"] == "write_file" and request["digest"].startswith("sha256:")
        assert request["allowed"] == ["approve", "reject"]

        hostile = httpx.get(f"{base}/runs/" + httpx.URL(HOSTILE).raw_path.decode())
        assert hostile.status_code == 200
        assert HOSTILE not in hostile.text  # in the JSON block, escaped
        assert httpx.get(f"{base}/runs/nothing-here").status_code == 404
        assert httpx.get(f"{base}/api/runs/nothing-here").status_code == 404


def test_events_say_when_a_run_moves(store: pathlib.Path) -> None:
    """A page holding 20 of the run's 29 steps is sent the 9 it lacks, as data."""
    with serving(create_app(str(store))) as base:
        run = httpx.get(f"{base}/api/runs/finished").json()
        params = {"head": "old", "steps": "20", "messages": "5"}
        with httpx.stream("GET", f"{base}/api/runs/finished/events", params=params) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            seen = [next(lines) for _ in range(6)]
        messages = len(run["page"]["messages"])
        assert seen[:5] == ["retry: 1000", "id: 20.5", "", f"id: 29.{messages}", "event: change"]
        change = json.loads(seen[5][6:])
        assert change["head"] == run["head"] and change["status"] == "ok" and not change["live"]
        assert change["from"] == 20 and change["steps"] == run["page"]["steps"][20:]
        assert change["messages"] == run["page"]["messages"][5:]
        assert change["segments"] == run["page"]["segments"] and change["requests"] == []
        # A browser that reconnects says what it holds (the last event's id), and is sent
        # the run as it stands at once (its page missed what happened while cut off).
        again = {"Last-Event-ID": f"29.{messages}"}
        params["head"] = run["head"]
        with httpx.stream(
            "GET", f"{base}/api/runs/finished/events", params=params, headers=again
        ) as r:
            lines = r.iter_lines()
            seen = [next(lines) for _ in range(6)]
        change = json.loads(seen[5][6:])
        assert change["from"] == 29 and change["steps"] == [] and change["messages"] == []


def test_a_decision_needs_the_csrf_token_and_the_digest(
    store: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    app = create_app(str(store), agent=approval_agent(tmp_path, resumed=True))
    with serving(app) as base:
        extra = addon_data(httpx.get(f"{base}/runs/waiting").text)
        (request,) = extra["requests"]
        url = base + extra["decide"]
        approve = {"decisions": [{"type": "approve", "digest": request["digest"]}]}
        assert httpx.post(url, json=approve).status_code == 403  # no CSRF token
        bad = {CSRF_HEADER: "guess"}
        assert httpx.post(url, json=approve, headers=bad).status_code == 403
        good = {CSRF_HEADER: extra["csrf"]}
        other = {**good, "Origin": "http://evil.example"}
        assert httpx.post(url, json=approve, headers=other).status_code == 403
        undigested = {"decisions": [{"type": "approve"}]}
        assert httpx.post(url, json=undigested, headers=good).status_code == 400
        stale = {"decisions": [{"type": "approve", "digest": "sha256:" + "0" * 64}]}
        refused = httpx.post(url, json=stale, headers=good)
        assert refused.status_code == 400 and "another action request" in refused.json()["error"]
        edit = {"decisions": [{"type": "edit", "arguments": {}, "digest": request["digest"]}]}
        assert httpx.post(url, json=edit, headers=good).status_code == 400  # not allowed
        assert not (tmp_path / "a.md").exists()

        assert httpx.post(url, json=approve, headers=good).status_code == 202
        deadline = time.monotonic() + 10
        while httpx.get(f"{base}/api/runs/waiting").json()["status"] == "interrupted":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert httpx.get(f"{base}/api/runs/waiting").json()["status"] == "ok"
        assert (tmp_path / "a.md").read_text(encoding="utf-8").startswith("hello ")
        # The same request decided again (a second window's click): what the first decided.
        again = httpx.post(url, json=approve, headers=good)
        assert again.status_code == 409, again.text
        assert again.json()["decided"] == [
            {
                "tool": "write_file",
                "call_id": request["call_id"],
                "decision": "approved",
                "where": "in another window",
            }
        ]
        said = f"decided in another window: approved write_file ({request['call_id']})"
        assert again.json()["error"] == said
    # Another studio (or the command line) did not see it decided: the store says what was.
    with serving(create_app(str(store), agent=approval_agent(tmp_path, resumed=True))) as base:
        extra = addon_data(httpx.get(f"{base}/runs/waiting").text)
        late = httpx.post(
            base + extra["decide"], json=approve, headers={CSRF_HEADER: extra["csrf"]}
        )
        assert late.status_code == 409
        said = f"decided elsewhere: approved write_file ({request['call_id']})"
        assert late.json()["error"] == said and late.json()["status"] == "ok"
    with SQLiteStore(store, read_only=True) as done:
        saved = load_run(done, "waiting", strict=False)
        assert saved.status == "ok" and len(saved.traces) == 2


def test_a_late_decision_is_told_what_its_own_run_took(
    store: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Two runs of one script ask the same request (one digest): a decision the studio
    took on one is never said to have answered the other."""
    with SQLiteStore(store) as writer:
        start_run(
            approval_agent(tmp_path), AgentState.of("again"), writer, run_id="twin"
        ).run_sync()
    with serving(create_app(str(store), agent=approval_agent(tmp_path, resumed=True))) as base:
        extra = addon_data(httpx.get(f"{base}/runs/waiting").text)
        twin = addon_data(httpx.get(f"{base}/runs/twin").text)
        (request,) = extra["requests"]
        assert twin["requests"] == extra["requests"]  # the same call, the same digest
        approve = {"decisions": [{"type": "approve", "digest": request["digest"]}]}
        token = {CSRF_HEADER: extra["csrf"]}
        assert httpx.post(base + extra["decide"], json=approve, headers=token).status_code == 202
        with SQLiteStore(store) as writer:  # another process rejects the twin's
            reject = [{"type": "reject", "digest": request["digest"]}]
            approval_agent(tmp_path, resumed=True).resume_run_sync("twin", writer, reject)
        late = httpx.post(base + twin["decide"], json=approve, headers=token)
        assert late.status_code == 409
        said = f"decided elsewhere: rejected write_file ({request['call_id']})"
        assert late.json()["error"] == said


def test_loopback_only_without_a_token(store: pathlib.Path) -> None:
    with serving(create_app(str(store))) as base:
        assert httpx.get(base + "/").status_code == 200
        assert httpx.get(base + "/", headers={"Host": "localhost:1"}).status_code == 200
        rebound = httpx.get(base + "/api/runs", headers={"Host": "attacker.example"})
        assert rebound.status_code == 403


def test_a_token_is_needed_when_one_is_set(store: pathlib.Path) -> None:
    with serving(create_app(str(store), token="s3cret")) as base:
        assert httpx.get(base + "/api/runs").status_code == 401
        assert httpx.get(base + "/api/runs", params={"token": "wrong"}).status_code == 401
        bearer = {"Authorization": "Bearer s3cret", "Host": "studio.example"}
        assert httpx.get(base + "/api/runs", headers=bearer).status_code == 200
        with httpx.Client(follow_redirects=True) as browser:
            first = browser.get(base + "/runs/finished", params={"token": "s3cret"})
            assert first.status_code == 200 and first.url.params.get("token") is None
            assert "httponly" in first.history[0].headers["set-cookie"].lower()
            assert browser.get(base + "/api/runs").status_code == 200  # the cookie


def _studio_process(*argv: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "studio", "--port", "0", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line


def test_the_command_prints_a_token_when_given_a_host(store: pathlib.Path) -> None:
    process, line = _studio_process("--db", str(store), "--host", "127.0.0.1")
    try:
        found = re.search(r"(http://127\.0\.0\.1:\d+/)\?token=(\S+)", line)
        assert found, line
        base, token = found.groups()
        assert httpx.get(base + "api/runs").status_code == 401
        assert httpx.get(base + "api/runs", headers={"Authorization": f"Bearer {token}"}).is_success
    finally:
        process.terminate()
        process.wait(10)


def test_the_command_listens_on_loopback_by_default(store: pathlib.Path) -> None:
    process, line = _studio_process("--db", str(store))
    try:
        found = re.search(r"(http://127\.0\.0\.1:\d+/)$", line.strip())
        assert found and "token" not in line, line
        assert httpx.get(found.group(1) + "api/runs").json()["all"] == 3
    finally:
        process.terminate()
        process.wait(10)


def test_the_command_refuses_what_is_not_a_store(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentfsm", "studio", "--db", str(tmp_path / "no.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "no store" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_rejection_is_an_event_of_its_own(store: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with serving(create_app(str(store), agent=approval_agent(tmp_path, resumed=True))) as base:
        extra = addon_data(httpx.get(f"{base}/runs/waiting").text)
        (request,) = extra["requests"]
        reject = {"decisions": [{"type": "reject", "digest": request["digest"]}]}
        sent = httpx.post(base + extra["decide"], json=reject, headers={CSRF_HEADER: extra["csrf"]})
        assert sent.status_code == 202
        deadline = time.monotonic() + 10
        while (data := httpx.get(f"{base}/api/runs/waiting").json())["status"] == "interrupted":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (decision,) = data["page"]["segments"][1]["decisions"]
        assert decision["decision"] == "rejected" and decision["tool"] == "write_file"
        assert not (tmp_path / "a.md").exists()


def test_a_large_stores_first_page_reads_only_its_runs(
    store: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.studio import _catalog

    monkeypatch.setattr(_catalog, "EAGER", 1)
    monkeypatch.setattr(_catalog, "PAGE_SIZE", 1)
    catalog = _catalog.Catalog(str(store))
    try:
        first = catalog.page()
        assert [r["run_id"] for r in first["runs"]] == ["waiting"]
        assert first["runs"][0]["machine"] == "standard" and first["pages"] == 3
        # the menus offer every machine and tool of the store, not only the page's
        every = ["hold", "read_note", "search_notes", "write_file"]
        assert first["tools"] == every and first["machines"] == ["standard"]
        assert catalog.page(query="finite-state")["total"] == 1
        assert catalog.page()["tools"] == every
    finally:
        catalog.close()


def test_a_decision_resumes_with_the_agent_the_run_was_started_with(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that ``agentfsm run --agent`` started: a studio with no ``--agent`` refuses the
    decision with the flag to start it with (a saved run's names are data, never loaded);
    one given that agent (among others) resumes the run with it."""
    from tests.test_cli_hints import AGENTS

    (tmp_path / "studio_recorded_agents.py").write_text(AGENTS, encoding="utf-8")
    started = subprocess.run(
        [sys.executable, "-P", "-m", "agentfsm", "run", "--agent",
         "studio_recorded_agents:mailer", "mail ann", "--db", "r.db"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run_id = re.search(r"^saved: run (\S+) in r\.db", started.stdout, re.M)
    assert run_id is not None
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "studio_recorded_agents", raising=False)
    with serving(create_app(str(tmp_path / "r.db"))) as base:
        extra = addon_data(httpx.get(f"{base}/runs/{run_id.group(1)}").text)
        (request,) = extra["requests"]
        approve = {"decisions": [{"type": "approve", "digest": request["digest"]}]}
        refused = httpx.post(
            base + extra["decide"], json=approve, headers={CSRF_HEADER: extra["csrf"]}
        )
        assert refused.status_code == 400
        assert refused.json()["error"] == (
            "this run was started with --agent studio_recorded_agents:mailer, which a saved "
            "run names but does not load: start the studio with --agent "
            "studio_recorded_agents:mailer"
        )
        assert "studio_recorded_agents" not in sys.modules
    # Of the agents a studio is given, a run goes on with the one it was started with.
    given = ["agentfsm._demo:demo_agent", "studio_recorded_agents:mailer"]
    app = create_app(str(tmp_path / "r.db"), agent=given)
    with serving(app) as base:
        extra = addon_data(httpx.get(f"{base}/runs/{run_id.group(1)}").text)
        sent = httpx.post(
            base + extra["decide"], json=approve, headers={CSRF_HEADER: extra["csrf"]}
        )
        assert sent.status_code == 202, sent.text
        deadline = time.monotonic() + 10
        api = f"{base}/api/runs/{run_id.group(1)}"
        while httpx.get(api).json()["status"] == "interrupted":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert httpx.get(api).json()["status"] == "ok"
    assert (tmp_path / "sent.txt").read_text() == "ann@example.com"
