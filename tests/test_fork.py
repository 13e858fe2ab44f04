"""Forking a saved run at one of its steps, and comparing two runs' paths.

A fork is a new run whose past is its parent's up to a step: it rests where that step
went, with the chain it left, names its parent, and a resume goes on from there.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from agentfsm import Agent, AgentState, Approval, FormatError, Message, RunExistsError, start_run
from agentfsm._compare import compare_runs
from agentfsm._demo import DEMO_PROMPT, demo_agent
from agentfsm._view import saved_run_page
from agentfsm.providers import ScriptedModel, call_tool
from agentfsm.store import SQLiteStore, fork_run, load_run
from agentfsm.testing import assert_path
from tests.support import add


def _parent(tmp_path: pathlib.Path) -> tuple[pathlib.Path, SQLiteStore]:
    """A store with the demo run, approved: 29 steps over two segments (17, then 12 from
    the approval state)."""
    store = SQLiteStore(tmp_path / "runs.db")
    agent = demo_agent(delay=0, stream=False, folder=tmp_path)
    start_run(agent, AgentState.of(DEMO_PROMPT), store, run_id="parent").run_sync()
    agent.resume_run_sync("parent", store, [{"type": "approve"}], unbound=True)
    return tmp_path / "runs.db", store


def test_a_fork_keeps_the_past_up_to_its_step_and_names_its_parent(
    tmp_path: pathlib.Path,
) -> None:
    _, store = _parent(tmp_path)
    parent = load_run(store, "parent", strict=False)
    head = parent.head
    steps = [t for trace in parent.traces for t in trace]
    forked = 0
    for number, step in enumerate(steps, 1):
        if step.dest in ("ok", "interrupted"):
            with pytest.raises(ValueError, match="a fork rests at a working state"):
                fork_run(store, "parent", number)
            continue
        fork_id = fork_run(store, "parent", number, new_id=f"fork-{number}")
        assert fork_id == f"fork-{number}"
        fork = load_run(store, fork_id, strict=False)
        forked += 1
        assert fork.status == "running" and fork.state == step.dest
        assert fork.forked_from == ("parent", number)
        assert fork.steps == number
        mine = [t for trace in fork.traces for t in trace]
        assert [(t.source, t.trigger, t.dest) for t in mine] == [
            (t.source, t.trigger, t.dest) for t in steps[:number]
        ]
        assert fork.chain.messages == step.chain.messages
        # Only the messages of its own past: a search never finds what came after.
        assert set(map(id, fork.messages)) <= {id(m) for t in mine for m in t.chain.messages}
    assert forked == 27  # every step but the two into a terminal
    assert load_run(store, "parent", strict=False).head == head  # the parent is only read
    infos = {i.run_id: i for i in store.runs()}
    assert infos["fork-3"].summary == "forked from parent at step 3"
    store.close()


def test_a_fork_refuses_what_is_not_a_step_or_a_free_id(tmp_path: pathlib.Path) -> None:
    _, store = _parent(tmp_path)
    for bad in (0, 30, -1):
        with pytest.raises(ValueError, match="has steps 1 to 29"):
            fork_run(store, "parent", bad)
    with pytest.raises(RunExistsError):
        fork_run(store, "parent", 3, new_id="parent")
    assert load_run(store, "parent", strict=False).status == "ok"
    store.close()


def test_a_fork_goes_on_from_its_step_on_resume(tmp_path: pathlib.Path) -> None:
    """What if the model had answered otherwise: fork before its reply, resume with
    another model."""
    store = SQLiteStore(tmp_path / "runs.db")
    first = Agent(
        ScriptedModel([call_tool("add", {"a": 1, "b": 2}), Message.assistant("3")]), [add]
    )
    start_run(first, AgentState.of("add"), store, run_id="parent").run_sync()
    parent = load_run(store, "parent", strict=False)
    # Step 7 goes back to expanding after the tool's result: the model is asked again.
    assert parent.trace.transitions[6].dest == "expanding"
    fork_id = fork_run(store, "parent", 7)
    second = Agent(ScriptedModel([Message.assistant("three")]), [add])
    result = second.resume_run_sync(fork_id, store)
    assert result.messages[-1].text == "three"
    fork = load_run(store, fork_id, strict=False)
    assert fork.status == "ok" and fork.forked_from == ("parent", 7)
    assert_path(fork.trace, parent.trace.path)
    comparison = compare_runs(parent, fork)
    assert comparison.parted == 9  # the model's other answer, on the same edge
    assert comparison.rows[8].likeness == "conversation"
    assert "they part at step 9" in comparison.why
    store.close()


def test_a_forked_header_is_checked(tmp_path: pathlib.Path) -> None:
    _, store = _parent(tmp_path)
    fork_run(store, "parent", 5, new_id="fork")
    store.close()
    import sqlite3

    con = sqlite3.connect(tmp_path / "runs.db")
    (doc,) = con.execute(
        "SELECT doc FROM log WHERE run_id = 'fork' ORDER BY rowid LIMIT 1"
    ).fetchone()
    con.execute(
        "UPDATE log SET doc = ? WHERE run_id = 'fork'",
        (doc.replace('"step":5', '"step":"five"'),),
    )
    con.commit()
    con.close()
    with SQLiteStore(tmp_path / "runs.db") as store, pytest.raises(FormatError, match="fork"):
        load_run(store, "fork", strict=False)


def _runs(*argv: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTFSM_DB"}
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", "runs", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_fork_and_compare_from_the_command_line(tmp_path: pathlib.Path) -> None:
    db, store = _parent(tmp_path)
    store.close()
    forked = _runs("fork", "parent", "16", "--id", "other", "--db", str(db), cwd=tmp_path)
    assert forked.returncode == 0, forked.stderr
    assert "run other: forked from parent at step 16, at interrupt_check" in forked.stdout
    assert f"agentfsm runs resume other --db {db}" in forked.stdout
    refused = _runs("fork", "parent", "17", "--db", str(db), cwd=tmp_path)
    assert refused.returncode == 2 and "fork at step 16 or earlier" in refused.stderr
    assert refused.stderr.count("\n") == 1
    resumed = _runs("resume", "other", "--db", str(db), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "interrupt_check --interrupted--> interrupted" in resumed.stdout
    with SQLiteStore(db) as again:
        waiting = load_run(again, "other", strict=False).agent_state
    assert waiting is not None
    decided = json.dumps(
        [r.reject().to_data() for r in Approval.of(waiting.interrupt_data).requests]
    )
    rejected = _runs("resume", "other", "--db", str(db), "--decisions", decided, cwd=tmp_path)
    assert rejected.returncode == 0, rejected.stderr
    assert "segment 2 (entered at interrupt_check):" in rejected.stdout
    assert "run other: ok at ok" in rejected.stdout
    compared = _runs("compare", "parent", "other", "--db", str(db), cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    lines = compared.stdout.splitlines()
    assert lines[1] == "B  run other: ok at ok, 29 steps on standard, forked from parent at step 16"
    # Both enter at the approval state and take its edge (one approves, the other
    # rejects); the conversations part where executing carries the decisions out.
    assert "they part at step 19" in lines[2]
    assert any(line.startswith("> ~    19  executing --executed--> propagating") for line in lines)
    assert sum(line.startswith("  =") for line in lines) == 18
    shown = _runs("show", "other", "--db", str(db), cwd=tmp_path)
    assert "forked from parent at step 16" in shown.stdout.splitlines()[1]
    numbers = [int(line.split()[0]) for line in shown.stdout.splitlines() if "-->" in line]
    assert numbers == list(range(1, 30))  # one count over both segments, as fork counts
    as_json = _runs("show", "other", "--json", "--db", str(db), cwd=tmp_path)
    assert json.loads(as_json.stdout)["forked_from"] == {"run_id": "parent", "step": 16}
    with SQLiteStore(db) as again:
        page = saved_run_page(load_run(again, "other", strict=False))
    assert re.search(r'"forked_from":\s*\{"run_id":\s*"parent",\s*"step":\s*16\}', page)


def test_runs_that_take_other_edges_part_where_they_do(tmp_path: pathlib.Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        tools = Agent(
            ScriptedModel([call_tool("add", {"a": 1, "b": 2}), Message.assistant("3")]), [add]
        )
        start_run(tools, AgentState.of("add"), store, run_id="tools").run_sync()
        direct = Agent(ScriptedModel([Message.assistant("3")]), [add])
        start_run(direct, AgentState.of("add"), store, run_id="direct").run_sync()
        comparison = compare_runs(
            load_run(store, "tools", strict=False), load_run(store, "direct", strict=False)
        )
    assert comparison.parted == 2  # the same model call, another answer...
    assert comparison.rows[1].likeness == "conversation"
    assert comparison.rows[6].likeness == "edge"  # ...so one loops where the other is done
    assert comparison.as_json()["rows"][6] == {
        "number": 7,
        "a": "deciding --loop--> expanding",
        "b": "deciding --done--> ok",
        "likeness": "edge",
    }
    assert comparison.rows[-1].likeness == "missing" and comparison.rows[-1].b is None
    text = comparison.lines()
    assert text[2].startswith("they part at step 2: both take calling --called-->")
    assert "≠     7  deciding --loop--> expanding" in text[10]
