"""Call ids ScriptedModel makes up: unique within a conversation, the same on every run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentfsm import Agent, AgentState
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say
from agentfsm.store import SQLiteStore, load_run
from tests.support import add

ROOT = Path(__file__).resolve().parent.parent


def _worker(mode: str, db: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "tests._call_ids_worker", mode, str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out: dict[str, object] = json.loads(done.stdout)
    return out


def _call_ids(state: AgentState) -> list[str]:
    return [c.call_id for m in state.messages for c in m.tool_calls]


def test_a_run_resumed_in_another_process_never_repeats_a_call_id(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    assert _worker("start", db) == {"status": "paused", "seen": []}
    # the paused reply's call runs on resume, then the model asks again: a new id
    assert _worker("resume", db) == {"status": "ok", "seen": ["call_1", "call_2"]}
    with SQLiteStore(db) as store:
        saved = load_run(store, "r1", strict=False)
    assert saved.status == "ok"
    calls = [c.call_id for m in saved.chain.messages for c in m.tool_calls]
    results = [r.tool_call_id for m in saved.chain.messages for r in m.tool_results]
    assert calls == results == ["call_1", "call_2"]


def test_made_up_ids_follow_the_conversation_and_repeat_across_runs() -> None:
    def script() -> list[object]:
        return [call_tool("add", a=1, b=2), call_tool("add", a=3, b=4), say("done")]

    first = Agent(ScriptedModel(script()), [add]).execute_sync(AgentState.of("go"))
    again = Agent(ScriptedModel(script()), [add]).execute_sync(AgentState.of("go"))
    assert _call_ids(first) == _call_ids(again) == ["call_1", "call_2"]
    assert [r.tool_call_id for m in first.messages for r in m.tool_results] == ["call_1", "call_2"]


def test_one_reply_object_asked_for_again_gets_a_new_id_each_time() -> None:
    reply = call_tool("add", a=1, b=1)
    model = ScriptedModel(lambda messages: reply if len(messages) < 5 else say("done"))
    state = Agent(model, [add]).execute_sync(AgentState.of("go"))
    assert state.status == "ok"
    assert _call_ids(state) == ["call_1", "call_2"]


def test_ids_given_are_kept_and_made_up_ones_go_around_them() -> None:
    model = ScriptedModel(
        [
            call_tools(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}, "call_7")),
            call_tools(("add", {"a": 3, "b": 3}), ("add", {"a": 4, "b": 4})),
            say("done"),
        ]
    )
    state = Agent(model, [add]).execute_sync(AgentState.of("go"))
    assert _call_ids(state) == ["call_1", "call_7", "call_8", "call_9"]
