"""A throwaway PostgreSQL server: Debian's binaries, a temp data dir, a free loopback port.

``.ci/run`` installs the ``postgresql`` package when it is missing; here the
server is created, started, and stopped by the tests that need it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["binaries", "postgres"]


def binaries() -> str | None:
    """The folder of ``initdb``/``pg_ctl``, or None when PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return os.path.dirname(os.path.realpath(found))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return os.path.dirname(versions[0]) if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres() -> Iterator[str]:
    """A running server; yields a URL of a database the engine may create."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql")
    base = tempfile.mkdtemp(prefix="agentfsm-pg-")
    data, sockets = os.path.join(base, "data"), os.path.join(base, "sockets")
    os.mkdir(sockets)
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        user = pwd.getpwnam("postgres")
        for path in (base, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=60)

    run(f"{bin_dir}/initdb", "-D", data, "-U", "agentfsm", "--auth=trust", "-E", "UTF8")
    options = (
        f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    )
    run(f"{bin_dir}/pg_ctl", "-D", data, "-o", options, "-l", f"{base}/log", "-w", "start")
    try:
        yield f"postgresql://agentfsm@127.0.0.1:{port}/agentfsm_test"
    finally:
        subprocess.run(
            [*prefix, f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)
