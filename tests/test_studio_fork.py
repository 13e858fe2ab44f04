"""The studio's fork and compare, over HTTP and in headless Chromium as a user drives them.

A fork is an action (a POST with the page's CSRF token); comparing is a page that reads.
"""

from __future__ import annotations

import html
import json
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")

from agentfsm import Agent, AgentState, Approval, Message, start_run
from agentfsm._demo import demo_agent
from agentfsm._owner import new_owner
from agentfsm.providers import ScriptedModel
from agentfsm.store import SQLiteStore, fork_run, load_run
from agentfsm.studio import create_app
from agentfsm.studio._app import CSRF_HEADER
from tests.test_studio import HOSTILE, addon_data, approval_agent, make_store, serving
from tests.test_studio_browser import _severe, _shot, _steps, _wait
from tests.test_view import browser  # noqa: F401  (the fixture)


@pytest.fixture
def studio(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    db = make_store(tmp_path)
    with serving(create_app(str(db), agent=approval_agent(tmp_path, resumed=True))) as base:
        yield base, db


def _fork(base: str, run_id: str, step: object, **headers: str) -> httpx.Response:
    page = httpx.get(f"{base}/runs/{run_id}").text
    data = addon_data(page)
    sent = {CSRF_HEADER: data["csrf"], **headers}
    return httpx.post(base + data["fork"], json={"step": step}, headers=sent)


def test_fork_over_http_needs_the_page_token_and_a_working_step(
    studio: tuple[str, pathlib.Path],
) -> None:
    base, db = studio
    data = addon_data(httpx.get(f"{base}/runs/finished").text)
    assert data["forkable"] == [n for n in range(1, 30) if n not in (17, 29)]
    assert data["forked_from"] is None
    no_token = httpx.post(base + data["fork"], json={"step": 3})
    assert no_token.status_code == 403
    elsewhere = _fork(base, "finished", 3, origin="http://evil.example")
    assert elsewhere.status_code == 403
    assert _fork(base, "finished", 17).status_code == 400
    assert _fork(base, "finished", "3").status_code == 400
    gone = httpx.post(
        f"{base}/api/runs/nope/fork", json={"step": 3}, headers={CSRF_HEADER: data["csrf"]}
    )
    assert gone.status_code == 404
    made = _fork(base, "finished", 16)
    assert made.status_code == 201, made.text
    fork_id = made.json()["run_id"]
    assert made.json()["url"] == f"/runs/{fork_id}"
    child = addon_data(httpx.get(base + made.json()["url"]).text)
    assert child["forked_from"] == {
        "run_id": "finished",
        "step": 16,
        "url": "/runs/finished#step-16",
    }
    with SQLiteStore(db, read_only=True) as store:
        assert load_run(store, fork_id, strict=False).forked_from == ("finished", 16)


def test_compare_over_http(studio: tuple[str, pathlib.Path]) -> None:
    base, db = studio
    with SQLiteStore(db) as store:
        fork_run(store, "finished", 5, new_id="early")
    page = httpx.get(f"{base}/compare", params={"a": "finished", "b": "early"})
    assert page.status_code == 200
    assert "they part at step 6: B ends there, A goes on" in page.text
    assert '<tr class="missing parted" id="parted" data-step="6"' in page.text
    assert "<script" not in page.text
    assert page.text.count("<svg") == 2 and 'id="a-machine"' in page.text
    assert 'id="machine"' not in page.text  # each drawing's ids are its own
    same = httpx.get(f"{base}/compare", params=[("run", "finished"), ("run", "finished")])
    assert "the two runs take the same path" in same.text
    data = httpx.get(f"{base}/api/compare", params={"a": "finished", "b": "early"}).json()
    assert data["parted"] == 6 and data["b"]["forked_from"] == ["finished", 5]
    hostile = httpx.get(f"{base}/compare", params={"a": HOSTILE, "b": "finished"})
    assert hostile.status_code == 200 and "<script>window" not in hostile.text
    missing = httpx.get(f"{base}/compare", params={"a": "nope", "b": "finished"})
    assert missing.status_code == 404 and "No run 'nope'" in html.unescape(missing.text)
    form = httpx.get(f"{base}/compare", params={"a": "finished"})
    assert form.status_code == 200 and 'name="b"' in form.text
    assert re.search(r'<option value="early">', form.text)


def test_fork_a_run_from_a_transition_in_the_browser(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    studio: tuple[str, pathlib.Path],
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    base, db = studio
    browser.get_log("browser")
    browser.get(base + "/runs/finished")
    _wait(lambda: _steps(browser) == 29, what="the timeline")
    button = browser.find_element(By.ID, "fork")
    assert button.get_attribute("disabled")  # the last step ends the run: no fork there
    browser.find_element(By.CSS_SELECTOR, "#steps li[data-step='15']").click()
    _wait(lambda: button.text == "Fork from here (step 16)", what="the button to follow")
    assert not button.get_attribute("disabled")
    button.click()
    _wait(lambda: "/runs/finished" not in browser.current_url, what="the new run's page")
    fork_id = browser.current_url.split("/runs/")[1].split("#")[0]
    parent = _wait(lambda: browser.find_elements(By.ID, "forked-from"), what="the parent")[0]
    assert parent.text.startswith("forked from finished at step 16")
    assert _steps(browser) == 16
    with SQLiteStore(db, read_only=True) as store:
        fork = load_run(store, fork_id, strict=False)
    assert fork.forked_from == ("finished", 16) and fork.state == "interrupt_check"
    parent.find_element(By.LINK_TEXT, "finished").click()
    _wait(lambda: browser.current_url.endswith("/runs/finished#step-16"), what="the parent")
    _wait(lambda: browser.execute_script("return document.body.dataset.step") == "15", what="16")
    assert _severe(browser) == []


def test_compare_two_runs_picked_on_the_index(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    studio: tuple[str, pathlib.Path],
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    base, db = studio
    agent = demo_agent(delay=0, stream=False, folder=tmp_path)
    with SQLiteStore(db) as store:
        fork_run(store, "finished", 16, new_id="rejected")
        agent.resume_run_sync("rejected", store)  # asks for the approval again
        waiting = load_run(store, "rejected", strict=False).agent_state
        assert waiting is not None
        (request,) = Approval.of(waiting.interrupt_data).requests
        agent.resume_run_sync("rejected", store, [request.reject()])
    browser.get_log("browser")
    browser.get(base + "/")
    for run_id in ("finished", "rejected"):
        row = browser.find_element(By.CSS_SELECTOR, f"#runs tr[data-run='{run_id}']")
        row.find_element(By.CSS_SELECTOR, "input[type=checkbox]").click()
    browser.find_element(By.CSS_SELECTOR, "#compare-runs button").click()
    _wait(lambda: "/compare?" in browser.current_url, what="the compare page")
    parts = browser.find_element(By.ID, "parts").text
    # Both take the approval state's edge; executing, which carries the decisions out,
    # is where the conversations part (the rejection's result).
    assert parts.startswith("they part at step 19"), parts
    parted = browser.find_element(By.ID, "parted")
    assert parted.get_attribute("data-step") == "19"
    cells = parted.find_elements(By.TAG_NAME, "td")
    assert cells[1].text == "~"  # the same edge; the rejection's result in the conversation
    # The index lists the newer run first: it is A.
    assert "forked from finished at step 16" in browser.find_element(By.ID, "side-a").text
    assert "forked" not in browser.find_element(By.ID, "side-b").text
    _shot(browser, "studio-compare", tmp_path)
    # From a step of the comparison to that step of a run.
    cells[2].find_element(By.TAG_NAME, "a").click()
    _wait(lambda: browser.current_url.endswith("/runs/rejected#step-19"), what="the step")
    assert _severe(browser) == []


def test_a_fork_waits_until_resumed_from_its_page_on_a_chosen_model(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    """A fork nothing runs is shown waiting (not running, not live); its page resumes it
    with the studio's agent (here the demo agent) on a model named from the registry,
    the scripted one, and the run goes on in the studio's process to its end."""
    from selenium.webdriver.common.by import By

    db = make_store(tmp_path)
    with SQLiteStore(db) as store:
        steps = [t for trace in load_run(store, "finished", strict=False).traces for t in trace]
        at = next(n for n, t in enumerate(steps, 1) if t.dest == "calling")
        fork_run(store, "finished", at, new_id="fork-1")
    with serving(create_app(str(db))) as base:
        index = httpx.get(f"{base}/api/runs").json()
        listed = {r["run_id"]: r["status"] for r in index["runs"]}
        assert listed["fork-1"] == "waiting" and listed["finished"] == "ok"
        # counted, filtered and listed first as what it is shown: waiting, not running
        assert index["statuses"].get("waiting") == 1 and "running" not in index["statuses"]
        assert [r["status"] for r in index["runs"]] == ["interrupted", "waiting", "ok", "ok"]
        only = httpx.get(f"{base}/api/runs", params={"status": "waiting"}).json()["runs"]
        assert [r["run_id"] for r in only] == ["fork-1"]
        assert not httpx.get(f"{base}/api/runs", params={"status": "running"}).json()["runs"]
        assert "waiting 1" in httpx.get(f"{base}/").text
        data = addon_data(httpx.get(f"{base}/runs/fork-1").text)
        assert (data["status"], data["live"], data["resting"]) == ("waiting", False, True)
        assert data["agents"] == ["agentfsm._demo:demo_agent"] or len(data["agents"]) == 1
        headers = {CSRF_HEADER: data["csrf"]}
        wrong = httpx.post(base + data["resume"], json={"agent": "x:y"}, headers=headers)
        assert wrong.status_code == 400 and "start it with --agent" in wrong.json()["error"]
        unknown = httpx.post(base + data["resume"], json={"model": "nope:x"}, headers=headers)
        assert unknown.status_code == 400 and "Unknown provider 'nope'" in unknown.json()["error"]
        assert httpx.post(base + data["resume"], json={}).status_code == 403

        browser.get_log("browser")
        browser.get(f"{base}/runs/fork-1")
        form = _wait(lambda: browser.find_elements(By.ID, "resume"), what="the resume form")[0]
        assert "This fork waits" in form.text and not browser.find_elements(By.ID, "live")
        badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#facts .badge")]
        assert "waiting" in badges
        browser.find_element(By.ID, "resume-model").send_keys("scripted:echo")
        browser.find_element(By.ID, "resume-go").click()

        def ended() -> bool:
            with SQLiteStore(db, read_only=True) as store:
                return load_run(store, "fork-1", strict=False).status == "ok"

        _wait(ended, timeout=20, what="the resumed fork to end")
        browser.get(f"{base}/runs/fork-1")
        _wait(lambda: browser.find_elements(By.CSS_SELECTOR, ".outcome.ok"), what="its end")
        assert "You said:" in browser.page_source  # the scripted model's answer
        assert not browser.find_elements(By.ID, "resume")
        assert _severe(browser) == []
        again = httpx.post(base + data["resume"], json={}, headers=headers)
        assert again.status_code == 409 and "fork-1 is ok" in again.json()["error"]


def test_a_resting_fork_stays_waiting_as_the_index_updates_until_resumed_from_its_page(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    """The live index and the run page's live updates show a fork nothing runs as its
    page does, waiting: another run saved updates the index and leaves the fork's row
    waiting and its page not live; resumed from its page, its row goes on live to ok."""
    from selenium.webdriver.common.by import By

    db = make_store(tmp_path)
    with SQLiteStore(db) as store:
        steps = [t for trace in load_run(store, "finished", strict=False).traces for t in trace]
        at = next(n for n, t in enumerate(steps, 1) if t.dest == "calling")
        fork_run(store, "finished", at, new_id="fork-1")

    def status_of(run_id: str) -> str:
        return str(
            browser.execute_script(
                "const r = document.querySelector(`#runs tr[data-run='${arguments[0]}']`);"
                "return r ? r.querySelector('.badge').textContent : ''",
                run_id,
            )
        )

    with serving(create_app(str(db))) as base:
        # the run page's live payload says what its page says
        with httpx.stream("GET", f"{base}/api/runs/fork-1/events", timeout=10) as events:
            lines = events.iter_lines()
            change = next(json.loads(x[6:]) for x in lines if x.startswith("data: "))
        assert (change["status"], change["live"]) == ("waiting", False)
        browser.get_log("browser")
        browser.get(base + "/")
        index = browser.current_window_handle
        browser.execute_script("window.marker = 'kept'")
        assert status_of("fork-1") == "waiting"
        browser.switch_to.new_window("tab")
        browser.get(f"{base}/runs/fork-1")
        fork_page = browser.current_window_handle
        _wait(lambda: browser.find_elements(By.ID, "resume"), what="the resume form")
        browser.switch_to.window(index)
        with SQLiteStore(db) as store:
            plain = Agent(ScriptedModel([Message.assistant("hi")]), [])
            start_run(plain, AgentState.of("another"), store, run_id="another").run_sync()
        _wait(lambda: status_of("another") == "ok", what="the index's update")
        assert status_of("fork-1") == "waiting"
        assert int(browser.execute_script("return Number(document.body.dataset.updates)")) >= 1
        browser.switch_to.window(fork_page)
        assert not browser.find_elements(By.ID, "live")
        assert browser.execute_script("return document.body.dataset.updates") is None
        browser.find_element(By.ID, "resume-model").send_keys("scripted:echo")
        browser.find_element(By.ID, "resume-go").click()
        browser.switch_to.window(index)
        _wait(lambda: status_of("fork-1") == "ok", timeout=20, what="the resumed fork, ok")
        assert browser.execute_script("return window.marker === 'kept'"), "the index reloaded"
        assert _severe(browser) == []
        browser.get("about:blank")  # the pages' streams end before the server does
        browser.switch_to.window(fork_page)
        browser.get("about:blank")  # its own live stream too: a window closed on one can hang
        browser.close()
        browser.switch_to.window(index)


def test_a_live_fork_page_whose_run_is_let_go_shows_it_waiting_with_its_resume_form(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    """A fork some process holds is running and its page live; when the holder lets go
    without running it, the page is told (no checkpoint moved) and shows it waiting."""
    from selenium.webdriver.common.by import By

    db = make_store(tmp_path)
    owner = new_owner()
    with SQLiteStore(db) as store:
        fork_run(store, "finished", 3, new_id="fork-1")
        store.claim("fork-1", owner, None)
        with serving(create_app(str(db))) as base:
            browser.get_log("browser")
            browser.get(f"{base}/runs/fork-1")
            live = _wait(lambda: browser.find_elements(By.ID, "live"), what="the live page")[0]
            assert live.text == "● live" and not browser.find_elements(By.ID, "resume")
            store.release("fork-1", owner, running=True)
            form = _wait(lambda: browser.find_elements(By.ID, "resume"), what="the resume form")
            assert "This fork waits" in form[0].text and not browser.find_elements(By.ID, "live")
            badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#facts .badge")]
            assert "waiting" in badges
            assert _severe(browser) == []


TWO_AGENTS = '''
from agentfsm._demo import demo_agent


def quick():
    """The demo agent without its pauses, on a model of its own name: the second agent."""
    agent = demo_agent(delay=0, stream=False)
    agent.model.model_name = "quick-demo"
    return agent
'''


def test_a_studio_of_several_agents_offers_each_and_resumes_with_the_one_chosen(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--agent`` repeated: a fork's page offers every agent named, the first as its
    default; the one picked resumes the fork, one not named is refused naming them all,
    and a name that imports nothing is refused before the studio serves."""
    import sys

    from agentfsm._agent_spec import UsageError

    (tmp_path / "studio_two_agents.py").write_text(TWO_AGENTS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "studio_two_agents", raising=False)
    db = make_store(tmp_path)
    with SQLiteStore(db) as store:
        steps = [t for trace in load_run(store, "finished", strict=False).traces for t in trace]
        at = next(n for n, t in enumerate(steps, 1) if t.dest == "calling")
        fork = fork_run(store, "finished", at)
    specs = ["agentfsm._demo:demo_agent", "studio_two_agents:quick"]
    with pytest.raises(UsageError, match=r"has no attribute 'quik'.*did you mean 'quick'"):
        create_app(str(db), agent=[specs[0], "studio_two_agents:quik"])
    with serving(create_app(str(db), agent=[*specs, specs[0]])) as base:
        data = addon_data(httpx.get(f"{base}/runs/{fork}").text)
        assert data["agents"] == specs  # each once, in order
        headers = {CSRF_HEADER: data["csrf"]}
        other = httpx.post(base + data["resume"], json={"agent": "x:y"}, headers=headers)
        assert other.status_code == 400
        assert f"resumes runs with {specs[0]} or {specs[1]};" in other.json()["error"]
        sent = httpx.post(base + data["resume"], json={"agent": specs[1]}, headers=headers)
        assert sent.status_code == 202, sent.text
        assert (sent.json()["agent"], sent.json()["model"]) == (specs[1], "quick-demo")

        def ended() -> bool:
            with SQLiteStore(db, read_only=True) as store:
                return load_run(store, fork, strict=False).status != "running"

        _wait(ended, timeout=20, what="the resumed fork to end")
    with SQLiteStore(db, read_only=True) as store:
        resumed = load_run(store, fork, strict=False)
    assert resumed.status == "interrupted"  # at the demo's write_file, for approval
    replies = [m for m in resumed.agent_state.messages if m.role == "assistant"]
    assert replies[-1].metadata["model"] == "quick-demo"
