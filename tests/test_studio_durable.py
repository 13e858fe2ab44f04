"""agentfsm studio over a durable engine's (DBOS) database, on SQLite and on PostgreSQL:
its runs listed, shown and compared, and a waiting run decided from the studio through
the engine's own ``decide``: the first decision wins, a later different one is told
which won. The worker runs in this process; the studio is served on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("dbos", reason="the durable engine needs the dbos extra")
pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")

from agentfsm import Agent, AgentState, HumanInTheLoop, Message
from agentfsm.durable import Engine
from agentfsm.providers import ScriptedModel, call_tool
from agentfsm.studio import create_app
from tests import _durable_agent
from tests.test_durable import db, launched  # noqa: F401  (a fixture)
from tests.test_studio import serving
from tests.test_studio_browser import _shot, _wait
from tests.test_view import browser  # noqa: F401  (the fixture)


def _gated_once() -> Agent:
    """One call of ``record`` that waits for approval, then an answer."""
    model = ScriptedModel([call_tool("record", note="x", call_id="c1"), Message.assistant("done")])
    return Agent(model, [_durable_agent.record], middleware=[HumanInTheLoop({"record": True})])


def _until(engine: Engine, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 60
    while engine.status(run_id).status != status:
        assert time.monotonic() < deadline, f"{run_id} never became {status}"
        time.sleep(0.05)


@pytest.fixture
def durable(db: str) -> Iterator[tuple[str, Engine]]:  # noqa: F811  (the fixture)
    plain = Agent(ScriptedModel([Message.assistant("hi")], model_name="scripted"), [])
    with launched(db, {"plain": plain, "gated": _gated_once()}) as engine:
        engine.result(engine.submit(AgentState.of("job"), agent="plain", run_id="job-1"))
        engine.submit(AgentState.of("job"), agent="gated", run_id="waits")
        _until(engine, "waits", "waiting")
        yield db, engine


def _csrf(page: str) -> str:
    start = page.index('name="csrf" value="') + len('name="csrf" value="')
    return page[start : page.index('"', start)]


def test_a_durable_run_is_listed_shown_compared_and_decided_first_decision_wins(
    durable: tuple[str, Engine],
) -> None:
    url, engine = durable
    with serving(create_app(url)) as base:
        runs = httpx.get(f"{base}/api/runs").json()["runs"]
        assert [(r["run_id"], r["status"]) for r in runs] == [("waits", "waiting"), ("job-1", "ok")]
        index = httpx.get(f"{base}/").text
        assert index.index('data-run="waits"') < index.index('data-run="job-1"')
        assert "2 durable runs" in index and '<option value="gated">gated</option>' in index

        def listed(**filters: str) -> list[str]:
            return [
                r["run_id"] for r in httpx.get(f"{base}/api/runs", params=filters).json()["runs"]
            ]

        assert listed(status="waiting") == listed(agent="gated") == listed(q="WAI") == ["waits"]
        assert listed(agent="plain", status="ok") == ["job-1"]
        assert listed(status="paused") == listed(agent="nobody") == []
        only = httpx.get(f"{base}/", params={"agent": "plain"}).text
        assert 'data-run="job-1"' in only and 'data-run="waits"' not in only
        assert '<span id="shown">1 shown</span>' in only
        assert '<option value="plain" selected>plain</option>' in only
        none = httpx.get(f"{base}/", params={"queue": "nope"}).text
        assert "No runs match." in none and "2 durable runs" in none
        shown = httpx.get(f"{base}/api/runs/waits").json()
        [request] = shown["requests"]
        assert (request["tool_name"], request["tool_call_id"]) == ("record", "c1")
        page = httpx.get(f"{base}/runs/waits")
        assert page.status_code == 200 and "This run waits for your decision" in page.text
        csrf = _csrf(page.text)
        assert httpx.get(f"{base}/runs/job-1").status_code == 200  # its path, drawn
        headers = {"X-CSRF-Token": csrf}
        approve = {"decisions": [{"type": "approve", "digest": request["digest"]}]}
        reject = {"decisions": [{"type": "reject", "digest": request["digest"]}]}
        assert httpx.post(f"{base}/api/runs/waits/decide", json=approve).status_code == 403
        first = httpx.post(f"{base}/api/runs/waits/decide", json=approve, headers=headers)
        assert first.status_code == 202 and first.json() == {"run_id": "waits", "resumed": True}
        late = httpx.post(f"{base}/api/runs/waits/decide", json=reject, headers=headers)
        assert late.status_code == 409, late.text
        body = late.json()
        assert body["run_id"] == "waits" and "waits" in body["error"]
        assert [d["type"] for d in body["decisions"]] == ["approve"]
        [decided] = body["decided"]  # the tool named while the run still shows the request
        assert decided["tool"] in ("record", None) and decided["call_id"] == "c1"
        assert (decided["decision"], decided["where"]) == ("approved", "elsewhere")
        # the same decisions again (a retry) change nothing and are not refused
        again = httpx.post(f"{base}/api/runs/waits/decide", json=approve, headers=headers)
        assert again.status_code == 202
        result = engine.result("waits", timeout=60)
        assert result.state.status == "ok" and result.state.messages[-1].text == "done"
        assert [m.role for m in result.state.messages] == ["user", "assistant", "tool", "assistant"]
        compared = httpx.get(f"{base}/api/compare", params={"a": "job-1", "b": "waits"})
        assert compared.status_code == 200
        assert compared.json()["a"]["run_id"] == "job-1" and compared.json()["parted"] == 2
        assert "waits" in httpx.get(f"{base}/compare?a=job-1&b=waits").text
        missing = httpx.post(f"{base}/api/runs/nobody/decide", json=approve, headers=headers)
        assert missing.status_code == 404 and "nobody" in missing.json()["error"]
        form = httpx.post(f"{base}/runs/nobody/decide", data={"csrf": csrf})
        assert form.status_code == 404 and "nobody" in form.text
        gone = httpx.post(f"{base}/runs/waits/decide", data={"csrf": csrf})
        assert gone.status_code == 303 and gone.headers["location"] == "/runs/waits?said=gone"


def test_a_durable_run_is_decided_from_its_page_in_a_browser(
    browser: Any,  # noqa: F811  (the fixture of tests/test_view.py)
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    url = f"sqlite:///{tmp_path / 'durable.db'}"
    with launched(url, {"gated": _gated_once()}) as engine:
        engine.submit(AgentState.of("job"), agent="gated", run_id="waits")
        _until(engine, "waits", "waiting")
        with serving(create_app(url)) as base:
            browser.get(f"{base}/")
            browser.find_element(By.LINK_TEXT, "waits").click()
            assert "This run waits for your decision" in browser.page_source
            legend = browser.find_element(By.CSS_SELECTOR, "fieldset.decide legend").text
            assert legend == "record (c1)"
            digest = browser.find_element(By.CSS_SELECTOR, "fieldset.decide .digest code").text
            assert digest == httpx.get(f"{base}/api/runs/waits").json()["requests"][0]["digest"]
            radios = browser.find_elements(By.NAME, "decision-0")
            assert [r.get_attribute("value") for r in radios] == ["approve", "edit", "reject"]
            assert not any(r.is_selected() for r in radios)  # nothing is chosen for the user
            for width in (360, 1280):
                browser.set_window_size(width, 900)
                _shot(browser, f"durable-run-{width}", tmp_path)
                assert browser.execute_script(  # a long digest or path wraps: no side scroll
                    "return document.documentElement.scrollWidth <= window.innerWidth"
                )
            browser.find_element(By.ID, "send").click()  # the browser asks for a choice first
            assert browser.current_url.endswith("/runs/waits")
            assert engine.status("waits").status == "waiting"
            csrf = browser.find_element(By.NAME, "csrf").get_attribute("value")
            unchosen = httpx.post(
                f"{base}/runs/waits/decide", data={"csrf": csrf, "digest-0": digest}
            )
            assert unchosen.status_code == 400 and "choose a decision for record (c1)" in (
                unchosen.text
            )
            radios[0].click()
            browser.find_element(By.ID, "send").click()
            _wait(lambda: browser.current_url.endswith("/runs/waits?said=decided"), what="sent")
            result = engine.result("waits", timeout=10)
            assert result.state.status == "ok"
            browser.get(f"{base}/runs/waits")
            steps = browser.execute_script(
                "return document.querySelectorAll('#steps li[data-step]').length"
            )
            assert steps == sum(len(t) for t in result.traces) and steps > 0
