"""Machines inside machines, shown: the run page's data carries each step's child runs
(machine, path, terminal, their own steps, nested), and the page and the studio open a
child from its parent's step, its text as text."""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

from agentfsm._view import page_data
from agentfsm.diagrams import page
from tests._children import HOSTILE, TEAM, team_run
from tests.test_view import _open, browser  # noqa: F401  (the fixture)


def test_the_page_data_carries_each_steps_child_runs() -> None:
    data = page_data([team_run()], TEAM, title="team")
    planning, researching, writing = data["steps"]
    assert "children" not in planning and "children" not in writing
    (research,) = researching["children"]
    assert {k: research[k] for k in ("machine", "entry", "path", "terminal")} == {
        "machine": "test_research",
        "entry": "searching",
        "path": ["searching", "reading", "ok"],
        "terminal": "ok",
    }
    assert research["elapsed"] == pytest.approx(0.003)
    searching, reading = research["steps"]
    assert reading["dest"] == "ok" and "children" not in reading
    assert (searching["source"], searching["trigger"], searching["dest"]) == (
        "searching",
        "found",
        "reading",
    )
    (fetch,) = searching["children"]
    assert fetch["machine"] == "test_fetch" and fetch["path"] == ["getting", "ok"]
    # The child's messages sit in the page's one table, each once.
    texts = [data["messages"][start]["text"] for start, _ in fetch["steps"][0]["messages"]]
    assert texts == ["the page " + HOSTILE]
    assert [m["text"] for m in data["messages"]].count("notes") == 1


def test_a_run_without_children_has_none_in_its_data() -> None:
    data = page_data([team_run()], TEAM, title="team")
    assert sum("children" in s for s in data["steps"]) == 1


def test_the_pages_drawing_names_the_machine_a_state_runs() -> None:
    html = page([team_run()], title="team", table=TEAM)
    state = re.search(r'<g class="([^"]*)" id="state-researching">(.*?)</g>', html)
    assert state and "composite" in state.group(1).split()
    assert '<text class="runs" ' in state.group(2) and ">runs test_research</text>" in state.group(
        2
    )
    assert "composite" not in page([], title="standard").split("<svg")[1]


def test_child_text_is_inert_in_the_page() -> None:
    html = page([team_run()], title="team", table=TEAM)
    assert HOSTILE not in html and "<img" not in html
    assert html.count("<script") == 2


def _find(within: Any, selector: str, many: bool = False) -> Any:
    """The element(s) under ``within`` that ``selector`` picks, once there: a child run's
    steps are built when it opens, after its toggle event."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(_: Any) -> Any:
        hits = within.find_elements(By.CSS_SELECTOR, selector)
        return (hits if many else hits[0]) if hits else False

    return WebDriverWait(within.parent if hasattr(within, "parent") else within, 10).until(found)


def test_open_a_child_run_and_its_child_from_the_parents_step(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: pathlib.Path,
) -> None:
    from selenium.webdriver.common.by import By

    logs = _open(browser, page([team_run()], title="team", table=TEAM), tmp_path)
    assert [e for e in logs if e["level"] == "SEVERE"] == []
    row = browser.find_element(By.CSS_SELECTOR, "#steps li[data-step='1']")
    assert "1 child run" in row.text
    row.click()
    panel = browser.find_element(By.ID, "step")
    assert "1 CHILD RUN" in panel.text.upper()
    child = panel.find_element(By.CSS_SELECTOR, "details.child[data-machine='test_research']")
    path = child.find_element(By.CSS_SELECTOR, ".path")
    assert path.get_attribute("textContent") == "searching → reading → ok"
    child.find_element(By.TAG_NAME, "summary").click()
    steps = _find(child, "button.child-step", many=True)
    assert len(steps) == 2
    assert "found" in steps[0].text and "1 child run" in steps[0].text
    steps[0].click()
    assert steps[0].get_attribute("aria-expanded") == "true"
    inner = _find(child, "details.child[data-machine='test_fetch']")
    inner.find_element(By.TAG_NAME, "summary").click()
    got = _find(inner, "button.child-step")
    got.click()
    text = inner.text
    assert "the page " + HOSTILE in text  # the model's text, shown as written
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    # Closing a child step folds it again.
    steps[0].click()
    assert steps[0].get_attribute("aria-expanded") == "false"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


# ---------------------------------------------------------------- in the studio


@pytest.fixture
def studio_with_children(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The studio over a store whose finished run's first step ran a child (attached as
    the store will give it back once it keeps child runs)."""
    pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")
    from agentfsm.studio import _app, create_app
    from tests.test_studio import make_store, serving

    research = team_run().transitions[1].children[0]
    load = _app._Studio.load

    def with_children(self: Any, run_id: str) -> Any:
        saved = load(self, run_id)
        saved.traces[0].transitions[0].with_children([research])
        return saved

    monkeypatch.setattr(_app._Studio, "load", with_children)
    with serving(create_app(str(make_store(tmp_path)))) as base:
        yield base


def test_the_studio_page_data_has_the_child(studio_with_children: str) -> None:
    import httpx

    data = httpx.get(f"{studio_with_children}/api/runs/finished").json()["page"]
    assert data["steps"][0]["children"][0]["machine"] == "test_research"
    html = httpx.get(f"{studio_with_children}/runs/finished").text
    found = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', html)
    assert found and json.loads(found.group(1))["steps"][0]["children"][0]["terminal"] == "ok"


def test_open_a_child_in_the_studio(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    studio_with_children: str,
) -> None:
    from selenium.webdriver.common.by import By

    browser.get_log("browser")
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(studio_with_children + "/runs/finished#step-1")
    child = WebDriverWait(browser, 10).until(
        lambda b: b.find_element(
            By.CSS_SELECTOR, "#step details.child[data-machine='test_research']"
        )
    )
    child.find_element(By.TAG_NAME, "summary").click()
    first = _find(child, "button.child-step")
    first.click()
    fetch = _find(child, "details.child[data-machine='test_fetch']")
    fetch.find_element(By.TAG_NAME, "summary").click()
    _find(fetch, "button.child-step").click()
    assert "the page " + HOSTILE in fetch.text
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.find_element(By.CSS_SELECTOR, "#facts a.back").text == "← all runs"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
