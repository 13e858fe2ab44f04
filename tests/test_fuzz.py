"""Random input where the outside world writes: tool-call arguments, documents, store rows.

No crash other than a typed error: a tool call always ends in one result, a
document or a saved run either loads or raises ``FormatError`` (or
``UnknownToolError`` for a tool name the caller did not pass).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    Agent,
    AgentState,
    FormatError,
    HumanInTheLoop,
    InvariantError,
    ResumeError,
    Trace,
    UnknownMachineError,
    UnknownToolError,
    restore_run,
    start_run,
    tool,
)
from agentfsm._steps import run_tool_calls
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.providers._model import tool_call
from agentfsm.store import SQLiteStore, dumps, load_run, loads
from tests.support import add, chain_of, edit_saved, edit_store, remember, saved_rows

FUZZ = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@attrs.frozen
class Item:
    name: str
    qty: int = 1


@tool
def order(items: list[Item], note: str | None = None) -> str:
    """Order items."""
    return f"{len(items)} item(s)"


TOOLS = [add, remember, order]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
#: Text that is often almost JSON: real JSON, cut or bit-flipped JSON, deep nesting, noise.
texts = st.one_of(
    st.text(),
    st.binary().map(lambda b: b.decode("utf-8", "replace")),
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["a", "b", "items", "note", "key", "value", "zz"]), json_values)
    .map(json.dumps)
    .flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n]) | st.just(s)),
    st.integers(1, 100_000).map(lambda n: "[" * n),
    st.integers(1, 3_000).map(lambda n: '{"items": ' + "[" * n + "]" * n + "}"),
)


@FUZZ
@given(name=st.sampled_from(["add", "remember", "order", "nope"]), raw=texts)
async def test_any_tool_call_arguments_end_in_one_result(name: str, raw: str) -> None:
    call = tool_call("c1", name, raw)
    chain = chain_of(ScriptedModel([]), *TOOLS)
    (result,) = await run_tool_calls(chain, [call])
    assert result.tool_call_id == "c1"
    assert isinstance(result.content, str) and " at 0x" not in result.content


@FUZZ
@given(arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4))
async def test_any_decoded_arguments_end_in_one_result(arguments: dict[str, Any]) -> None:
    chain = chain_of(ScriptedModel([]), *TOOLS)
    results = await run_tool_calls(
        chain, [tool_call(str(i), t.name, arguments) for i, t in enumerate(TOOLS)]
    )
    assert [r.tool_call_id for r in results] == ["0", "1", "2"]


# ---------------------------------------------------------------- documents


def _trace_document() -> str:
    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    run = agent.start(AgentState.of("go"))
    run.run_sync()
    return dumps(run.trace)


TRACE = _trace_document()


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    return [_replace(v, rest, new) if i == head else v for i, v in enumerate(value)]


def mutated(document: str) -> st.SearchStrategy[str]:
    """``document`` with one node replaced by any JSON value."""
    data = json.loads(document)
    paths = list(_paths(data))
    return st.tuples(st.sampled_from(paths), json_values).map(
        lambda pn: json.dumps(_replace(data, pn[0], pn[1]))
    )


@FUZZ
@given(text=st.one_of(texts, mutated(TRACE)))
def test_any_document_loads_or_is_a_format_error(text: str) -> None:
    for kind in (Trace, AgentState):
        try:
            loaded = loads(text, kind, tools=[add])
        except (FormatError, UnknownToolError):
            pass
        else:
            assert isinstance(loaded, kind)
        try:
            lenient = loads(text.encode("utf-8", "surrogatepass"), kind, tools=[add], strict=False)
        except FormatError:
            pass
        else:
            assert isinstance(lenient, kind)


# ---------------------------------------------------------------- store rows


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run interrupted for approval, saved: every kind of row is there."""
    db = tmp_path_factory.mktemp("fuzz") / "runs.db"
    agent = Agent(
        ScriptedModel([call_tool("add", a=1, b=2), call_tool("remember", key="k", value=1)]),
        [add, remember],
        middleware=[HumanInTheLoop({"remember": True})],
    )
    with SQLiteStore(db) as store:
        start_run(agent, AgentState.of("go"), store, run_id="r").run_sync()
    return db


Edit = Callable[[Path, str], None]


def _targets(db: Path) -> list[tuple[str, str, Edit]]:
    """Every row of the saved run a file's owner could change: (what, its text, the edit)."""
    targets: list[tuple[str, str, Edit]] = [
        (kind, text, functools.partial(_edit_saved, kind, segment, index))
        for kind, segment, index, text in saved_rows(db)
    ]
    with contextlib.closing(sqlite3.connect(db)) as con:
        result, agent_state = con.execute("SELECT result, agent_state FROM runs").fetchone()
        logged = con.execute("SELECT rowid, doc FROM log").fetchall()
    targets.append(("result", result, _edit_run("result")))
    targets.append(("agent_state", agent_state, _edit_run("agent_state")))
    targets += [("checkpoint", doc, _edit_checkpoint(rowid)) for rowid, doc in logged]
    return targets


def _edit_saved(kind: str, segment: int, index: int, path: Path, text: str) -> None:
    edit_saved(path, kind, index, text, segment=segment)


def _edit_run(column: str) -> Edit:
    return lambda path, text: edit_store(path, f"UPDATE runs SET {column} = ?", text)


def _edit_checkpoint(rowid: int) -> Edit:
    sql = "UPDATE log SET doc = ? WHERE rowid = ?"
    return lambda path, text: edit_store(path, sql, text, rowid)


@FUZZ
@given(data=st.data())
async def test_any_store_row_loads_or_is_a_format_error(saved: Path, data: st.DataObject) -> None:
    what, original, edit = data.draw(st.sampled_from(_targets(saved)))
    text = data.draw(st.one_of(texts, mutated(original)))
    copy = saved.with_name(f"edited-{what}.db")
    copy.write_bytes(saved.read_bytes())
    edit(copy, text)
    agent = Agent(
        ScriptedModel([say("done")]),
        [add, remember],
        middleware=[HumanInTheLoop({"remember": True})],
    )
    refused = (FormatError, ResumeError, UnknownToolError, UnknownMachineError, InvariantError)
    with SQLiteStore(copy) as store:
        try:
            loaded = load_run(store, "r", tools=[add, remember])
        except (FormatError, UnknownToolError, UnknownMachineError):
            pass
        else:
            assert loaded.run_id == "r" and loaded.traces
            assert loaded.traces[0].machine == loaded.trace.machine
        try:
            restored = await restore_run(agent, "r", store)
        except refused:
            pass
        else:  # a run edited out of its interrupt goes on from a working state
            assert not restored.done and restored.state in restored.table.working
        try:
            run = await restore_run(agent, "r", store, [{"type": "reject"}], unbound=True)
        except refused:
            pass
        except ValueError as error:
            # An answer that does not fit the (edited) interrupt is a ValueError by contract.
            assert _ANSWER_REFUSED.match(str(error)), error
        else:
            assert not run.done and run.state in run.table.working
    copy.unlink()


#: The ValueErrors of an answer that does not fit an interrupt (agentfsm.middleware).
_ANSWER_REFUSED = re.compile(
    r"Decisions? |Edit decision |Unknown decision type|No interrupt data found|"
    r"No middleware handled the resume"
)
