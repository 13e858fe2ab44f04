"""agentfsm studio in headless Chromium, as a user drives it: the index, a run, a live run
advancing, and approving it from its page.

Chromium and chromedriver are Debian's (see tests/test_view.py); without them the
tests are skipped, unless AGENTFSM_REQUIRE_BROWSER is set.
"""

from __future__ import annotations

import os
import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")

from agentfsm import Agent, AgentState, start_run
from agentfsm.store import SQLiteStore, load_run
from agentfsm.studio import create_app
from tests.test_studio import HOSTILE, approval_agent, make_store, serving
from tests.test_view import browser  # noqa: F401  (the fixture)

#: Where screenshots of the pages go for the docs, when asked (AGENTFSM_SCREENSHOTS=DIR).
SHOTS = os.environ.get("AGENTFSM_SCREENSHOTS")


def _shot(driver: Any, name: str, tmp_path: pathlib.Path) -> None:
    folder = pathlib.Path(SHOTS) if SHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path))
    assert path.read_bytes().startswith(b"\x89PNG")


def _wait(condition: Any, timeout: float = 10, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _severe(driver: Any) -> list[Any]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _steps(driver: Any) -> int:
    return int(
        driver.execute_script("return document.querySelectorAll('#steps li[data-step]').length")
    )


@pytest.fixture
def studio(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    db = make_store(tmp_path)
    with serving(create_app(str(db), agent=approval_agent(tmp_path, resumed=True))) as base:
        yield base, db


def test_open_the_index_then_a_run(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    studio: tuple[str, pathlib.Path],
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    base, _ = studio
    browser.get_log("browser")
    browser.get(base + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    assert rows[0].get_attribute("data-run") == "waiting"
    assert len(rows) == 3
    assert browser.execute_script("return window.pwned === undefined")
    assert HOSTILE in browser.find_element(By.ID, "runs").text
    _shot(browser, "studio-index", tmp_path)

    status = browser.find_element(By.NAME, "status")
    status.find_element(By.CSS_SELECTOR, "option[value=ok]").click()
    browser.find_element(By.NAME, "q").send_keys("finite-state")
    browser.find_element(By.CSS_SELECTOR, "#filters button").click()
    _wait(lambda: "q=finite-state" in browser.current_url, what="the search")
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    assert [r.get_attribute("data-run") for r in rows] == ["finished"]

    rows[0].find_element(By.TAG_NAME, "a").click()
    _wait(lambda: "/runs/finished#" in browser.current_url, what="the run page")
    _wait(lambda: _steps(browser) == 29, what="the timeline")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "human decision: ✔ approved write_file" in text
    title = browser.find_element(By.CSS_SELECTOR, "#steps li[data-step='0']").get_attribute("title")
    assert " · saved 20" in title  # a wall-clock time
    assert "saved at 20" in browser.find_element(By.ID, "step").text
    assert browser.find_elements(By.ID, "live") == []  # a finished run is not followed
    _shot(browser, "studio-run", tmp_path)
    assert _severe(browser) == []


def test_watch_a_live_run_advance_and_approve_it(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    studio: tuple[str, pathlib.Path],
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    base, db = studio
    gate = threading.Event()
    agent = approval_agent(tmp_path, gate)

    def go() -> None:
        with SQLiteStore(db) as store:
            start_run(agent, AgentState.of("write it"), store, run_id="live").run_sync()

    runner = threading.Thread(target=go, daemon=True)
    runner.start()
    try:

        def saved_steps() -> int:
            with SQLiteStore(db, read_only=True) as store:
                try:
                    return load_run(store, "live", strict=False).steps
                except Exception:
                    return 0

        _wait(lambda: saved_steps() >= 2, what="the run to start")
        browser.get_log("browser")
        browser.get(base + "/runs/live")
        _wait(lambda: browser.find_elements(By.ID, "live"), what="the live mark")
        before = _steps(browser)
        assert before >= 2
        gate.set()  # the run goes on, up to the approval it needs
        started = time.monotonic()
        _wait(lambda: _steps(browser) > before, what="new transitions")
        assert time.monotonic() - started < 5
        _wait(lambda: browser.find_elements(By.ID, "approve"), what="the approval form")
    finally:
        gate.set()
        runner.join(10)
    act = _wait(
        lambda: browser.execute_script("return document.getElementById('act').innerText"),
        what="the form's text",
    )
    assert "write_file" in act and "waits for your decision" in act
    assert browser.execute_script("return window.pwned === undefined")
    _shot(browser, "studio-approval", tmp_path)

    click = "const b = document.getElementById('approve'); if (b) b.click(); return !!b"
    _wait(lambda: browser.execute_script(click), what="a click on Approve all")
    badge = "const b = document.querySelector('#facts .badge'); return b ? b.textContent : ''"
    # Read the page in one script: the run moves as it is read.
    _wait(lambda: browser.execute_script(badge) == "ok", what="the run to end ok")
    assert (tmp_path / "a.md").exists()
    text = _wait(lambda: browser.execute_script("return document.body.innerText"), what="text")
    assert "human decision: ✔ approved write_file" in text
    assert _severe(browser) == []


def test_pages_fit_a_narrow_screen(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    studio: tuple[str, pathlib.Path],
) -> None:
    base, _ = studio
    size = browser.get_window_size()
    browser.set_window_size(360, 800)
    try:
        for path in ("/", "/runs/finished", "/runs/waiting"):
            browser.get(base + path)
            _wait(
                lambda: browser.execute_script("return document.readyState") == "complete",
                what=path,
            )
            overflow = browser.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 0, f"{path} scrolls sideways by {overflow} px"
            assert browser.execute_script("return window.innerWidth") <= 400
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_a_long_run_loads_and_steps_quickly(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    """1,407 steps and a 2 MB answer: the page loads and steps without a wait."""
    from agentfsm import Message, tool
    from agentfsm.diagrams import page
    from agentfsm.providers import ScriptedModel, call_tool

    @tool
    def note(i: int) -> str:
        """Take a note."""
        return f"note {i} " * 40

    replies = [call_tool("note", {"i": i}) for i in range(200)]
    agent = Agent(ScriptedModel([*replies, Message.assistant("x" * 2_000_000)]), [note])
    run = agent.start(AgentState.of("go"), max_runs=205)
    run.run_sync()
    assert len(run.trace) == 1407
    html = page([run.trace], title="long", result=run.result)
    assert len(html) < 3_000_000  # the answer once, the steps in a few bytes each
    path = tmp_path / "long.html"
    path.write_text(html, encoding="utf-8")
    started = time.monotonic()
    browser.get_log("browser")  # drop what an earlier page said
    browser.get(path.as_uri())
    step = _wait(  # the page shows its last step once its script ran; a busy machine waits
        lambda: browser.execute_script("return document.body && document.body.dataset.step"),
        timeout=30,
        what=f"the last step shown (console: {browser.get_log('browser')})",
    )
    loaded = time.monotonic() - started
    assert step == "1406"
    times = browser.execute_script(
        """const out = [];
        for (let k = 0; k < 20; k++) {
          const t = performance.now();
          document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowLeft'}));
          out.push(performance.now() - t);
        }
        return out.sort((a, b) => a - b);"""
    )
    assert browser.execute_script("return document.body.dataset.step") == "1386"
    # Loose bounds, far above what it takes (about 0.8 s and 5 ms on an idle machine): they
    # catch a page that rebuilds every step per key press, not a slow shared machine.
    assert loaded < 30 and times[10] < 500, (loaded, times)


def test_typing_into_the_edit_box_types_what_the_reviewer_typed(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    """The run page's step keys (j, k, arrows, Home, End) belong to the page, not to a
    decision's controls: an edited argument is sent as typed, and arrows on the decision
    choices choose a decision instead of moving the step."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from agentfsm import HumanInTheLoop, tool
    from agentfsm.providers import ScriptedModel, call_tool

    @tool
    def restore(entry: str) -> str:
        """Restore a backup entry."""
        return entry

    agent = Agent(
        ScriptedModel([call_tool("restore", entry="a.json")]),
        [restore],
        middleware=[HumanInTheLoop({"restore": True})],
    )
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        start_run(agent, AgentState.of("restore it"), store, run_id="waiting").run_sync()
    with serving(create_app(str(db), agent=agent)) as base:
        browser.get(base + "/runs/waiting")
        choices = "#act input[type=radio]"
        menus = _wait(lambda: browser.find_elements(By.CSS_SELECTOR, choices), what="choices")
        step = browser.execute_script("return document.body.dataset.step")
        edit = browser.find_element(By.CSS_SELECTOR, "#act input[value=edit]")
        edit.click()
        box = browser.find_element(By.CSS_SELECTOR, "#act textarea")
        box.clear()
        typed = '{"entry": "jackknife backup.json"}'
        box.send_keys(typed, Keys.ARROW_LEFT, Keys.HOME, Keys.END, Keys.ARROW_UP)
        assert box.get_attribute("value") == typed
        edit.send_keys(Keys.ARROW_UP)  # on the choices: another decision, never another step
        assert browser.execute_script("return document.body.dataset.step") == step
        assert [m.is_selected() for m in menus] == [True, False, False]  # approve, now
