"""``agentfsm studio``: every run of a store in the browser, live, with approvals.

A local web app (Starlette, served by uvicorn; ``pip install 'agentfsm[studio]'``)
over a SQLite store: an index of every run, waiting ones first, filtered and
searched; each run's page (the page ``agentfsm view`` writes) with wall-clock
times, following a running run as it moves; and a waiting run's approval
requests answered from its page, checked as ``agentfsm runs resume`` checks them.

It listens on 127.0.0.1 unless a host is given; then every request needs a token.
"""

from __future__ import annotations

import secrets
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from .._moved import forward
from ._app import create_app

__all__ = ["create_app", "serve"]

#: The last release's names this face no longer exports, kept one more release.
__getattr__ = forward(__name__, ("agentfsm.studio._app",), frozenset({"COOKIE", "CSRF_HEADER"}))


def serve(
    db: str,
    *,
    host: str | None = None,
    port: int = 0,
    token: str | None = None,
    agent: str | Sequence[str] | None = None,
    out: TextIO | None = None,
) -> None:
    """Serve the studio over ``db`` until interrupted; its address goes to ``out``.

    Without ``host`` it listens on 127.0.0.1 and answers loopback requests only. With
    ``host`` every request needs ``token`` (one is made and printed if not given; an
    empty one is refused, ValueError, before anything listens). Port 0 takes a free port.
    """
    # import time: only serving needs the server
    import uvicorn

    if token is not None and not token.strip():
        raise ValueError(
            "--token is empty: every request would be refused; leave --token out and a "
            "new token is made and printed"
        )
    out = out or sys.stdout
    if host is not None and token is None:
        token = secrets.token_urlsafe(24)
    bind = host or "127.0.0.1"
    family = socket.AF_INET6 if ":" in bind.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind.strip("[]"), port))
    sock.listen(128)  # from here on a request waits for the server, never refused
    shown = f"[{bind.strip('[]')}]" if family == socket.AF_INET6 else bind
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    app = create_app(db, agent=agent, token=token)
    studio = getattr(app.state, "studio", None)
    if studio is not None:
        # The store's search index is caught up (built, the first time) before the first
        # search asks: a large store's first index costs seconds once.
        threading.Thread(target=_warm, args=(studio,), daemon=True).start()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    print(f"agentfsm studio: {db} at {url}" + (f"?token={token}" if token else ""), file=out)
    if token is not None:
        print("every request needs the token: open the link above once", file=out)
    out.flush()
    server.run(sockets=[sock])


def _warm(studio: Any) -> None:
    try:
        studio.catalog.page()
    except Exception:  # the index is built again when first searched, and says why then
        return
