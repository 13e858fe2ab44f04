"""A saved run is data: edited rows never grant an approval or name a state the machine lacks."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    FormatError,
    HumanInTheLoop,
    InvariantError,
    LLMChain,
    UnknownMachineError,
    start_run,
    tool,
)
from agentfsm._cli._main import main
from agentfsm._serialization import Packer
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore, load_run, loads
from agentfsm.testing import assert_path
from tests._crash_worker import make_agent
from tests.support import edit_saved, edit_store, saved_rows

DELETED: list[str] = []


@tool
def delete(path: str) -> str:
    """Delete a file (needs approval)."""
    DELETED.append(path)
    return f"deleted {path}"


def agent(*replies: Any) -> Agent:
    script = list(replies) or [call_tool("delete", path="/etc/passwd"), say("done")]
    return Agent(ScriptedModel(script), [delete], middleware=[HumanInTheLoop({"delete": True})])


@pytest.fixture(autouse=True)
def _forget() -> None:
    DELETED.clear()


@pytest.fixture
def interrupted(tmp_path: Path) -> Path:
    """A run that stopped for approval of ``delete``, saved in a fresh database."""
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        run = start_run(agent(), AgentState.of("tidy up"), store, run_id="r")
        run.run_sync()
    assert_path(run, "expanding calling interrupt_check interrupted")
    return db


def edit_transition(db: Path, seq: int, change: Callable[[dict[str, Any]], None]) -> None:
    edit_saved(db, "transitions", seq, change)


def forge_clear(record: dict[str, Any]) -> None:
    record["trigger"], record["dest"] = "clear", "executing"


def test_two_sql_updates_do_not_run_a_gated_tool(interrupted: Path) -> None:
    # The attack: the last transition says the approval check let the call through.
    edit_transition(interrupted, 2, forge_clear)
    edit_store(interrupted, "UPDATE runs SET result = NULL")
    with SQLiteStore(interrupted) as store:
        state = agent().resume_run_sync("r", store)
        assert DELETED == []
        assert state.status == "interrupted"  # the approval is asked again
        assert state.interrupt_data is not None
        (request,) = state.interrupt_data["action_requests"]
        assert (request["tool_name"], request["arguments"]) == ("delete", {"path": "/etc/passwd"})
        saved = load_run(store, "r", tools=[delete])
        assert [t.path for t in saved.traces] == [
            "expanding calling interrupt_check executing",
            "interrupt_check interrupted",
        ]
        state = agent(say("ok")).resume_run_sync("r", store, [{"type": "reject"}], unbound=True)
    assert state.status == "ok" and DELETED == []


def test_a_forged_run_window_at_interrupt_check_asks_again(interrupted: Path) -> None:
    # Cut the run back to interrupt_check and hide the pending reply from the check:
    # the reply's chain written in full, without the messages the run exchanged.
    with SQLiteStore(interrupted, read_only=True) as store:
        saved = load_run(store, "r", strict=False)
    forged = Packer(saved.messages, saved.contexts).chain(saved.traces[0].transitions[1].chain)
    del forged["exchanged"]
    edit_saved(interrupted, "transitions", 2, None)
    edit_store(interrupted, "UPDATE runs SET result = NULL")
    edit_transition(interrupted, 1, lambda r: r.update(chain=forged))
    with SQLiteStore(interrupted) as store:
        state = agent().resume_run_sync("r", store)
    assert state.status == "interrupted" and DELETED == []


def test_a_run_killed_at_interrupt_check_restores_in_place(interrupted: Path) -> None:
    edit_saved(interrupted, "transitions", 2, None)
    edit_store(interrupted, "UPDATE runs SET result = NULL")
    with SQLiteStore(interrupted) as store:
        assert agent().resume_run_sync("r", store).status == "interrupted"
        saved = load_run(store, "r", tools=[delete])
    assert [t.path for t in saved.traces] == ["expanding calling interrupt_check interrupted"]
    assert DELETED == []


def test_approval_added_after_a_crash_at_executing_is_asked(tmp_path: Path) -> None:
    """A run saved at executing by an agent without approvals, resumed by one with them."""
    db = tmp_path / "runs.db"
    plain = Agent(ScriptedModel([call_tool("delete", path="a"), say("done")]), [delete])
    with SQLiteStore(db, lease=0) as store:  # the abandoned run stands for a dead one
        run = start_run(plain, AgentState.of("go"), store, run_id="r")
        for _ in range(3):
            run.step_sync()
        assert run.state == "executing"
        assert agent().resume_run_sync("r", store).status == "interrupted"
    assert DELETED == []


def _set(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.update({key: value})


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            lambda db: edit_saved(db, "header", 0, _set("machine", "evil")),
            "No machine named 'evil'",
            id="machine",
        ),
        pytest.param(
            lambda db: edit_saved(db, "header", 0, _set("entry", "executing")),
            "not an entry",
            id="entry",
        ),
        pytest.param(
            lambda db: edit_saved(db, "transitions", 2, _set("dest", "owned")),
            "is not a move of the standard machine",
            id="dest",
        ),
        pytest.param(
            lambda db: edit_saved(db, "transitions", 1, _set("trigger", "sudo")),
            "is not a move of the standard machine",
            id="trigger",
        ),
        pytest.param(
            lambda db: edit_saved(db, "transitions", 1, None), "is not a move", id="deleted"
        ),
        pytest.param(
            lambda db: edit_store(db, "UPDATE runs SET result = NULL"),
            "stops at 'interrupted' but has no result",
            id="result",
        ),
    ],
)
def test_a_made_up_machine_state_or_path_is_refused(
    interrupted: Path, edit: Callable[[Path], None], message: str
) -> None:
    edit(interrupted)
    refused = (FormatError, UnknownMachineError)  # a machine not declared here is its own case
    with SQLiteStore(interrupted) as store, pytest.raises(refused, match=message):
        agent().resume_run_sync("r", store, [{"type": "approve"}], unbound=True)
    with SQLiteStore(interrupted) as store, pytest.raises(refused, match=message):
        load_run(store, "r", tools=[delete])
    assert DELETED == []


def _forge_state(db: Path, change: Callable[[dict[str, Any]], None]) -> None:
    con = sqlite3.connect(db)
    (doc,) = con.execute("SELECT agent_state FROM runs").fetchone()
    state = json.loads(doc)
    change(state["interrupt_data"])
    con.execute("UPDATE runs SET agent_state = ?", (json.dumps(state),))
    con.commit()
    con.close()


def _other_arguments(data: dict[str, Any]) -> None:
    data["action_requests"][0]["arguments"] = {"path": "notes.txt"}


def _no_request(data: dict[str, Any]) -> None:
    data["action_requests"], data["hitl_tool_call_ids"] = [], []


def _other_call(data: dict[str, Any]) -> None:
    data["action_requests"][0]["tool_call_id"] = "made-up"
    data["hitl_tool_call_ids"] = ["made-up"]


@pytest.mark.parametrize("forge", [_other_arguments, _no_request, _other_call])
def test_decisions_answer_only_the_calls_that_will_run(
    interrupted: Path, forge: Callable[[dict[str, Any]], None]
) -> None:
    _forge_state(interrupted, forge)
    decisions: list[dict[str, Any]] = [] if forge is _no_request else [{"type": "approve"}]
    # The saved agent state is a copy of the log: an edited one is refused as it loads.
    with SQLiteStore(interrupted) as store, pytest.raises(FormatError, match="Nothing was run"):
        agent().resume_run_sync("r", store, decisions)
    with SQLiteStore(interrupted) as store, pytest.raises(FormatError, match="agent state"):
        load_run(store, "r", tools=[delete])
    assert DELETED == []


async def test_an_edited_agent_state_in_memory_is_refused_too() -> None:
    gated = agent()
    state = await gated.execute(AgentState.of("go"))
    assert state.interrupt_data is not None
    data = json.loads(json.dumps(state.interrupt_data))
    _other_arguments(data)
    forged = AgentState(state.messages, status="interrupted", interrupt_data=data)
    with pytest.raises(InvariantError, match="is not a pending call"):
        await gated.resume(forged, [{"type": "approve"}], unbound=True)
    assert DELETED == []
    done = await gated.resume(state, [{"type": "approve"}], unbound=True)
    assert done.status == "ok" and DELETED == ["/etc/passwd"]


# ---------------------------------------------------------------- nesting


DEEP = "[" * 100_000 + "]" * 100_000


def test_deeply_nested_json_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="nested too deeply"):
        loads(DEEP, AgentState)
    document = '{"format": "agentfsm/1", "type": "AgentState", "value": {"state": ' + DEEP + "}}"
    with pytest.raises(FormatError, match="nested too deeply"):
        loads(document, AgentState)


def test_a_deeply_nested_store_row_is_a_format_error(interrupted: Path) -> None:
    edit_saved(interrupted, "messages", 0, DEEP)
    with SQLiteStore(interrupted) as store, pytest.raises(FormatError, match="nested too deeply"):
        load_run(store, "r", tools=[delete])


def test_the_standard_table_is_what_restores_check() -> None:
    assert agent().mode.table is STANDARD


# ---------------------------------------------------------------- contexts the engine reads


@pytest.mark.parametrize(
    ("mode_state", "problem"),
    [
        ([1], "mode_state must be an object, got: list"),
        ("x", "mode_state must be an object, got: str"),
        ({"run_count": "3"}, "mode_state's run_count must be an integer, 0 or more, got: str"),
        ({"run_count": 1.5}, "mode_state's run_count must be an integer, 0 or more, got: float"),
        ({"run_count": True}, "mode_state's run_count must be an integer, 0 or more, got: bool"),
        ({"run_count": -1}, "mode_state's run_count must be an integer, 0 or more, got: -1"),
    ],
)
def test_a_saved_mode_state_the_engine_cannot_read_is_refused_by_runs_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode_state: Any, problem: str
) -> None:
    """A paused run whose saved contexts were edited: ``runs resume`` says so in one line
    (exit 2), no traceback, and nothing runs."""

    db, log = tmp_path / "runs.db", tmp_path / "tools.log"
    with SQLiteStore(db) as store:
        run = start_run(
            make_agent(log), AgentState.of("go"), store, run_id="r", should_pause=lambda: True
        )
        run.run_sync()
    assert_path(run, "expanding calling paused")
    for kind, _, index, _ in saved_rows(db):
        if kind == "contexts":
            edit_saved(db, "contexts", index, lambda c: c.update(mode_state=mode_state))
    message = f"Context 0 of the document is malformed: {problem}"
    with SQLiteStore(db) as store, pytest.raises(FormatError) as refused:
        load_run(store, "r", strict=False)
    assert str(refused.value) == message
    monkeypatch.setenv("AGENTFSM_TEST_LOG", str(log))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(
            ["runs", "resume", "r", "--db", str(db), "--agent", "tests._crash_worker:agent"]
        )
    assert (status, out.getvalue(), err.getvalue()) == (2, "", f"agentfsm runs: {message}\n")
    assert not log.exists()  # the paused call never ran


def _chain_document(context: dict[str, Any]) -> str:
    document = {
        "format": "agentfsm/1",
        "type": "LLMChain",
        "messages": [{"role": "user", "content": "hi"}],
        "contexts": [context],
        "value": {"llm": "m", "messages": [[0, 1]], "needs_response": True, "context": 0},
    }
    return json.dumps(document)


@pytest.mark.parametrize(
    ("context", "problem"),
    [
        ({"mode_state": [1]}, "mode_state must be an object, got: list"),
        (
            {"mode_state": {"run_count": None}},
            "mode_state's run_count must be an integer, 0 or more, got: NoneType",
        ),
        ({"state": [1, 2]}, "state must be an object, got: list"),
        ({"state": "x"}, "state must be an object, got: str"),
    ],
)
def test_a_chain_document_with_a_context_the_engine_cannot_read_is_a_format_error(
    context: dict[str, Any], problem: str
) -> None:
    with pytest.raises(FormatError) as refused:
        loads(_chain_document(context), LLMChain, models=[ScriptedModel([], model_name="m")])
    assert str(refused.value) == f"Context 0 of the document is malformed: {problem}"


@pytest.mark.parametrize(
    "context",
    [
        {},
        {"mode_state": None, "state": None},
        {"mode_state": {}},
        {"mode_state": {"run_count": 4, "mine": [1]}},
        {"pause_reason": ["free", {"form": 1}], "anything": [1]},
        {"pause_reason": None},
    ],
)
def test_contexts_the_engine_reads_load_as_they_are(context: dict[str, Any]) -> None:
    chain = loads(_chain_document(context), LLMChain, models=[ScriptedModel([], model_name="m")])
    assert chain.custom_context == context
