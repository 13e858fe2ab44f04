"""``agentfsm worker``: run queued runs of one agent until told to stop.

SIGTERM (or SIGINT) drains the worker: each active run pauses at its next state
boundary with reason ``"draining"`` and goes back to the queue, and the process
exits; another worker finishes those runs without running a recorded tool again.

The worker serves the agent's own queue (or ``--queue``), so workers of other
agents on one database never take its runs. It logs each run's start and end to
stderr (``--log-format json`` for JSON lines), writes ``--ready-file`` once it
takes runs, and says any failure to start in one line with exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from ._values import positive

__all__ = ["add_parser", "handle", "stop_on_signals"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``worker`` command; the namespace carries ``handler=handle``."""
    worker: argparse.ArgumentParser = subparsers.add_parser(
        "worker",
        help="run queued runs of an agent (durable, on DBOS)",
        description="Run the queued runs of an agent on a durable engine until SIGTERM, "
        "which drains the worker: its runs pause at their next state boundary and go back "
        "to the queue for another worker. Submit runs with agentfsm.durable.Engine.submit(..., "
        "agent=NAME).",
    )
    worker.add_argument(
        "--engine",
        choices=["dbos", "temporal"],
        default="dbos",
        help="the engine (dbos; temporal: --address)",
    )
    worker.add_argument(
        "--db",
        metavar="PATH",
        help="a file path (SQLite, one machine) or a URL: postgresql://... (many machines), "
        "sqlite:///FILE",
    )
    worker.add_argument(
        "agent", metavar="MODULE:ATTR", help="an Agent, or a function returning one"
    )
    worker.add_argument(
        "--name", metavar="NAME", help="the name runs are submitted under (default: MODULE:ATTR)"
    )
    worker.add_argument(
        "--queue",
        metavar="QUEUE",
        help="serve this queue (submit with Engine(db, queue=QUEUE)); default: the agent's "
        "own, agentfsm:NAME",
    )
    worker.add_argument(
        "--log-format",
        choices=["rich", "json"],
        default="rich",
        help="each run's start and end: for people (rich) or as JSON lines (json)",
    )
    worker.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write this file (JSON: executor, pid, queues) once the worker takes runs; "
        "it is removed when the worker stops",
    )
    worker.add_argument(
        "--concurrency", type=positive, default=8, metavar="N", help="runs at once (default 8)"
    )
    worker.add_argument(
        "--executor-id",
        metavar="ID",
        help="this worker's stable name; started again under it, it finishes the runs it "
        "left (default: host and process id)",
    )
    worker.add_argument(
        "--recover",
        action="append",
        default=[],
        metavar="ID",
        help="hand the runs of a worker that will not come back to the queue (repeatable)",
    )
    worker.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="on SIGTERM, how long a model or tool call may take to finish (default 30)",
    )
    # --engine temporal (agentfsm.temporal._cli): the server, and how a run is recovered
    worker.add_argument("--address", metavar="HOST:PORT", help="temporal: the server")
    worker.add_argument("--namespace", default="default", help="temporal: the namespace")
    worker.add_argument(
        "--heartbeat",
        type=float,
        default=10.0,
        metavar="S",
        help="temporal: how soon a call on a lost worker runs again elsewhere (default 10)",
    )
    worker.add_argument(
        "--policy",
        choices=["pinned", "compatible"],
        default="pinned",
        help="temporal: a run recorded on another machine waits for its own (pinned) or replays",
    )
    worker.set_defaults(handler=handle)
    return worker


def handle(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the worker until SIGTERM or SIGINT; the exit status."""
    # the command starts fast: only a worker loads it
    from .._agent_spec import UsageError, load_agent

    # the command starts fast: only a worker loads it
    from .._db_url import check_db

    out = out or sys.stdout
    if args.engine == "temporal":
        from ._temporal import handle as temporal  # the temporal extra, only for it

        try:
            return temporal(args, load_agent(args.agent), stop_on_signals(), out)
        except UsageError as exc:
            print(f"agentfsm worker: {exc}", file=sys.stderr)
            return 2
    if args.db is None:
        print("agentfsm worker: the following arguments are required: --db", file=sys.stderr)
        return 2
    try:
        check_db(args.db, flag="--db")
    except ValueError as exc:
        print(f"agentfsm worker: {exc}", file=sys.stderr)
        return 2
    try:
        # the dbos extra: only a DBOS worker needs it
        from ..durable import Engine
    except ImportError as exc:
        print(f"agentfsm worker: {exc}", file=sys.stderr)
        return 2
    try:
        agent = load_agent(args.agent)
    except UsageError as exc:
        print(f"agentfsm worker: {exc}", file=sys.stderr)
        return 2
    stop = stop_on_signals()
    # the command starts fast: only a worker loads it
    from ._durable_log import log_line, quiet_engine, run_logger

    engine = Engine(args.db, queue=args.queue, concurrency=args.concurrency)
    engine.register(args.name or args.agent, agent)
    listener = run_logger(sys.stderr, args.log_format)  # logs: stdout says only start and stop
    try:
        with quiet_engine():
            engine.launch(executor_id=args.executor_id, recover=args.recover)
    except Exception as exc:
        engine.close()
        print(f"agentfsm worker: cannot start on {args.db}: {_one_line(exc)}", file=sys.stderr)
        return 2
    name = engine.executor_id
    listening = contextlib.ExitStack()
    listening.enter_context(engine.listening(listener))
    ready = Path(args.ready_file) if args.ready_file else None
    try:
        if ready is not None:
            data = {"executor": name, "pid": os.getpid(), "queues": engine.queues}
            partial = ready.with_name(ready.name + ".partial")
            partial.write_text(json.dumps(data) + "\n")
            partial.replace(ready)  # a probe never reads half a file
        if args.log_format == "json":
            log_line(out, "json", "running", executor=name, pid=os.getpid(), queues=engine.queues)
        else:
            print(
                f"agentfsm worker {name}: running {args.name or args.agent!r} "
                f"on {', '.join(engine.queues)} (pid {os.getpid()})",
                file=out,
                flush=True,
            )
        while not stop.wait(0.5):
            pass
        if ready is not None:
            ready.unlink(missing_ok=True)  # draining: no longer ready
        try:
            with quiet_engine():
                handed = engine.drain(args.drain_timeout)
        except Exception as exc:
            print(f"agentfsm worker {name}: drain failed: {_one_line(exc)}", file=sys.stderr)
            return 2
    finally:
        listening.close()
        if ready is not None:
            ready.unlink(missing_ok=True)
    waiting = engine.handed_waiting
    if args.log_format == "json":
        log_line(out, "json", "drained", executor=name, handed_back=handed, waiting=waiting)
    else:
        # a waiting run is handed back as it waits: no paused segment, its wait goes on
        said = (
            f" ({len(waiting)} of them waiting for decisions, handed back as they wait: "
            "the next worker takes their decisions)"
            if waiting
            else ""
        )
        print(
            f"agentfsm worker {name}: drained, {len(handed)} run(s) handed back to the queue{said}",
            file=out,
            flush=True,
        )
    return 0


def _one_line(exc: BaseException) -> str:
    """An error's first line, without the SQL a driver error quotes after it."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set: a worker drains and stops when it is set."""
    stop = threading.Event()

    def on_signal(signum: int, _: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
