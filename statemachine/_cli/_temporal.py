"""``agentfsm worker --engine temporal``: serve one agent's task queue until SIGTERM.

Each run's start and end is a line on stderr (``--log-format json``: JSON lines).
SIGTERM (or SIGINT) drains the worker: each run it holds is told to pause at its
next state boundary (a ``paused: draining`` segment), calls in flight get
``--drain-timeout`` seconds to finish, and the process exits; any other worker of
the task queue takes the runs on. Failures to start are one line, exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from agentfsm import Agent

__all__ = ["handle"]


def handle(
    args: argparse.Namespace, agent: Agent, stop: threading.Event, out: TextIO | None = None
) -> int:
    """Run the Temporal worker of ``agent`` (loaded from ``args.agent`` by the command)
    until ``stop`` is set (SIGTERM or SIGINT); the exit status."""
    from ..temporal import Engine  # the extra: loaded when a temporal worker starts

    out = out or sys.stdout
    if not args.address:
        print("agentfsm worker: --engine temporal needs --address HOST:PORT", file=sys.stderr)
        return 2
    engine = Engine(
        args.address,
        namespace=args.namespace,
        queue=args.queue,
        concurrency=args.concurrency,
        heartbeat=args.heartbeat,
        sticky_timeout=args.heartbeat,
        policy=args.policy,
        drain_timeout=args.drain_timeout,
    )
    engine.register(args.name or args.agent, agent)
    try:
        engine.launch(executor_id=args.executor_id)
    except Exception as exc:
        engine.close()
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"agentfsm worker: cannot start on {args.address}: {text}", file=sys.stderr)
        return 2
    name = engine.executor_id
    started: dict[str, float] = {}

    def logged(event: str, run_id: str, detail: Mapping[str, Any]) -> None:
        """Each run's start and end on stderr: for people, or as JSON lines."""
        now = time.monotonic()
        fields: dict[str, Any] = {"run": run_id, "agent": detail.get("agent")}
        if event == "start":
            started[run_id] = now
        else:
            fields["status"] = detail.get("status")
            if run_id in started:
                fields["seconds"] = round(now - started.pop(run_id), 3)
        if args.log_format == "json":
            print(json.dumps({"event": f"run {event}", **fields}), file=sys.stderr, flush=True)
        else:
            said = " ".join(f"{k}={v}" for k, v in fields.items() if k != "run")
            print(f"run {event} {run_id} {said}", file=sys.stderr, flush=True)

    listening = contextlib.ExitStack()
    listening.enter_context(engine.listening(logged))
    ready = Path(args.ready_file) if args.ready_file else None
    try:
        if ready is not None:
            data = {"executor": name, "pid": os.getpid(), "queues": engine.queues}
            partial = ready.with_name(ready.name + ".partial")
            partial.write_text(json.dumps(data) + "\n")
            partial.replace(ready)
        print(
            f"agentfsm worker {name}: running {args.name or args.agent!r} on "
            f"{', '.join(engine.queues)} at {args.address} (pid {os.getpid()})",
            file=out,
            flush=True,
        )
        while not stop.wait(0.5):
            pass
        if ready is not None:
            ready.unlink(missing_ok=True)
        handed = engine.drain()
    finally:
        listening.close()
        if ready is not None:
            ready.unlink(missing_ok=True)
        engine.close()
    print(
        f"agentfsm worker {name}: drained, {len(handed)} run(s) told to pause and handed back "
        "to the task queue",
        file=out,
        flush=True,
    )
    return 0
