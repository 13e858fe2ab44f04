"""A worker's log: one line per run's start and end, for people (rich) or machines (JSON)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, TextIO

from .._printable import printable

#: What a worker's engine calls for each step of its runs (``Engine.listening``).
Listener = Callable[[str, str, Mapping[str, Any]], None]

__all__ = ["LogFormat", "log_line", "quiet_engine", "run_logger"]

LogFormat = Literal["rich", "json"]

_STYLES = {"ok": "green", "error": "red", "interrupted": "yellow", "paused": "yellow"}


def log_line(out: TextIO, fmt: LogFormat, event: str, **fields: Any) -> None:
    """One line: a JSON object (``{"time", "event", ...}``) or a line for a person."""
    if fmt == "json":
        record = {"time": round(time.time(), 3), "event": event, **fields}
        print(json.dumps(record, default=str), file=out, flush=True)
        return
    # import time: only a rich log line needs it
    from rich.console import Console

    # import time: only a rich log line needs it
    from rich.markup import escape

    words = " ".join(f"{k}={printable(str(v))}" for k, v in fields.items() if v is not None)
    style = _STYLES.get(str(fields.get("status")), "cyan")
    stamp = time.strftime("%H:%M:%S")
    Console(file=out, highlight=False, soft_wrap=True).print(
        f"[dim]{stamp}[/dim] [{style}]{escape(event)}[/{style}] {escape(words)}"
    )
    out.flush()


def run_logger(out: TextIO | None = None, fmt: LogFormat = "rich") -> Listener:
    """A listener that logs each run's start, end (with its status) and stop."""
    stream = out or sys.stdout
    started: dict[str, float] = {}

    def listen(event: str, run_id: str, detail: Mapping[str, Any]) -> None:
        fields: dict[str, Any] = {"run_id": run_id, "agent": detail.get("agent")}
        if event == "start":
            started[run_id] = time.monotonic()
        else:
            began = started.pop(run_id, None)
            fields["status"] = detail.get("status") if event == "end" else "handed back"
            if began is not None:
                fields["seconds"] = round(time.monotonic() - began, 3)
        log_line(stream, fmt, f"run {event}", **fields)

    return listen


@contextmanager
def quiet_engine() -> Iterator[None]:
    """DBOS says nothing meanwhile: a command line says a failure once, in one line,
    where DBOS would log its traceback before the command's own error."""
    logger = logging.getLogger("dbos")
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was
