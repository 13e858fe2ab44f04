"""``agentfsm worker``: run queued runs of one agent until told to stop.

SIGTERM (or SIGINT) drains the worker: each active run pauses at its next state
boundary with reason ``"draining"`` and goes back to the queue, and the process
exits; another worker finishes those runs without running a recorded tool again.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any, TextIO

__all__ = ["add_parser", "handle"]


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
    worker.add_argument("--engine", choices=["dbos"], default="dbos", help="the engine (dbos)")
    worker.add_argument(
        "--db",
        required=True,
        metavar="URL",
        help="postgresql://... (many machines) or sqlite:///FILE or a file path (one machine)",
    )
    worker.add_argument(
        "agent", metavar="MODULE:AGENT", help="an Agent, or a function returning one"
    )
    worker.add_argument(
        "--name", metavar="NAME", help="the name runs are submitted under (default: MODULE:AGENT)"
    )
    worker.add_argument(
        "--concurrency", type=int, default=8, metavar="N", help="runs at once (default 8)"
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
    worker.set_defaults(handler=handle)
    return worker


def handle(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the worker until SIGTERM or SIGINT; the exit status."""
    from ._runs_cli import UsageError, load_agent

    out = out or sys.stdout
    try:
        from .durable import Engine
    except ImportError as exc:
        print(f"agentfsm worker: {exc}", file=sys.stderr)
        return 2
    try:
        agent = load_agent(args.agent)
    except UsageError as exc:
        print(f"agentfsm worker: {exc}", file=sys.stderr)
        return 2
    if args.concurrency < 1:
        print("agentfsm worker: --concurrency must be at least 1", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    engine = Engine(args.db, concurrency=args.concurrency)
    engine.register(args.name or args.agent, agent)
    engine.launch(executor_id=args.executor_id, recover=args.recover)
    print(
        f"agentfsm worker {engine.executor_id}: running {args.name or args.agent!r} "
        f"(pid {os.getpid()})",
        file=out,
        flush=True,
    )
    name = engine.executor_id
    while not stop.wait(0.5):
        pass
    handed = engine.drain(args.drain_timeout)
    print(
        f"agentfsm worker {name}: drained, {len(handed)} run(s) handed back to the queue",
        file=out,
        flush=True,
    )
    return 0
