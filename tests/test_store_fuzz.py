"""Any edit of a saved run's rows ends in a typed error: loaders raise ``FormatError`` or
``StoreError``, every command exits 0 or 2 with one line, a resume runs nothing unasked."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    FormatError,
    InvariantError,
    ResumeError,
    RunInUseError,
    RunNotFoundError,
    StoreError,
    UnknownMachineError,
    UnknownToolError,
    restore_run,
)
from agentfsm._cli._main import main
from agentfsm.store import SQLiteStore, load_run
from tests import _race_worker as race
from tests.support import edit_saved, edit_store, saved_rows
from tests.test_fuzz import mutated, texts

BUDGET = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

#: Loaders end in these; a run id no row has any more, or a machine this process never
#: declared, is its own typed case.
LOADER_ERRORS = (FormatError, StoreError, RunNotFoundError, UnknownMachineError)
#: A resume may also refuse as a resume: the run ended, needs other decisions, is in use.
RESUME_ERRORS = (*LOADER_ERRORS, ResumeError, RunInUseError, UnknownToolError, InvariantError)

sql_values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.sampled_from(["ok", "error", "paused", "interrupted", "running", "r"]),
)

Edit = Callable[[Path, Any], None]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interrupted run: every kind of row is there."""
    folder = tmp_path_factory.mktemp("store-fuzz")
    db = folder / "runs.db"
    race.interrupted(db, folder / "ledger.txt")
    return db


def _json_targets(db: Path) -> list[tuple[str, str, Edit]]:
    """Every JSON text of the run, with the edit that replaces it."""
    targets: list[tuple[str, str, Edit]] = [
        (
            kind,
            text,
            lambda path, new, k=kind, s=segment, i=index: edit_saved(path, k, i, new, segment=s),
        )
        for kind, segment, index, text in saved_rows(db)
    ]
    with contextlib.closing(sqlite3.connect(db)) as con:
        result, agent_state = con.execute("SELECT result, agent_state FROM runs").fetchone()
        logged = con.execute("SELECT rowid, doc FROM log").fetchall()
    for column, text in (("result", result), ("agent_state", agent_state)):
        targets.append(
            (
                column,
                text,
                lambda path, new, c=column: edit_store(path, f"UPDATE runs SET {c} = ?", new),
            )
        )
    for rowid, doc in logged:
        targets.append(
            (
                "checkpoint",
                doc,
                lambda path, new, r=rowid: edit_store(
                    path, "UPDATE log SET doc = ? WHERE rowid = ?", new, r
                ),
            )
        )
    return targets


COLUMNS = [
    ("runs", column)
    for column in (
        "run_id",
        "status",
        "state",
        "segments",
        "steps",
        "summary",
        "created",
        "updated",
        "owner",
        "lease_until",
    )
] + [("log", column) for column in ("run_id", "segment", "steps", "state", "updated")]


@contextlib.contextmanager
def _copy_of(saved: Path, name: str) -> Iterator[Path]:
    """A fresh copy of the saved store; its WAL files go with it, so no example's journal
    is replayed into the next one's copy."""
    copy = saved.with_name(name)
    sidecars = [copy, copy.with_name(f"{name}-wal"), copy.with_name(f"{name}-shm")]
    for path in sidecars:
        path.unlink(missing_ok=True)
    copy.write_bytes(saved.read_bytes())
    try:
        yield copy
    finally:
        for path in sidecars:
            path.unlink(missing_ok=True)


def _checked(db: Path) -> None:
    """What the edited store may do: load or refuse, exit 0 or 2 in one line, run nothing."""
    with SQLiteStore(db) as store, contextlib.suppress(*LOADER_ERRORS):
        load_run(store, "r", strict=False)
    page = str(db.with_suffix(".html"))
    for argv in (
        ["runs", "list"],
        ["runs", "show", "r"],
        ["runs", "show", "r", "--json"],
        ["view", "r", "--out", page],
    ):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = main([*argv, "--db", str(db)])
        assert status in (0, 2), (argv, err.getvalue())
        if status == 2:
            assert err.getvalue().count("\n") == 1, err.getvalue()
    ledger = db.with_suffix(".ledger")
    with SQLiteStore(db) as store, contextlib.suppress(*RESUME_ERRORS, ValueError):
        import asyncio

        asyncio.run(
            restore_run(
                race.make_agent(ledger, nap=0), "r", store, [{"type": "reject"}], unbound=True
            )
        )
    assert not ledger.exists()  # a rejection runs nothing, whatever the rows say


@BUDGET
@given(data=st.data())
def test_any_edited_json_row_ends_in_a_typed_error(saved: Path, data: st.DataObject) -> None:
    what, original, edit = data.draw(st.sampled_from(_json_targets(saved)), label="row")
    text = data.draw(st.one_of(texts, mutated(original)), label="text")
    with _copy_of(saved, f"edited-{what}.db") as copy:
        edit(copy, text)
        _checked(copy)


@BUDGET
@given(column=st.sampled_from(COLUMNS), value=sql_values)
def test_any_edited_column_ends_in_a_typed_error(
    saved: Path, column: tuple[str, str], value: Any
) -> None:
    table, name = column
    with _copy_of(saved, f"edited-{table}-{name}.db") as copy:
        with contextlib.suppress(sqlite3.IntegrityError):  # the schema refuses it: no edit
            edit_store(copy, f"UPDATE {table} SET {name} = ?", value)
        _checked(copy)


@pytest.mark.parametrize(
    "doc",
    [
        "[[0, Infinity]]",
        json.dumps({"messages": [[0, json.dumps({"role": "assistant", "tool_calls": 1.5})]]}),
        json.dumps({"transitions": [[0, "{}"]], "messages": [[0, 1e308]]}),
    ],
)
def test_the_rows_that_crashed_loaders_are_format_errors(
    saved: Path, doc: str, tmp_path: Path
) -> None:
    copy = tmp_path / "edited.db"
    copy.write_bytes(saved.read_bytes())
    edit_store(copy, "UPDATE log SET doc = ? WHERE rowid = (SELECT max(rowid) FROM log)", doc)
    with SQLiteStore(copy) as store, pytest.raises((FormatError, StoreError)):
        load_run(store, "r", strict=False)
    _checked(copy)


def test_infinite_numbers_in_a_document_are_format_errors() -> None:
    from agentfsm import AgentState
    from agentfsm.store import loads

    assert math.inf > 0
    for document in (
        '{"format": "agentfsm/1", "type": "AgentState", "value": {"messages": [[0, Infinity]]}}',
        '{"format": "agentfsm/\u00b2", "type": "AgentState", "value": {}}',
        '{"format": "agentfsm/' + "9" * 5000 + '", "type": "AgentState", "value": {}}',
    ):
        with pytest.raises(FormatError):
            loads(document, AgentState)


def test_a_context_nested_deep_enough_to_show_but_not_to_dump_is_one_line(
    saved: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "edited.db"
    copy.write_bytes(saved.read_bytes())
    edit_saved(copy, "contexts", 0, '{"": ' + "[" * 1500 + "]" * 1500 + "}")
    _checked(copy)
