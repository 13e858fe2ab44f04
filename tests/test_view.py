"""The run page: self-contained, escaped, and stepped in a real headless Chromium.

The browser tests drive Debian's ``chromium`` through its ``chromedriver``
(selenium, pointed at ``/usr/bin/chromedriver``: nothing is downloaded). Where
they are not installed the tests are skipped, saying so; ``.ci/run`` installs
them and sets ``AGENTFSM_REQUIRE_BROWSER=1``, which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from agentfsm import STANDARD, Agent, AgentState, Message, Trace, start_run, tool
from agentfsm._demo import DEMO_PROMPT, demo_agent
from agentfsm._view import saved_run_page
from agentfsm.diagrams import page
from agentfsm.providers import ScriptedModel, call_tool
from agentfsm.store import SQLiteStore, load_run

HOSTILE = '</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def _demo_traces() -> list[Trace]:
    agent = demo_agent(delay=0, stream=False, folder=tempfile.mkdtemp())

    async def go() -> list[Trace]:
        first = agent.start(AgentState.of(DEMO_PROMPT))
        await first.run()
        second = await agent.start_resume(first.agent_state, [{"type": "approve"}], unbound=True)
        await second.run()
        return [first.trace, second.trace]

    return asyncio.run(go())


@tool
def shout(text: str) -> str:
    """Say it louder."""
    return HOSTILE + text.upper()


def _hostile_run(tmp_path: pathlib.Path) -> str:
    """A saved run whose every string is hostile HTML, ended in error; its page."""
    usage = {"input_tokens": 12, "output_tokens": 7}
    calls = call_tool("shout", text=HOSTILE).tool_calls
    reply = Message.assistant(HOSTILE, calls, metadata={"usage": usage})
    model = ScriptedModel([reply], model_name=HOSTILE)
    with SQLiteStore(tmp_path / "runs.db") as store:
        run = start_run(Agent(model, [shout]), AgentState.of(HOSTILE), store, run_id=HOSTILE)
        run.run_sync()
        assert run.agent_state.status == "error"
        return saved_run_page(load_run(store, HOSTILE, strict=False))


# ---------------------------------------------------------------- the HTML


def test_the_page_is_self_contained() -> None:
    html = page(_demo_traces(), title="demo")
    assert html.startswith("<!DOCTYPE html>")
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls == {"http://www.w3.org/2000/svg"}  # the SVG namespace, never fetched
    assert not re.search(r"<(link|iframe|img|object|embed)\b", html)
    assert not re.search(r"\bsrc=", html)
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert policy and "default-src &#x27;none&#x27;" in policy.group(1)


def test_the_page_draws_every_edge_with_the_runs_counts() -> None:
    html = page(_demo_traces(), title="demo")
    for k in range(len(STANDARD.edges)):
        assert f'id="edge-{k}"' in html
    loop = STANDARD.edges.index(STANDARD.edge("deciding", "loop"))  # type: ignore[arg-type]
    assert re.search(rf'id="edge-{loop}">.*?>loop x3</text>', html, re.S)
    # The resumed run enters where the approval was asked: the pending-calls entry.
    assert ">Ok x1</text>" in html and ">pending tool calls x1</text>" in html
    assert ">fresh x1</text>" in html and ">tool results x" not in html


def test_run_strings_are_escaped(tmp_path: pathlib.Path) -> None:
    html = _hostile_run(tmp_path)
    assert HOSTILE not in html
    assert "window.pwned" in html  # the text is there, inert
    assert html.count("<script") == 2  # the data block and the page's own script
    assert "<img" not in html
    data = json.loads(
        re.search(
            r'<script type="application/json" id="run-data">(.*?)</script>', html, re.S
        ).group(1)  # type: ignore[union-attr]
    )
    assert data["run_id"] == HOSTILE and data["usage"] == {"input_tokens": 12, "output_tokens": 7}
    assert data["segments"][0]["outcome"]["terminal"] == "error"
    assert data["segments"][0]["outcome"]["error"]["type"] == "script_exhausted"


# ---------------------------------------------------------------- in a browser


def _chrome() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    found = _chrome()
    if found is None:
        message = (
            "Chromium and chromedriver are not installed "
            "(apt-get install chromium chromium-driver; .ci/run installs them)"
        )
        if os.environ.get("AGENTFSM_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    profile = tempfile.mkdtemp(prefix="agentfsm-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1500,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=found[1]))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(browser: Any, html: str, folder: pathlib.Path) -> list[dict[str, Any]]:
    """Load the page from a file; the console's messages while it loaded."""
    path = folder / "page.html"
    path.write_text(html, encoding="utf-8")
    browser.get_log("browser")  # drop what an earlier page said
    browser.get(path.as_uri())
    return list(browser.get_log("browser"))


def _state(browser: Any) -> dict[str, Any]:
    return dict(
        browser.execute_script(
            """
            const edge = document.querySelector('#machine .edge.current');
            return {
              step: document.body.dataset.step,
              edge: edge ? edge.id : null,
              here: [...document.querySelectorAll('#machine .state.here')].map(e => e.id),
              heading: document.querySelector('#step h2').textContent,
              messages: [...document.querySelectorAll('#step .msg')].map(m => m.textContent),
              fresh: document.querySelectorAll('#step .msg.new').length,
            };
            """
        )
    )


def test_stepping_moves_the_highlight_and_the_conversation(
    browser: Any, tmp_path: pathlib.Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    traces = _demo_traces()
    assert _open(browser, page(traces, title="demo"), tmp_path) == []  # no console errors
    steps = sum(len(t) for t in traces)
    last = _state(browser)
    assert last["step"] == str(steps - 1) and last["heading"] == f"Step {steps} of {steps}"
    done = STANDARD.edges.index(STANDARD.edge("deciding", "done"))  # type: ignore[arg-type]
    assert last["edge"] == f"edge-{done}" and last["here"] == ["state-ok"]

    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.HOME)
    first = _state(browser)
    assert first["step"] == "0" and first["here"] == ["state-calling"]
    expanded = STANDARD.edges.index(STANDARD.edge("expanding", "expanded"))  # type: ignore[arg-type]
    assert first["edge"] == f"edge-{expanded}"
    assert len(first["messages"]) == 2  # the system prompt and the question

    body.send_keys(Keys.ARROW_RIGHT)
    second = _state(browser)
    assert second["step"] == "1" and second["edge"] != first["edge"]
    assert second["here"] == ["state-interrupt_check"]
    assert len(second["messages"]) == 3 and second["fresh"] == 1
    assert "search_notes" in second["messages"][0]  # the newest message first

    body.send_keys(Keys.ARROW_LEFT)
    assert _state(browser) == first
    body.send_keys(Keys.END)
    assert _state(browser)["step"] == str(steps - 1)
    assert "I wrote summary.md" in _state(browser)["messages"][0]

    shot = tmp_path / "view.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_hostile_text_shows_as_text(browser: Any, tmp_path: pathlib.Path) -> None:
    logs = _open(browser, _hostile_run(tmp_path), tmp_path)
    assert [e for e in logs if e["level"] == "SEVERE"] == []
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    text = browser.execute_script("return document.body.innerText")
    assert HOSTILE in text
    assert "script_exhausted" in text
    assert browser.title.startswith("run </script>")
