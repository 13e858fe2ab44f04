"""``agentfsm runs list|show|resume``: the saved runs of a store, from the command line.

``resume`` needs the agent the run was made with (its model and tools are code,
not data): the demo agent by default, or any ``--agent module:attribute`` that
is an :class:`~agentfsm.agent.Agent` or a function returning one.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from .agent import Agent
from .messages import Message
from .serialization import FormatError, UnknownToolError, dump_trace
from .store import (
    ResumeError,
    RunNotFoundError,
    SavedRun,
    SQLiteStore,
    load_run,
)
from .trace import Transition

__all__ = ["DEFAULT_AGENT", "DEFAULT_DB", "add_parser", "handle", "load_agent"]

#: The store used when ``--db`` is not given (the environment's AGENTFSM_DB wins).
DEFAULT_DB = "agentfsm.db"
#: The agent ``resume`` uses when ``--agent`` is not given.
DEFAULT_AGENT = "agentfsm._demo:demo_agent"


class _UsageError(Exception):
    """A mistake on the command line: said on stderr, exit status 2."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``runs`` command to ``subparsers`` (from ``parser.add_subparsers()``).

    The parsed namespace carries ``handler=handle``: call ``args.handler(args)``.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        metavar="PATH",
        default=os.environ.get("AGENTFSM_DB", DEFAULT_DB),
        help=f"the SQLite store (default: $AGENTFSM_DB or {DEFAULT_DB})",
    )
    runs: argparse.ArgumentParser = subparsers.add_parser(
        "runs",
        help="list, show and resume saved runs",
        description="The runs saved in a store: list them, show one, resume one.",
    )
    runs.set_defaults(handler=handle)
    commands = runs.add_subparsers(dest="runs_command", metavar="{list,show,resume}")
    commands.required = True
    commands.add_parser("list", parents=[common], help="every saved run, newest first")
    show = commands.add_parser("show", parents=[common], help="one run: status, path, messages")
    show.add_argument("run_id", metavar="RUN_ID")
    show.add_argument("--json", action="store_true", help="the run and its traces as JSON")
    resume = commands.add_parser(
        "resume", parents=[common], help="continue a run from its last checkpoint"
    )
    resume.add_argument("run_id", metavar="RUN_ID")
    resume.add_argument(
        "--agent",
        metavar="MODULE:ATTRIBUTE",
        default=DEFAULT_AGENT,
        help="the agent to resume with: an Agent or a function returning one "
        f"(default: the demo agent, {DEFAULT_AGENT})",
    )
    resume.add_argument(
        "--decisions",
        metavar="JSON",
        help='for an interrupted run: the decisions, e.g. \'[{"type": "approve"}]\'',
    )
    return runs


def handle(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the parsed ``runs`` command; the exit status."""
    out = out or sys.stdout
    try:
        if args.runs_command == "list":
            return _list(_open(args.db), out)
        if args.runs_command == "show":
            return _show(_open(args.db), args.run_id, args.json, out)
        return _resume(_open(args.db), args.run_id, args.agent, args.decisions, out)
    except (_UsageError, RunNotFoundError, ResumeError, FormatError, UnknownToolError) as exc:
        print(f"agentfsm runs: {exc}", file=sys.stderr)
        return 2


def _open(path: str) -> SQLiteStore:
    if not os.path.exists(path):
        raise _UsageError(f"no store at {path!r} (pass --db PATH or set AGENTFSM_DB)")
    return SQLiteStore(path)


def load_agent(spec: str) -> Agent:
    """The agent named by ``module:attribute``: an Agent, or a function returning one."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise _UsageError(f"--agent takes MODULE:ATTRIBUTE, got {spec!r}")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise _UsageError(f"cannot import {module_name!r} for --agent: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise _UsageError(f"{module_name!r} has no attribute {attribute!r} for --agent")
        value = getattr(value, part)
    if not isinstance(value, Agent) and callable(value):
        value = value()
    if not isinstance(value, Agent):
        raise _UsageError(f"--agent {spec} is a {type(value).__name__}, not an Agent")
    return value


# ---------------------------------------------------------------- views


def _when(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str | None, width: int = 60) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _list(store: SQLiteStore, out: TextIO) -> int:
    runs = store.runs()
    if not runs:
        print(f"No saved runs in {store.path}.", file=out)
        return 0
    rows = [("RUN ID", "STATUS", "STATE", "STEPS", "UPDATED", "SUMMARY")]
    rows += [
        (r.run_id, r.status, r.state, str(r.steps), _when(r.updated), _short(r.summary))
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[5]]).rstrip(), file=out)
    return 0


def _transition_line(index: int, t: Transition) -> str:
    detail = f"  {json.dumps(t.detail, default=str)}" if t.detail else ""
    return f"  {index:>3}  {t.source} --{t.trigger}--> {t.dest}  {t.elapsed * 1e3:.1f} ms{detail}"


def _message_line(message: Message) -> str:
    if message.tool_results:
        body = "; ".join(
            f"{r.name}{' (error)' if r.is_error else ''}: {_short(r.text, 50)}"
            for r in message.tool_results
        )
    elif message.tool_calls:
        calls = ", ".join(f"{c.name}({json.dumps(dict(c.arguments))})" for c in message.tool_calls)
        body = _short((message.text + " " if message.text else "") + "calls " + calls, 90)
    else:
        body = _short(message.text, 90)
    return f"  {message.role:>9}: {body}"


def _show(store: SQLiteStore, run_id: str, as_json: bool, out: TextIO) -> int:
    saved = load_run(store, run_id, strict=False)
    if as_json:
        doc = {
            "run_id": saved.run_id,
            "status": saved.status,
            "state": saved.state,
            "options": dict(saved.options),
            "traces": [dump_trace(t) for t in saved.traces],
        }
        print(json.dumps(doc, indent=2, ensure_ascii=False), file=out)
        return 0
    print(
        f"run {saved.run_id}: {saved.status} at {saved.state}, {saved.steps} steps, "
        f"{len(saved.traces)} segment(s)",
        file=out,
    )
    if saved.options:
        print(f"options: {json.dumps(dict(saved.options))}", file=out)
    summary = _summary(saved)
    if summary:
        print(summary, file=out)
    for number, trace in enumerate(saved.traces):
        print(f"segment {number} (entered at {trace.entry}):", file=out)
        for index, transition in enumerate(trace):
            print(_transition_line(index, transition), file=out)
    print("messages:", file=out)
    for message in saved.chain.messages:
        print(_message_line(message), file=out)
    return 0


def _summary(saved: SavedRun) -> str | None:
    state = saved.agent_state
    if state is not None and state.error is not None:
        return f"error: {state.error}"
    if state is not None and state.pause_reason is not None:
        return f"paused: {state.pause_reason}"
    if state is not None and state.interrupt_data:
        return f"interrupted: {json.dumps(dict(state.interrupt_data), default=str)}"
    return None


def _decisions(text: str | None) -> Sequence[Mapping[str, Any]] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--decisions is not JSON: {exc}") from exc
    if not isinstance(value, list):
        raise _UsageError("--decisions takes a JSON list, one decision per approval request")
    return value


def _resume(
    store: SQLiteStore, run_id: str, agent_spec: str, decisions_text: str | None, out: TextIO
) -> int:
    agent = load_agent(agent_spec)
    decisions = _decisions(decisions_text)
    before = load_run(store, run_id, strict=False)
    resuming = f"resuming run {run_id} ({before.status} at {before.state})"
    try:
        print(resuming, file=out)
        state = agent.resume_run_sync(run_id, store, decisions)
    except ValueError as exc:  # decisions that do not fit the interrupt
        if isinstance(exc, ResumeError | FormatError):
            raise
        raise _UsageError(str(exc)) from exc
    after = load_run(store, run_id, strict=False)
    trace = after.trace
    start = len(before.trace) if len(after.traces) == len(before.traces) else 0
    if len(after.traces) > len(before.traces):
        print(f"segment {len(after.traces) - 1} (entered at {trace.entry}):", file=out)
    for index, transition in enumerate(trace.transitions[start:], start):
        print(_transition_line(index, transition), file=out)
    print(f"run {run_id}: {state.status} at {after.state}", file=out)
    if state.error is not None:
        print(f"error: {state.error}", file=out)
    elif state.pause_reason is not None:
        print(f"paused: {state.pause_reason}", file=out)
    elif state.status == "interrupted":
        print(
            "interrupted: resume it with --decisions "
            + json.dumps(dict(state.interrupt_data or {}), default=str),
            file=out,
        )
    elif state.messages:
        print(f"answer: {_short(state.messages[-1].text, 200)}", file=out)
    return 1 if state.status == "error" else 0
