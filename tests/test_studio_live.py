"""agentfsm studio live, in headless Chromium: a run grows while its page is open and
the page follows it without reloading; the approval card shows what is decided; a
half-typed edit survives an update; two windows race to decide and the loser is told
what the winner decided.

Each test serves the studio with uvicorn on a free loopback port and runs a real run
in the store; every page carries a ``window.marker`` that a reload would lose.
"""

from __future__ import annotations

import json
import pathlib
import threading
from typing import Any

import pytest

pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")

from agentfsm import Agent, AgentState, Approval, HumanInTheLoop, Message, start_run, tool
from agentfsm.providers import ScriptedModel, call_tool
from agentfsm.store import SQLiteStore, load_run
from agentfsm.studio import create_app
from tests.test_studio import HOSTILE, approval_agent, make_store, serving
from tests.test_studio_browser import _severe, _steps, _wait
from tests.test_view import browser  # noqa: F401  (the fixture)

MARK = "window.marker = 'kept'"
KEPT = "return window.marker === 'kept'"


def _said(driver: Any) -> str:
    return str(
        driver.execute_script(
            "const s = document.getElementById('said'); return s ? s.textContent : ''"
        )
    )


def _updates(driver: Any) -> int:
    return int(driver.execute_script("return Number(document.body.dataset.updates || 0)"))


def test_a_growing_run_is_appended_in_order_without_a_reload(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    ticks = threading.Semaphore(0)

    @tool
    def tick(i: int) -> str:
        """Wait for the test's go, then tick."""
        ticks.acquire(timeout=20)
        return f"tick {i}"

    replies = [call_tool("tick", {"i": i}) for i in range(4)]
    agent = Agent(ScriptedModel([*replies, Message.assistant("four ticks")]), [tick])
    db = tmp_path / "runs.db"

    def go() -> None:
        with SQLiteStore(db) as store:
            start_run(agent, AgentState.of("tick"), store, run_id="growing").run_sync()

    def saved_steps() -> int:
        with SQLiteStore(db, read_only=True) as store:
            try:
                return load_run(store, "growing", strict=False).steps
            except Exception:
                return 0

    runner = threading.Thread(target=go, daemon=True)
    runner.start()
    size = browser.get_window_size()
    browser.set_window_size(1280, 560)
    try:
        with serving(create_app(str(db), agent=agent)) as base:
            _wait(lambda: saved_steps() >= 2, what="the run to start")
            browser.get_log("browser")
            browser.get(base + "/runs/growing")
            _wait(lambda: browser.find_elements(By.ID, "live"), what="the live mark")
            browser.execute_script(MARK)
            before = _steps(browser)
            # The reader picks the first step: it stays picked while the run grows.
            browser.find_element(By.CSS_SELECTOR, "#steps li[data-step='0']").click()
            ticks.release()
            _wait(lambda: _steps(browser) > before, what="new transitions")
            assert browser.execute_script("return document.body.dataset.step") == "0"
            assert browser.execute_script("return location.hash") == "#step-1"
            future = "return document.querySelectorAll('#steps li.future').length"
            assert browser.execute_script(future) == _steps(browser) - 1
            assert browser.execute_script(KEPT), "the page reloaded"
            # The newest step picked: the page follows the run, and the page stays put.
            browser.execute_script(
                "document.dispatchEvent(new KeyboardEvent('keydown', {key: 'End'}))"
            )
            browser.execute_script("window.scrollTo(0, 120)")
            scrolled = browser.execute_script("return window.scrollY")
            assert scrolled > 0
            where = "return document.getElementById('diagram').getBoundingClientRect().top"
            seen = browser.execute_script(where)
            for _ in range(3):
                ticks.release()
            badge = "return document.querySelector('#facts .badge').textContent"
            _wait(lambda: browser.execute_script(badge) == "ok", what="the run to end ok")
            runner.join(10)
            assert browser.execute_script(KEPT), "the page reloaded"
            # The page stays put: its scroll, or what it shows where (when the header
            # grew a line above, and the browser kept the view anchored).
            kept = browser.execute_script("return window.scrollY") == scrolled
            assert kept or abs(browser.execute_script(where) - seen) < 1
            assert browser.find_element(By.ID, "live").text == "ended ok"
            rows = browser.execute_script(
                "return [...document.querySelectorAll('#steps li[data-step]')]"
                ".map((li) => [li.dataset.step, li.querySelector('.what').textContent])"
            )
            with SQLiteStore(db, read_only=True) as store:
                saved = load_run(store, "growing", strict=False)
            path = [f"{t.source} {t.trigger} → {t.dest}" for trace in saved.traces for t in trace]
            assert [int(n) for n, _ in rows] == list(range(len(path)))
            assert [what for _, what in rows] == path
            assert browser.execute_script("return document.body.dataset.step") == str(len(path) - 1)
            assert f"steps {len(path)}" in browser.find_element(By.ID, "facts").text
            assert _updates(browser) >= 2
            assert _severe(browser) == []
            # The machine counts what the run took as a page opened now draws it.
            drawn = (
                "return [...document.querySelectorAll('#machine g[id]')].map((g) =>"
                " [g.id, g.getAttribute('class'), g.querySelector('text').textContent])"
            )
            followed = browser.execute_script(drawn)
            browser.get(base + "/runs/growing")
            assert browser.execute_script(drawn) == followed
            browser.get("about:blank")  # the page's stream ends before the server does
    finally:
        for _ in range(4):
            ticks.release()
        runner.join(10)
        browser.set_window_size(size["width"], size["height"])


def test_the_card_shows_what_is_decided_and_a_lost_race_says_who_won(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    db = make_store(tmp_path)
    with SQLiteStore(db, read_only=True) as store:
        state = load_run(store, "waiting", strict=False).agent_state
        assert state is not None and state.interrupt_data is not None
        (request,) = Approval.of(state.interrupt_data).requests
    shown = json.dumps(dict(request.arguments), indent=2, ensure_ascii=False)
    winner = f"decided in another window: approved write_file ({request.tool_call_id})"
    with serving(create_app(str(db), agent=approval_agent(tmp_path, resumed=True))) as base:
        # Window A is cut off from live updates: its click lands after the race is lost.
        first = browser.current_window_handle
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/events*"]})
        try:
            browser.get_log("browser")
            browser.get(base + "/runs/waiting")
            _wait(lambda: browser.find_elements(By.ID, "approve"), what="the card")
            browser.execute_script(MARK)
            card = browser.find_element(By.ID, "act")
            assert card.find_element(By.CSS_SELECTOR, "pre.args").text == shown
            assert card.find_element(By.CSS_SELECTOR, ".digest code").text == request.digest
            assert browser.execute_script("return window.pwned === undefined")
            radios = card.find_elements(By.CSS_SELECTOR, "input[type=radio]")
            assert [r.get_attribute("value") for r in radios] == ["approve", "reject"]
            assert not any(r.is_selected() for r in radios)  # nothing chosen for the reviewer
            send = browser.find_element(By.ID, "send")
            assert not send.is_enabled()
            radios[1].click()
            assert send.is_enabled()

            # Window C follows live; window B approves.
            browser.switch_to.new_window("tab")
            watcher = browser.current_window_handle
            browser.get(base + "/runs/waiting")
            _wait(lambda: browser.find_elements(By.ID, "approve"), what="C's card")
            browser.execute_script(MARK)
            browser.switch_to.new_window("tab")
            browser.get(base + "/runs/waiting")
            _wait(lambda: browser.find_elements(By.ID, "approve"), what="B's card")
            browser.find_element(By.ID, "approve").click()
            _wait(lambda: _said(browser).startswith(("sent", "decided here")), what="B sent")
            _wait(
                lambda: _said(browser).startswith("decided here: approved write_file"),
                what="B told what it decided",
            )
            browser.close()

            browser.switch_to.window(watcher)
            said = f"decided elsewhere: approved write_file ({request.tool_call_id})"
            _wait(lambda: _said(browser) == said, what="C told, live")
            assert browser.execute_script(KEPT), "C reloaded"
            assert not browser.find_element(By.ID, "approve").is_enabled()
            browser.close()

            browser.switch_to.window(first)
            browser.find_element(By.ID, "approve").click()  # the click that lost the race
            _wait(lambda: _said(browser) == winner, what="A told who won")
            assert browser.execute_script(KEPT), "A reloaded"
            assert not browser.find_element(By.ID, "send").is_enabled()
            # The console names the 409 as a failed load; nothing else went wrong.
            lost = [e for e in _severe(browser) if "409 (Conflict)" not in e["message"]]
            assert lost == []
            browser.get("about:blank")  # the page's stream ends before the server does
        finally:
            browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
            browser.execute_cdp_cmd("Network.disable", {})
    assert (tmp_path / "a.md").read_text(encoding="utf-8") == "hello " + HOSTILE


@tool
def restore(entry: str) -> str:
    """Restore a backup entry."""
    return f"restored {entry}"


def _waiting_restore(tmp_path: pathlib.Path) -> tuple[Agent, pathlib.Path]:
    """An agent whose ``restore`` call waits for approval, and a store where a run of it,
    ``waiting``, does."""
    agent = Agent(
        ScriptedModel([call_tool("restore", entry="a.json"), Message.assistant("restored")]),
        [restore],
        middleware=[HumanInTheLoop({"restore": True})],
    )
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        start_run(agent, AgentState.of("restore it"), store, run_id="waiting").run_sync()
    return agent, db


def test_a_decision_answered_after_the_run_moved_on_still_says_it_was_decided_here(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    """The run can end, and the page be told, before the answer to the page's own
    decision arrives (a loaded machine): the card says the decision was made here, what it
    was, and nothing after it."""
    from selenium.webdriver.common.by import By

    agent, db = _waiting_restore(tmp_path)
    with serving(create_app(str(db), agent=agent)) as base:
        browser.get(base + "/runs/waiting")
        _wait(lambda: browser.find_elements(By.ID, "approve"), what="the card")
        browser.execute_script(  # every answer to this page arrives 1.5 s late
            "const send = window.fetch; window.fetch = (...args) => send(...args).then("
            "(r) => new Promise((ok) => setTimeout(() => ok(r), 1500)))"
        )
        browser.find_element(By.ID, "approve").click()
        _wait(lambda: "ended ok" in browser.find_element(By.ID, "live").text, what="the end")
        assert _said(browser) == "sending…"  # the run moved on; whose decision: not yet known
        _wait(lambda: _said(browser) != "sending…", what="the answer", timeout=10)
        assert _said(browser) == "decided here: approved restore (call_1)"
        assert _severe(browser) == []
        browser.get("about:blank")


def test_a_half_typed_edit_survives_an_update(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream ends soon (as a cut connection would); the page reconnects and is sent
    the run again, and the reviewer's edit, half typed, is still theirs to finish."""
    from selenium.webdriver.common.by import By

    from agentfsm.studio import _live

    monkeypatch.setattr(_live, "STREAM_FOR", 0.6)
    agent, db = _waiting_restore(tmp_path)
    with serving(create_app(str(db), agent=agent)) as base:
        browser.get_log("browser")
        browser.get(base + "/runs/waiting")
        _wait(lambda: browser.find_elements(By.ID, "send"), what="the card")
        browser.execute_script(MARK)
        browser.find_element(By.CSS_SELECTOR, "#act input[value=edit]").click()
        box = browser.find_element(By.CSS_SELECTOR, "#act textarea")
        box.clear()
        box.send_keys('{"entry": "b')
        seen = _updates(browser)
        _wait(lambda: _updates(browser) > seen, what="an update", timeout=8)
        assert browser.execute_script(KEPT), "the page reloaded"
        box = browser.find_element(By.CSS_SELECTOR, "#act textarea")
        assert box.get_attribute("value") == '{"entry": "b'
        assert browser.find_element(By.CSS_SELECTOR, "#act input[value=edit]").is_selected()
        box.send_keys('.json"}')
        browser.find_element(By.ID, "send").click()
        _wait(
            lambda: _said(browser).startswith("decided here: approved restore"),
            what="done",
            timeout=30,
        )
        assert browser.execute_script(KEPT), "the page reloaded"
        assert _severe(browser) == []
        browser.get("about:blank")  # the page's stream ends before the server does
    with SQLiteStore(db, read_only=True) as store:
        saved = load_run(store, "waiting", strict=False)
    results = [r.text for m in saved.messages for r in m.tool_results]
    assert saved.status == "ok" and results == ["restored b.json"]


def test_the_index_shows_new_runs_and_their_status_as_they_change(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    db = make_store(tmp_path)
    gate = threading.Event()
    agent = approval_agent(tmp_path, gate)

    def go() -> None:
        with SQLiteStore(db) as store:
            start_run(agent, AgentState.of("write it"), store, run_id="new").run_sync()

    def status_of(run_id: str) -> str:
        return str(
            browser.execute_script(
                "const r = [...document.querySelectorAll('#runs tbody tr')]"
                ".find((tr) => tr.dataset.run === arguments[0]);"
                "return r ? r.querySelector('.badge').textContent : ''",
                run_id,
            )
        )

    runner = threading.Thread(target=go, daemon=True)
    with serving(create_app(str(db))) as base:
        browser.get_log("browser")
        browser.get(base + "/")
        browser.execute_script(MARK)
        browser.find_element(By.CSS_SELECTOR, "tr[data-run='finished'] input").click()
        assert browser.find_element(By.ID, "tally").text.startswith("3 runs")
        runner.start()
        try:
            _wait(lambda: status_of("new") == "running", what="the new run, running")
            gate.set()
            _wait(lambda: status_of("new") == "interrupted", what="the new run, waiting")
        finally:
            gate.set()
            runner.join(10)
        assert browser.execute_script(KEPT), "the index reloaded"
        rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
        ids = [r.get_attribute("data-run") for r in rows]
        assert ids[:2] == ["new", "waiting"] and len(ids) == 4  # waiting ones first, newest
        new = rows[0]
        assert new.get_attribute("class") == "interrupted"
        link = new.find_element(By.TAG_NAME, "a")
        assert link.text == "new" and link.get_attribute("href") == base + "/runs/new"
        assert browser.find_element(By.ID, "tally").text == "4 runs · interrupted 2 · ok 2"
        assert browser.find_element(By.ID, "shown").text == "4 shown"
        picked = browser.find_element(By.CSS_SELECTOR, "tr[data-run='finished'] input")
        assert picked.is_selected()  # the reader's pick survives the update
        assert browser.execute_script("return window.pwned === undefined")
        assert _severe(browser) == []
        browser.get("about:blank")  # the page's stream ends before the server does


def test_an_empty_index_shows_the_first_run_as_it_is_saved(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    db = tmp_path / "runs.db"
    SQLiteStore(db).close()
    with serving(create_app(str(db))) as base:
        browser.get(base + "/")
        browser.execute_script(MARK)
        assert browser.find_elements(By.CSS_SELECTOR, "#runs td.empty")
        agent = Agent(ScriptedModel([Message.assistant("hello")]), [])
        with SQLiteStore(db) as store:
            start_run(agent, AgentState.of("hi"), store, run_id="first").run_sync()
        rows = "return [...document.querySelectorAll('#runs tbody tr')].map((tr) => tr.dataset.run)"
        _wait(lambda: browser.execute_script(rows) == ["first"], what="the first run")
        assert browser.find_elements(By.CSS_SELECTOR, "#runs td.empty") == []
        assert browser.find_element(By.ID, "tally").text == "1 runs · ok 1"
        assert browser.execute_script(KEPT), "the index reloaded"
        browser.get("about:blank")  # the page's stream ends before the server does
