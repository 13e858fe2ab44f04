"""The example chat page (examples/serve_chat/index.html) in headless Chromium: it talks
AG-UI to a served agent, draws the machine's transitions live and asks for approval.

Chromium and chromedriver are Debian's (see tests/test_view.py); without them the
tests are skipped, unless AGENTFSM_REQUIRE_BROWSER is set.
"""

from __future__ import annotations

import importlib.util
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ag_ui", reason="agentfsm[serve] is not installed")

from agentfsm.store import SQLiteStore, load_run
from tests.test_studio import serving
from tests.test_view import browser  # noqa: F401  (the fixture)

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "serve_chat.py"
HOSTILE = "<img src=x onerror=window.pwned=1>"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("serve_chat", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wait(condition: Any, timeout: float = 15, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def chat(tmp_path: pathlib.Path) -> Iterator[tuple[str, str]]:
    db = str(tmp_path / "chat.db")
    with serving(_example().make_app(db)) as base:
        yield base, db


def _texts(driver: Any, selector: str) -> list[str]:
    script = f"return [...document.querySelectorAll({selector!r})].map(e => e.textContent)"
    found: list[str] = driver.execute_script(script)
    return found


def test_chat_streams_draws_the_transitions_and_asks_for_approval(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    chat: tuple[str, str],
) -> None:
    from selenium.webdriver.common.by import By

    base, db = chat
    browser.get_log("browser")
    browser.get(base + "/")
    prompt = browser.find_element(By.ID, "prompt")
    prompt.send_keys("hello " + HOSTILE)
    browser.find_element(By.CSS_SELECTOR, "#send button").click()
    _wait(lambda: "deciding --done--> ok" in _texts(browser, "#steps li"), what="the first run")
    assert _texts(browser, "#chat .msg") == [
        "hello " + HOSTILE,
        f"You said: hello {HOSTILE}. Ask me to delete a file. ",
    ]
    assert _texts(browser, "#steps li") == [
        "expanding --expanded--> calling",
        "calling --called--> interrupt_check",
        "interrupt_check --clear--> executing",
        "executing --executed--> propagating",
        "propagating --propagated--> until_check",
        "until_check --unsatisfied--> deciding",
        "deciding --done--> ok",
    ]
    assert browser.execute_script("return window.pwned === undefined")

    browser.execute_script("document.getElementById('steps').textContent = ''")
    prompt.send_keys("delete notes.txt")
    browser.find_element(By.CSS_SELECTOR, "#send button").click()
    approval = browser.find_element(By.ID, "approval")
    _wait(approval.is_displayed, what="the approval box")
    assert 'Delete file {"path":"notes.txt"}' in approval.text
    assert _texts(browser, "#state") == ["interrupted"]
    browser.find_element(By.ID, "approve").click()
    _wait(lambda: "deciding --done--> ok" in _texts(browser, "#steps li"), what="the approval")
    assert not approval.is_displayed()
    assert _texts(browser, "#steps li") == [
        "expanding --expanded--> calling",
        "calling --called--> interrupt_check",
        "interrupt_check --interrupted--> interrupted",
        "interrupt_check --clear--> executing",
        "executing --executed--> propagating",
        "propagating --propagated--> until_check",
        "until_check --unsatisfied--> deciding",
        "deciding --loop--> expanding",
        "expanding --expanded--> calling",
        "calling --called--> interrupt_check",
        "interrupt_check --clear--> executing",
        "executing --executed--> propagating",
        "propagating --propagated--> until_check",
        "until_check --unsatisfied--> deciding",
        "deciding --done--> ok",
    ]
    shown = _texts(browser, "#chat .msg")
    assert shown[-3:] == [
        'delete_file {"path": "notes.txt"}',
        "→ deleted notes.txt",
        "Done: deleted notes.txt. ",
    ]
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    with SQLiteStore(db) as store:  # both conversations' runs, saved as the studio reads them
        saved = [load_run(store, info.run_id, strict=False) for info in store.runs()]
    assert sorted((len(s.traces), s.status) for s in saved) == [(1, "ok"), (2, "ok")]


CUT_FIRST_STREAM = """
window.fetches = [];
const real = window.fetch;
window.fetch = async (url, init) => {
  window.fetches.push((init.headers || {})["Last-Event-ID"] || null);
  const response = await real(url, init);
  if (window.fetches.length > 1) return response;
  const reader = response.body.getReader();
  let reads = 0;
  const body = new ReadableStream({
    async pull(controller) {
      if (reads++ >= 1) { controller.error(new Error("the connection dropped")); return; }
      const { value, done } = await reader.read();
      if (done) controller.close(); else controller.enqueue(value);
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
};
"""


@pytest.fixture
def slow_chat(tmp_path: pathlib.Path) -> Iterator[str]:
    """The chat with a model that takes 0.3 s to answer: its stream comes in parts."""
    with serving(_example().make_app(str(tmp_path / "chat.db"), delay=0.3)) as base:
        yield base


def test_a_dropped_stream_is_read_on_from_the_last_event(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    slow_chat: str,
) -> None:
    from selenium.webdriver.common.by import By

    base = slow_chat
    browser.get(base + "/")
    browser.execute_script(CUT_FIRST_STREAM)
    browser.find_element(By.ID, "prompt").send_keys("hello")
    browser.find_element(By.CSS_SELECTOR, "#send button").click()
    _wait(lambda: "deciding --done--> ok" in _texts(browser, "#steps li"), what="the run")
    fetches = browser.execute_script("return window.fetches")
    assert len(fetches) == 2 and fetches[0] is None and int(fetches[1]) >= 1
    assert _texts(browser, "#steps li") == [  # each transition once: nothing read twice
        "expanding --expanded--> calling",
        "calling --called--> interrupt_check",
        "interrupt_check --clear--> executing",
        "executing --executed--> propagating",
        "propagating --propagated--> until_check",
        "until_check --unsatisfied--> deciding",
        "deciding --done--> ok",
    ]
    assert _texts(browser, "#chat .msg") == [
        "hello",
        "You said: hello. Ask me to delete a file. ",
    ]
