"""``agentfsm runs list|show|resume|fork|compare``: the saved runs of a store, from the
command line.

``resume`` needs the agent the run was made with (its model and tools are code,
not data): the demo agent by default, or any ``--agent module:attribute`` that
is an :class:`~agentfsm.agent.Agent` or a function returning one, importable
from the current folder (which goes on ``sys.path`` for ``--agent`` only, after
the installed packages, so a file there never stands in for one of them).
Every failure ends in one line on stderr and exit status 2. ``list`` and
``show`` open the store read-only: they never change the file, and one that is
not an agentfsm store is refused.
Everything printed from the store goes through :func:`~agentfsm._printable.printable`.

``--db`` is a path (SQLite) or a URL (``sqlite:///FILE``, ``postgresql://...``);
one that names a durable engine's database (DBOS) or a Temporal server
(``temporal://HOST:PORT/NAMESPACE``) lists and shows its runs, and
``resume --decisions`` answers a durable run's approval requests.

One idea: the ``runs`` subcommands. They share how a store is opened (SQLite, Postgres
or a durable database), how a run is found and how it is shown.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs

from .._agent import Agent
from .._agent_spec import DEFAULT_AGENT, UsageError, load_agent
from .._db_url import check_db, temporal_target
from .._durable_readers import is_durable
from .._errors import (
    AgentfsmError,
    MachineChangedError,
    ResumeError,
    RunExistsError,
    RunInUseError,
    RunNotFoundError,
    StoreError,
)
from .._machine import UnknownMachineError
from .._middleware.human_in_the_loop import request_digest
from .._printable import message_line, printable, short
from .._resumable import (
    DEFAULT_DB,
    agent_flag,
    check_resumable,
    db_flag,
    default_db,
    recorded_command,
    resume_hint,
)
from .._serialization import FormatError, UnknownToolError, dump_trace
from .._trace import Transition
from ..store import SavedRun, SQLiteStore, fork_run, load_run
from . import _versions as _versions_cli

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_DB",
    "UsageError",
    "add_db_option",
    "add_parser",
    "agent_to_resume",
    "db_flag",
    "default_db",
    "durable_failures",
    "given_db",
    "handle",
    "load_agent",
    "open_store",
    "resume_hint",
]


def given_db(db: str | None) -> str:
    """The database ``--db`` names (None: the default store); UsageError, naming the flag,
    for an empty one or a URL of a database agentfsm does not run on."""
    if db is None:
        return default_db()
    try:
        return check_db(db, flag="--db", temporal=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def add_db_option(parser: argparse.ArgumentParser) -> None:
    """The ``--db PATH`` option every command that reads or writes a store takes."""
    parser.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help=f"the SQLite store (default: $AGENTFSM_DB or {DEFAULT_DB})",
    )


def _say(out: TextIO, text: str) -> None:
    print(printable(text), file=out)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``runs`` command to ``subparsers`` (from ``parser.add_subparsers()``).

    The parsed namespace carries ``handler=handle``: call ``args.handler(args)``.
    """
    common = argparse.ArgumentParser(add_help=False)
    add_db_option(common)
    runs: argparse.ArgumentParser = subparsers.add_parser(
        "runs",
        help="list, show and resume saved runs",
        description="The runs saved in a store: list them, show one, resume one. --db is a "
        "path (SQLite) or a URL; a durable engine's database (sqlite:///FILE or a path the "
        "worker made, postgresql://...) shows its durable runs.",
    )
    runs.set_defaults(handler=handle)
    commands = runs.add_subparsers(
        dest="runs_command", metavar="{list,show,resume,fork,compare,export,migrate,replay}"
    )
    commands.required = True
    listing = commands.add_parser(
        "list",
        parents=[common],
        help="every saved run, newest first",
        description="Every run saved in the store, newest first: its id, status, the state it "
        "rests at, its steps, when it last changed and a one-line summary.",
    )
    listing.add_argument("--json", action="store_true", help="the runs as a JSON list")
    show = commands.add_parser(
        "show",
        parents=[common],
        help="one run: status, path, messages",
        description="One saved run: its status, each segment's transitions (steps and "
        "segments count from 1), its messages, and for a run waiting on approval the "
        "requests with the digests a decision carries.",
    )
    show.add_argument("run_id", metavar="RUN_ID", help="the run's id (agentfsm runs list)")
    show.add_argument("--json", action="store_true", help="the run and its traces as JSON")
    # the command starts fast: only this subcommand loads it
    from ._machines_option import add_machines_option

    add_machines_option(show)
    resume = commands.add_parser(
        "resume",
        parents=[common],
        help="continue a run from its last checkpoint",
        description="Continue a saved run: one that stopped (a crash, a pause) goes on from "
        "its last checkpoint; one waiting on approval takes --decisions (each bound to its "
        "request's digest, as 'agentfsm runs show' prints them) and goes on from the state "
        "that asked.",
    )
    resume.add_argument("run_id", metavar="RUN_ID", help="the run's id (agentfsm runs list)")
    resume.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        default=None,
        help="the agent to resume with: an Agent or a function returning one (default: the "
        "one 'agentfsm run' started the run with, else the demo agent, "
        f"{DEFAULT_AGENT})",
    )
    resume.add_argument(
        "--policy",
        choices=["compatible", "pinned"],
        default=None,
        help="for a run saved on another version of its machine: go on on the agent's "
        "version where nothing the run depends on changed (compatible), or on the version it "
        "was saved on (pinned); a mapping between versions is 'agentfsm runs migrate'",
    )
    resume.add_argument(
        "--decisions",
        metavar="JSON",
        help="for a run waiting on approval: the decisions as JSON, one per request, e.g. "
        '\'[{"type": "approve", "digest": "sha256:..."}]\'',
    )
    fork = commands.add_parser(
        "fork",
        parents=[common],
        help="a new run that goes on from one step of a saved run",
        description="Save a new run whose past is RUN_ID's up to STEP (numbered as the run "
        "page numbers steps: 1 is the first transition). It rests where that step went; "
        "'agentfsm runs resume NEW_ID' goes on from there. A step into a terminal (ok, "
        "error, paused, interrupted) cannot be forked from.",
    )
    fork.add_argument("run_id", metavar="RUN_ID", help="the run to fork")
    fork.add_argument(
        "step", metavar="STEP", type=int, help="the step to go on from (1 is the first)"
    )
    fork.add_argument("--id", dest="new_id", metavar="NEW_ID", help="the new run's id")
    add_machines_option(fork)
    compare = commands.add_parser(
        "compare",
        parents=[common],
        help="two runs' paths side by side, and where they part",
        description="Two saved runs' steps side by side (a fork and the run it came from, "
        "say), and the first step where they part.",
    )
    compare.add_argument("run_a", metavar="RUN_A", help="the first run's id")
    compare.add_argument("run_b", metavar="RUN_B", help="the second run's id")
    compare.add_argument(
        "--json", action="store_true", help="both runs, each step's pair and where they part"
    )
    add_machines_option(compare)
    export = commands.add_parser(
        "export",
        parents=[common],
        help="a saved run as a cassette and a regression test",
        description="Write a saved run's model calls as a cassette, and with --test a pytest "
        "file that replays them through your agent and asserts every segment's path.",
    )
    export.add_argument("run_id", metavar="RUN_ID", help="the run to export")
    export.add_argument(
        "--cassette", metavar="FILE", required=True, help="where to write its model calls"
    )
    export.add_argument(
        "--test",
        metavar="FILE",
        help="also write a pytest file that replays the cassette and asserts the run's path",
    )
    export.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="for --test: a function of the model that returns the agent to replay through",
    )
    add_machines_option(export)
    _versions_cli.add_runs_commands(commands)  # migrate, replay: their own handlers
    return runs


def handle(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the parsed ``runs`` command; the exit status."""
    out = out or sys.stdout
    try:
        db = given_db(args.db)
    except UsageError as exc:
        _say(sys.stderr, f"agentfsm runs: {exc}")
        return 2
    if _is_durable(db):
        if args.runs_command in ("fork", "compare"):
            _say(
                sys.stderr,
                f"agentfsm runs: {args.runs_command} reads an agentfsm store; "
                f"{db} is a durable engine's database",
            )
            return 2
        return _durable_runs(args, db, out)
    db = _sqlite_path(db)
    try:
        if args.runs_command == "list":
            return _list(open_store(db), out, as_json=args.json)
        if args.runs_command == "show":
            # the command starts fast: only this subcommand loads it
            from ._machines_option import import_machines

            import_machines(args.machines)
            return _show(db, args.run_id, args.json, out)
        if args.runs_command == "export":
            # the command starts fast: only this subcommand loads it
            from ._machines_option import import_machines

            import_machines(args.machines)
            return _export(db, args.run_id, args.cassette, args.test, args.agent, out)
        if args.runs_command in ("fork", "compare"):
            # the command starts fast: only this subcommand loads it
            from ._machines_option import import_machines

            import_machines(args.machines)
            if args.runs_command == "fork":
                return _fork(db, args.run_id, args.step, args.new_id, out)
            return _compare(db, args.run_a, args.run_b, out, as_json=args.json)
        return _resume(db, args.run_id, args.agent, args.decisions, out, args.policy)
    except (
        UsageError,
        ValueError,
        RunNotFoundError,
        ResumeError,
        RunExistsError,
        RunInUseError,
        StoreError,
        FormatError,
        UnknownToolError,
        UnknownMachineError,
    ) as exc:
        _say(sys.stderr, f"agentfsm runs: {_one_line(exc)}")
        return 2
    except MachineChangedError as exc:  # a run of another version of its machine
        _say(sys.stderr, f"agentfsm runs: {exc}")
        return 2
    except RecursionError:
        run_id = getattr(args, "run_id", "")
        _say(sys.stderr, f"agentfsm runs: run {run_id} is nested too deeply to show")
        return 2


def _export(
    db: str, run_id: str, cassette: str, test: str | None, agent: str | None, out: TextIO
) -> int:
    """Write a saved run's model calls as a cassette, and a test that replays it."""
    # the command starts fast: only this subcommand loads it
    from ..testing import cassette_from_traces, regression_test

    if test is not None and agent is None:
        raise UsageError("--test needs --agent MODULE:ATTR, the agent to replay through")
    # the command starts fast: only this subcommand loads it
    from .._resume import execute_options

    saved = load_run(open_store(db), run_id, strict=False)
    text = None
    if test is not None and agent is not None:  # before writing anything: it may refuse
        options = execute_options(saved.options)
        text = regression_test(saved.traces, cassette, agent=agent, test=test, options=options)
    calls = cassette_from_traces(saved.traces, cassette)
    _say(out, f"wrote {calls} model call(s) of run {run_id} to {cassette}")
    if test is not None and text is not None:
        Path(test).parent.mkdir(parents=True, exist_ok=True)
        Path(test).write_text(text, "utf-8")
        paths = "; ".join(t.path for t in saved.traces)
        segments = f"{len(saved.traces)} segments' paths" if len(saved.traces) > 1 else "the path"
        _say(out, f"wrote {test}: it replays {cassette} and asserts {segments} {paths}")
    return 0


def _fork(db: str, run_id: str, step: int, new_id: str | None, out: TextIO) -> int:
    """Save the fork, then say where it rests and how to go on."""
    store = open_store(db, read_only=False)
    try:
        fork_id = fork_run(store, run_id, step, new_id=new_id)
        saved = load_run(store, fork_id, strict=False)
        command = recorded_command(store, fork_id)
    finally:
        store.close()
    _say(out, f"run {fork_id}: forked from {run_id} at step {step}, at {saved.state}")
    flags = f"{db_flag(db)}{agent_flag(command)}"
    _say(out, f"go on with: agentfsm runs resume {shlex.quote(fork_id)}{flags}")
    return 0


def _compare(db: str, run_a: str, run_b: str, out: TextIO, *, as_json: bool = False) -> int:
    """Both runs' paths, step by step, and the first step where they part."""
    # the command starts fast: only this subcommand loads it
    from .._compare import compare_runs

    store = open_store(db)
    try:
        comparison = compare_runs(
            load_run(store, run_a, strict=False), load_run(store, run_b, strict=False)
        )
    finally:
        store.close()
    if as_json:
        _say(out, json.dumps(comparison.as_json(), indent=2, ensure_ascii=False))
        return 0
    for line in comparison.lines():
        _say(out, line)
    return 0


# ---------------------------------------------------------------- durable databases


def _sqlite_path(db: str) -> str:
    """The file a ``sqlite:///FILE`` URL names, or ``db`` itself."""
    return db[len("sqlite:///") :] if db.startswith("sqlite:///") else db


def _is_durable(db: str) -> bool:
    """Whether ``--db`` names a durable engine's (DBOS) database or a Temporal server, not
    an agentfsm store."""
    return is_durable(db)


def _durable_runs(args: argparse.Namespace, db: str, out: TextIO) -> int:
    """``runs`` over a durable database (agentfsm.durable reads it): one line and exit 2
    for any failure, the database's own included."""
    try:
        failures = durable_failures(db)
        # the command starts fast: only this subcommand loads it
        from ._durable import handle as durable_handle
    except ImportError as exc:
        _say(sys.stderr, f"agentfsm runs: {db} is a durable database: {exc}")
        return 2
    try:
        return durable_handle(args, db, out)
    except (AgentfsmError, ValueError) as exc:
        _say(sys.stderr, f"agentfsm runs: {_one_line(exc)}")
        return 2
    except failures as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines() or [repr(exc)]
        _say(sys.stderr, f"agentfsm runs: {db}: the database cannot be used: {reason[0]}")
        return 2


def durable_failures(db: str) -> tuple[type[BaseException], ...]:
    """What the engine reading ``db`` raises when its database or server cannot be used,
    OSError included (ImportError when its extra is not installed)."""
    if temporal_target(db) is not None:
        # the temporal extra: only a Temporal server needs it
        from temporalio.service import RPCError

        return (RPCError, OSError)
    # the dbos extra: only a durable database needs it
    from sqlalchemy.exc import SQLAlchemyError

    return (SQLAlchemyError, OSError)


def _one_line(exc: Exception) -> str:
    """An error's message on one line, whatever text it quotes."""
    return " ".join(str(exc).split()) or type(exc).__name__


def open_store(path: str, *, read_only: bool = True) -> SQLiteStore:
    """The store at ``path``, read-only unless asked; a clear error when there is none.

    Opening it for writing checks it read-only first, so a file that is not an
    agentfsm store is refused before anything is written to it.
    """
    if not os.path.exists(path):
        raise UsageError(f"no store at {path!r} (pass --db PATH or set AGENTFSM_DB)")
    if os.path.isdir(path):
        raise UsageError(f"--db {path!r} is a directory, not a store")
    store = SQLiteStore(path, read_only=True)
    if read_only:
        return store
    store.close()
    return SQLiteStore(path)


# ---------------------------------------------------------------- views


def _when(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _list(store: SQLiteStore, out: TextIO, *, as_json: bool = False) -> int:
    runs = store.runs()
    if as_json:
        _say(out, json.dumps([attrs.asdict(r) for r in runs], indent=2, ensure_ascii=False))
        return 0
    if not runs:
        _say(out, f"No saved runs in {store.path}.")
        return 0
    rows = [("RUN ID", "STATUS", "STATE", "STEPS", "UPDATED", "SUMMARY")]
    rows += [
        (
            printable(r.run_id),
            printable(r.status),
            printable(r.state),
            str(r.steps),
            _when(r.updated),
            short(printable(r.summary or "")),
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        _say(out, "  ".join([*cells, row[5]]).rstrip())
    return 0


def _transition_line(index: int, t: Transition) -> str:
    detail = f"  {json.dumps(t.detail, default=str)}" if t.detail else ""
    return f"  {index:>3}  {t.source} --{t.trigger}--> {t.dest}  {t.elapsed * 1e3:.1f} ms{detail}"


def _show(db: str, run_id: str, as_json: bool, out: TextIO) -> int:
    store = open_store(db)
    saved = load_run(store, run_id, strict=False)
    command = recorded_command(store, run_id)
    if as_json:
        doc = {
            "run_id": saved.run_id,
            "status": saved.status,
            "state": saved.state,
            "options": dict(saved.options),
            "command": command or None,
            "traces": [dump_trace(t) for t in saved.traces],
        }
        if saved.forked_from is not None:
            doc["forked_from"] = {"run_id": saved.forked_from[0], "step": saved.forked_from[1]}
        requests = _action_requests(saved)
        if requests:
            doc["action_requests"] = requests
        _say(out, json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    _say(
        out,
        f"run {saved.run_id}: {saved.status} at {saved.state}, {saved.steps} steps, "
        f"{len(saved.traces)} segment(s)",
    )
    if saved.forked_from is not None:
        _say(out, f"forked from {saved.forked_from[0]} at step {saved.forked_from[1]}")
    if saved.options:
        _say(out, f"options: {json.dumps(dict(saved.options))}")
    summary = _summary(saved, db, command)
    if summary:
        _say(out, summary)
    for line in _requests(saved):
        _say(out, line)
    step = 0  # steps and segments count from 1, as the run page, the studio and fork count
    for number, trace in enumerate(saved.traces, 1):
        _say(out, f"segment {number} (entered at {trace.entry}{_versions_cli.on(trace)}):")
        for transition in trace:
            step += 1  # numbered as the run page and `runs fork` number them
            _say(out, _transition_line(step, transition))
    _say(out, "messages:")
    for message in saved.chain.messages:
        _say(out, message_line(message))
    return 0


def _summary(saved: SavedRun, db: str, command: Mapping[str, Any]) -> str | None:
    state = saved.agent_state
    if state is not None and state.error is not None:
        return f"error: {state.error}"
    go_on = f"agentfsm runs resume {shlex.quote(saved.run_id)}{db_flag(db)}{agent_flag(command)}"
    if state is not None and state.pause_reason is not None:
        return f"paused: {state.pause_reason}; go on with: {go_on}"
    if state is not None and state.interrupt_data:
        return "interrupted: " + resume_hint(saved.run_id, state.interrupt_data, db, command)
    if saved.status == "running":
        return f"stopped at {saved.state} (its process ended or still runs); go on with: {go_on}"
    return None


def _action_requests(saved: SavedRun) -> list[dict[str, Any]]:
    """An interrupted run's action requests, each with the digest a decision may carry
    (``{"type": "approve", "digest": ...}``) to approve exactly what is shown here."""
    state = saved.agent_state
    data = state.interrupt_data if state is not None else None
    requests = (data or {}).get("action_requests")
    if not isinstance(requests, list | tuple):
        return []
    return [
        {**request, "digest": request_digest(request)}
        for request in requests
        if isinstance(request, Mapping)
    ]


def _requests(saved: SavedRun) -> list[str]:
    """The action requests as lines, with their digests."""
    return [
        f"request {index}: {request.get('tool_name')}"
        f"({json.dumps(request.get('arguments'), default=repr)}) "
        f"call {request.get('tool_call_id')} digest {request['digest']}"
        for index, request in enumerate(_action_requests(saved))
    ]


def _decisions(text: str | None) -> Sequence[Mapping[str, Any]] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--decisions is not JSON: {exc}") from exc
    if not isinstance(value, list):
        raise UsageError("--decisions takes a JSON list, one decision per approval request")
    return value


def agent_to_resume(spec: str | None, command: Mapping[str, Any]) -> tuple[Agent, str]:
    """The agent a run resumes with, and how refusals name it: ``--agent`` when given, else
    ``agentfsm run --provider``'s own small agent on the model the run recorded, else the
    demo agent. A run started with ``--agent`` is refused with the flag to add: a saved
    file is data, and a module it names is imported only when the user names it too."""
    if spec is not None:
        return load_agent(spec), spec
    recorded = command.get("agent")
    if isinstance(recorded, str):  # a saved run names code; loading it is the user's call
        raise UsageError(
            f"the run was started with --agent {recorded}, which a saved run names but does "
            f"not load: add{agent_flag(command)}"
        )
    if "provider" in command:
        # the command starts fast: only a run of `agentfsm run --provider` needs it
        from .._demo import calculator_agent

        # the command starts fast: only a run of `agentfsm run --provider` needs it
        from ..providers import create_model

        provider, model = command["provider"], command["model"]
        try:
            chat = create_model(provider, model, base_url=command.get("base_url"))
        except (ValueError, AgentfsmError) as exc:
            raise UsageError(f"the run's model ({provider} {model}): {exc}") from None
        agent = calculator_agent(chat, max_runs=command["max_runs"])
        return agent, f"agentfsm run --provider {provider} --model {model}"
    return load_agent(DEFAULT_AGENT, from_cwd=False), DEFAULT_AGENT


def _resume(
    db: str,
    run_id: str,
    agent_spec: str | None,
    decisions_text: str | None,
    out: TextIO,
    policy: str | None = None,
) -> int:
    decisions = _decisions(decisions_text)
    # An --agent given is loaded first: a bad one is said before anything is read.
    chosen = agent_to_resume(agent_spec, {}) if agent_spec is not None else None
    store = open_store(db, read_only=False)
    command = recorded_command(store, run_id)
    given = {"agent": agent_spec} if agent_spec is not None else command
    agent, agent_spec = chosen or agent_to_resume(None, command)
    before = load_run(store, run_id, strict=False)
    check_resumable(before, decisions, agent, agent_spec, db, command)
    _say(out, f"resuming run {run_id} ({before.status} at {before.state})")
    # the command starts fast: only this subcommand loads it
    from .._tools import SYNC_TOOLS_IN_THREADS

    # the command starts fast: only this subcommand loads it
    from .._versions import compatible, pinned, resuming

    # Sync tools in threads of their own: Ctrl-C stops the run even inside one.
    threads = SYNC_TOOLS_IN_THREADS.set(True)
    try:
        if policy is None:
            agent.resume_run_sync(run_id, store, decisions)
        else:
            with resuming(compatible if policy == "compatible" else pinned):
                agent.resume_run_sync(run_id, store, decisions)
    except KeyboardInterrupt:
        again = f"agentfsm runs resume {shlex.quote(run_id)}{db_flag(db)}{agent_flag(given)}"
        try:
            where = load_run(store, run_id, strict=False).state
        except Exception:  # unreadable now: the command going on says so itself
            where = "its last checkpoint"
        _say(
            sys.stderr,
            f"agentfsm runs: interrupted; run {run_id} is saved at {where}; go on with: {again}",
        )
        return 130
    except MachineChangedError as exc:
        if policy is None:
            hint = (
                f"From the shell: agentfsm runs resume {shlex.quote(run_id)}{db_flag(db)} "
                f"{agent_flag(given)} --policy compatible (or pinned)"
            )
        else:
            hint = (
                f"--policy {policy} does not allow it: map its states onto the new version "
                "with 'agentfsm runs migrate --policy mapped' (docs: Changing a machine)"
            )
        raise UsageError(f"{exc} {hint}") from exc
    except ValueError as exc:  # decisions that do not fit the interrupt
        if isinstance(exc, ResumeError | FormatError):
            raise
        raise UsageError(str(exc)) from exc
    finally:
        SYNC_TOOLS_IN_THREADS.reset(threads)
    after = load_run(store, run_id, strict=False)
    state = after.agent_state
    trace = after.trace
    start = len(before.trace) if len(after.traces) == len(before.traces) else 0
    if len(after.traces) > len(before.traces):
        _say(out, f"segment {len(after.traces)} (entered at {trace.entry}):")
    prior = sum(len(t) for t in after.traces[:-1])  # steps count from 1 over every segment
    for index, transition in enumerate(trace.transitions[start:], prior + start + 1):
        _say(out, _transition_line(index, transition))
    _say(out, f"run {run_id}: {after.status} at {after.state}")
    if state is None:
        return 0
    if state.error is not None:
        _say(out, f"error: {state.error}")
    elif state.pause_reason is not None:
        go_on = f"agentfsm runs resume {shlex.quote(run_id)}{db_flag(db)}{agent_flag(command)}"
        _say(out, f"paused: {state.pause_reason}; go on with: {go_on}")
    elif state.status == "interrupted":
        _say(out, "interrupted: " + resume_hint(run_id, state.interrupt_data, db, command))
    elif state.messages:
        _say(out, f"answer: {short(state.messages[-1].text, 200)}")
    return 1 if state.status == "error" else 0
