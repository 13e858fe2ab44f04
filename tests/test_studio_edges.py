"""The studio's rough edges, each as a user meets it: a machine it was not told of, an
empty store, an agent that lacks a run's tools, an empty token, call ids that repeat
across processes, and a small machine of the user's own on a narrow screen."""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")

from agentfsm import (
    Agent,
    AgentState,
    Edge,
    HumanInTheLoop,
    MachineTable,
    Message,
    Ok,
    start_run,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import Continue, call_llm, check_max_runs, check_response_complete
from agentfsm.store import SQLiteStore
from agentfsm.studio import create_app
from agentfsm.studio._app import CSRF_HEADER
from tests.test_serve import must_cite
from tests.test_studio import addon_data, make_store, serving
from tests.test_studio_cli import _agentfsm, _store_of_my_machine
from tests.test_view import browser  # noqa: F401  (the fixture)

#: A small machine of the user's own: two working states, three terminals.
CITED = MachineTable(
    name="cited_in_the_studio",
    steps={
        "answering": (check_max_runs, call_llm, check_response_complete),
        "checking": (must_cite,),
    },
    terminals=("ok", "paused", "error"),
    entries={"fresh": "answering", "pending tool calls": "answering", "tool results": "answering"},
    edges=(
        Edge("answering", "checking", on=Continue, trigger="answered", why="the model replied"),
        Edge("checking", "ok", on=Ok, trigger="cited", why="the answer names a source"),
        Edge("checking", "answering", on=Continue, trigger="retry", why="no source yet"),
    ),
)


def test_a_run_on_a_machine_the_studio_was_not_told_of_is_a_page_naming_machines(
    tmp_path: pathlib.Path,
) -> None:
    db = _store_of_my_machine(tmp_path)
    with serving(create_app(str(db))) as base:
        page = httpx.get(f"{base}/runs/mine-run")
        assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
        assert "No machine named &#x27;mine&#x27;" in page.text
        assert (
            "--machines MODULE" in page.text
            and "<h1>run mine-run cannot be drawn</h1>" in page.text
        )


def test_an_empty_store_says_how_to_get_runs(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "empty store.db"
    SQLiteStore(db).close()
    with serving(create_app(str(db))) as base:
        page = httpx.get(f"{base}/").text
        assert "No runs yet." in page and "No runs match" not in page
        assert f"agentfsm demo --later --db &#x27;{db}&#x27;" in page
        filtered = httpx.get(f"{base}/", params={"q": "x"}).text
        assert "No runs yet." in filtered  # an empty store is empty whatever the filter


def test_an_agent_without_the_runs_tools_is_refused_by_its_name(tmp_path: pathlib.Path) -> None:
    db = make_store(tmp_path)
    bare = Agent(ScriptedModel([Message.assistant("hi")]), [])
    with serving(create_app(str(db), agent=bare)) as base:
        extra = addon_data(httpx.get(f"{base}/runs/waiting").text)
        (request,) = extra["requests"]
        approve = {"decisions": [{"type": "approve", "digest": request["digest"]}]}
        said = httpx.post(
            base + extra["decide"], json=approve, headers={CSRF_HEADER: extra["csrf"]}
        )
        assert said.status_code == 400
        assert said.json()["error"] == (
            "the agent the studio was given (with no tools) lacks tools run waiting used: "
            "hold, write_file; start the studio with --agent MODULE:ATTR, the agent the run "
            "was made with"
        )


def test_an_empty_token_on_an_open_host_is_refused_at_start(tmp_path: pathlib.Path) -> None:
    db = make_store(tmp_path)
    done = _agentfsm(
        "studio", "--db", str(db), "--host", "0.0.0.0", "--token", "", "--port", "0", cwd=tmp_path
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--token is empty" in done.stderr


def test_a_decision_is_kept_when_call_ids_repeat_across_processes(
    tmp_path: pathlib.Path,
) -> None:
    """A scripted model numbers its calls afresh in each process: the run's second request
    has the first one's id. Each decision shows on its own segment."""
    from agentfsm._demo import file_writer

    db = tmp_path / "runs.db"
    gate = [HumanInTheLoop({"write_file": {"allowed_decisions": ["approve", "reject"]}})]
    write = call_tool("write_file", {"path": "a.md", "content": "one"}, call_id="call_1")
    again = call_tool("write_file", {"path": "b.md", "content": "two"}, call_id="call_1")
    tools = [file_writer(tmp_path)]
    with SQLiteStore(db) as store:
        agent = Agent(ScriptedModel([write]), tools, middleware=gate)
        start_run(agent, AgentState.of("write"), store, run_id="twice").run_sync()
        agent = Agent(ScriptedModel([again]), tools, middleware=gate)
        agent.resume_run_sync("twice", store, [{"type": "approve"}], unbound=True)
        agent = Agent(ScriptedModel([say("done")]), tools, middleware=gate)
        agent.resume_run_sync("twice", store, [{"type": "reject"}], unbound=True)
    with serving(create_app(str(db))) as base:
        segments = httpx.get(f"{base}/api/runs/twice").json()["page"]["segments"]
    decided = [[(d["decision"], d["arguments"]) for d in s.get("decisions", [])] for s in segments]
    assert [
        [(kind, "path" in args and args.split('"path": ')[1][:6]) for kind, args in s]
        for s in decided
    ] == [
        [],
        [("approved", '"a.md"')],
        [("rejected", '"b.md"')],
    ]


def test_a_small_machine_of_my_own_in_a_narrow_browser(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        # long enough that its newest step is far below the title on a narrow screen
        model = ScriptedModel([say(f"Paris ({n}).") for n in range(11)] + [say("source: atlas")])
        agent = Agent(model, [], machine=CITED)
        start_run(agent, AgentState.of("Capital of France?"), store, run_id="cited").run_sync()
    with serving(create_app(str(db))) as base:
        browser.get(f"{base}/")
        row = browser.find_element(By.CSS_SELECTOR, '#runs tr[data-run="cited"]')
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        assert cells[3] == "cited_in_the_studio" and cells[8] == "12"  # its model calls
        browser.set_window_size(360, 740)
        try:
            browser.get(f"{base}/runs/cited")
            assert browser.execute_script("return window.scrollY") == 0  # at its top
            title = browser.find_element(By.TAG_NAME, "h1")
            assert title.is_displayed() and title.rect["y"] >= 0
            boxes = browser.execute_script(
                "return [...document.querySelectorAll('#machine .terminal > rect:not(.inner)')]"
                ".map((r) => { const b = r.getBoundingClientRect();"
                " return [b.top, b.bottom]; })"
            )
        finally:
            browser.set_window_size(1500, 1000)
    assert len(boxes) == 3
    tops = sorted(boxes)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(tops)), tops  # no two overlap
