"""The studio's evals pages, served on loopback: the list, one eval drawn with each edge's
frequency, two evals compared with the edges that changed coloured; hostile text escaped."""

from __future__ import annotations

import html
import pathlib
import re

import httpx
import pytest

pytest.importorskip("starlette", reason="agentfsm[studio] is not installed")

from agentfsm import Agent, tool
from agentfsm.evals import Case, Dataset, Expect, evaluate_sync
from agentfsm.providers import call_tool, say
from agentfsm.store import SQLiteStore
from agentfsm.studio import create_app
from agentfsm.testing import StochasticModel
from tests.test_studio import HOSTILE, serving


@tool
def lookup(query: str) -> str:
    """Look a fact up."""
    return "42"


def agent(loop: float, seed: int) -> Agent:
    model = StochasticModel(
        [
            call_tool("lookup", query="x"),
            [(1 - loop, say("It is 42.")), (loop, call_tool("lookup", query="y"))],
        ],
        seed=seed,
    )
    return Agent(model, [lookup], max_runs=10)


def test_the_evals_pages_draw_one_eval_and_the_change_between_two(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "runs.db"
    dataset = Dataset(
        [Case(f"q{i}", name=f"q{i}") for i in range(4)] + [Case(HOSTILE, name=HOSTILE)],
        name="qa",
        expect=[Expect.ends_in("ok"), Expect.contains(HOSTILE)],
    )
    with SQLiteStore(db) as store:
        calm = evaluate_sync(agent(0.1, 1), dataset, runs=12, name="calm", store=store)
        loopy = evaluate_sync(agent(0.7, 2), dataset, runs=12, name=HOSTILE, store=store)
    with serving(create_app(str(db))) as base:
        listing = httpx.get(f"{base}/evals").text
        assert f'href="/evals/{calm.id}"' in listing and html.escape(HOSTILE) in listing
        page = httpx.get(f"{base}/evals/{calm.id}")
        assert page.status_code == 200
        loops = calm.edge_totals()[("deciding", "loop", "expanding")] / 60
        assert f"loop {loops:.2f}/run" in page.text
        # no answer contains the hostile text: no run met every expectation; each ended ok
        assert "<td>0/60 0% [0%, 6%]</td>" in page.text
        assert '12/12</td><td class="num">100% [76%, 100%]' in page.text
        assert HOSTILE not in page.text and html.escape(HOSTILE) in page.text
        compared = httpx.get(f"{base}/evals/compare", params={"a": calm.id, "b": loopy.id}).text
        edge = re.search(
            r'<g class="([^"]*)" id="edge-\d+"><title>deciding --loop--&gt; expanding', compared
        )
        assert edge is not None and edge[1].split() == ["edge", "taken", "up"]
        assert (
            'id="verdict" class="verdict ok"' in compared
        )  # more loops: a change, not a regression
        assert HOSTILE not in compared
        missing = httpx.get(f"{base}/evals/nope")
        assert missing.status_code == 404 and "no eval 'nope'" in missing.text
        assert httpx.get(f"{base}/evals/compare").status_code == 400
