"""Durable runs as ``agentfsm runs list|show|resume``, ``agentfsm view`` and the studio
show them.

The ``runs`` command calls :func:`handle`, and ``view`` :func:`view_page`, when its
``--db`` names a DBOS database or a Temporal server (``temporal://HOST:PORT/NAMESPACE``)
instead of an agentfsm store; they read through the engine's own face
(:class:`agentfsm.durable.Engine`, :class:`agentfsm.temporal.Engine`), as any other
reader does. A Temporal run still going is shown as far as it went (its workflow's
progress query); a DBOS run once it ended.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import attrs

from .._approval import request_digest
from .._db_url import temporal_target
from .._durable_readers import list_durable, open_engine, show_run, terminal
from .._machine import machine_named
from .._printable import message_line, printable
from .._serialization import dump_trace
from ._durable_log import quiet_engine

__all__ = ["handle", "show_run", "view_page"]


class _NotEndedError(ValueError):
    """A durable run that has not ended: its worker holds its path until it does."""


def view_page(db: str | os.PathLike[str], run_id: str) -> str:
    """The run page (:mod:`agentfsm.view`) of a durable run that ended, as ``agentfsm view``
    writes a saved run's; ValueError for one still queued, running or waiting, and for one
    that ended before its first step (it has no path to draw)."""
    # the command starts fast: only this subcommand loads it
    from .. import _view as view

    with quiet_engine():
        record, result, waiting = show_run(db, run_id)
    if result is None:
        what = "waits for decisions" if waiting is not None else f"is {record.status}"
        why = (
            "a Temporal run's path so far is told by a worker of its task queue, and none is up"
            if temporal_target(os.fspath(db)) is not None
            else "a durable run's path is recorded when it ends"
        )
        raise _NotEndedError(
            f"run {run_id} {what}: {why}; "
            f"'agentfsm runs show {run_id} --db {db}' says where it stands"
        )
    traces = result.traces
    if not traces:  # it failed before any step (options its agent refused): nothing to draw
        said = f": {result.state.error}" if result.state.error is not None else ""
        raise _NotEndedError(
            f"run {run_id} ended {result.state.status} before its first step, so it has no "
            f"path to draw{said}; 'agentfsm runs show {run_id} --db {db}' shows it"
        )
    return view.page(
        traces,
        title=f"run {run_id}",
        table=machine_named(traces[-1].machine),
        run_id=run_id,
        result=terminal(result),
    )


def _say(out: TextIO, text: str) -> None:
    print(printable(text), file=out)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def handle(args: argparse.Namespace, db: str, out: TextIO) -> int:
    """``runs list|show|resume`` over a durable database; the exit status (errors raise)."""
    with quiet_engine():
        if args.runs_command == "list":
            return _list(db, out, as_json=getattr(args, "json", False))
        if args.runs_command == "show":
            return _show(db, args.run_id, args.json, out)
        return _decide(db, args.run_id, args.decisions, out)


def _list(db: str, out: TextIO, *, as_json: bool = False) -> int:
    runs = list_durable(db)
    if as_json:
        _say(out, json.dumps([attrs.asdict(r) for r in runs], indent=2, ensure_ascii=False))
        return 0
    if not runs:
        _say(out, f"No durable runs in {db}.")
        return 0
    rows = [("RUN ID", "STATUS", "AGENT", "QUEUE", "WORKER", "UPDATED")]
    rows += [
        (r.run_id, r.status, r.agent or "-", r.queue or "-", r.executor or "-", _when(r.updated))
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        _say(out, "  ".join([*cells, row[5]]).rstrip())
    return 0


def _show(db: str, run_id: str, as_json: bool, out: TextIO) -> int:
    record, result, waiting = show_run(db, run_id)
    if as_json:
        doc: dict[str, Any] = {
            "run_id": record.run_id,
            "status": record.status,
            "agent": record.agent,
            "queue": record.queue,
            "executor": record.executor,
        }
        if record.reason is not None:
            doc["reason"] = record.reason
        if waiting is not None:
            doc["waiting"] = dict(waiting)
        if result is not None:
            doc["ends"] = list(result.ends)
            doc["traces"] = [dump_trace(t) for t in result.traces]
        _say(out, json.dumps(doc, indent=2, ensure_ascii=False, default=str))
        return 0
    _say(
        out,
        f"run {record.run_id}: {record.status} (agent {record.agent}, queue {record.queue}, "
        f"worker {record.executor or '-'}, updated {_when(record.updated)})",
    )
    if record.reason is not None:
        _say(out, f"{record.status}: {record.reason}")
    if waiting is not None:
        requests = [r for r in waiting.get("action_requests") or () if isinstance(r, Mapping)]
        names = ", ".join(str(r.get("tool_name")) for r in requests) or "its interrupt"
        # Bound to what is shown: each decision carries its request's digest.
        example = json.dumps(
            [{"type": "approve", "digest": request_digest(r)} for r in requests]
            or [{"type": "approve"}]
        )
        _say(
            out,
            f"waiting for a decision on {names}; answer with: agentfsm runs resume "
            f"{record.run_id} --db {db} --decisions '{example}'",
        )
    if result is None:
        return 0
    for number, (trace, end) in enumerate(zip(result.traces, result.ends, strict=False), 1):
        _say(out, f"segment {number} ({end}): {trace.path}")
    state = result.state
    if state.error is not None:
        _say(out, f"error: {state.error}")
    _say(out, "messages:")
    for message in state.messages:
        _say(out, message_line(message))
    return 0


class _UsageError(ValueError):
    """A mistake on the command line (the runs command says it in one line, exit 2)."""


def _decide(db: str, run_id: str, decisions_text: str | None, out: TextIO) -> int:
    if decisions_text is None:
        raise _UsageError(
            f"run {run_id} is durable: its worker goes on by itself; "
            "--decisions answers its approval requests"
        )
    try:
        decisions: Sequence[Mapping[str, Any]] = json.loads(decisions_text)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--decisions is not JSON: {exc}") from exc
    if not isinstance(decisions, list):
        raise _UsageError("--decisions takes a JSON list, one decision per approval request")
    with open_engine(db) as engine:
        engine.decide(run_id, decisions)
    _say(out, f"run {run_id}: decisions sent; its worker goes on")
    return 0
