"""``agentfsm.serve``: an agent's runs served to a user interface (AG-UI) and to other
agents (A2A), over ASGI (``pip install 'agentfsm[serve]'``).

:func:`create_app` is a Starlette app that speaks AG-UI: each run's transitions are
``STEP_STARTED``/``STEP_FINISHED`` events named by the machine's states (the trigger
and destination in the finished step's metadata), with the reply's text as it
streams, tool calls and their results, ``STATE_SNAPSHOT``/``STATE_DELTA`` of the
machine's position and the agent's state, and ``RUN_ERROR`` with the run's error
type. An approval ends the run with AG-UI interrupts, one per gated call, answered
by a ``resume`` through the same claim as every other decision. Runs are saved in
the store, so the studio shows them, and they go on when the client goes away.
:class:`ServedMachine` serves a machine you declared the same way.

With ``a2a_url`` the app serves A2A too (card, JSON-RPC, tasks as runs, approvals
as ``input-required``); :class:`RemoteAgent` is a remote A2A agent as a tool of a
local machine, its transitions traced as the call's child.

Untrusted by default, as the studio is: loopback only unless a token is given
(``Authorization: Bearer``, or a ``?token=`` link that becomes a cookie), no other
site's page unless its origin is named, bodies bounded.
"""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, TextIO

from starlette.middleware import Middleware

from ._agui import Served, ServedMachine, agui_routes, make_app
from ._guard import Guard

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """``RemoteAgent``, imported when first asked for (it needs the A2A client)."""
        if name == "RemoteAgent":
            # an extra's part: loaded only when asked for
            from ._remote import RemoteAgent

            return RemoteAgent
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    from starlette.applications import Starlette

    from agentfsm import Agent
    from agentfsm.store import Store

    from ._remote import RemoteAgent

__all__ = ["RemoteAgent", "ServedMachine", "create_app", "serve"]

_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})

#: The largest request body taken, in bytes, unless ``max_body`` says otherwise.
MAX_BODY: Final = 1 << 20


def create_app(
    agent: Agent | ServedMachine,
    store: Store | str,
    *,
    token: str | None = None,
    origins: Iterable[str] = (),
    max_body: int = MAX_BODY,
    keep: int = 256,
    going: int = 64,
    a2a_url: str | None = None,
    description: str | None = None,
    a2a_tasks: Any = None,
) -> Starlette:
    """The AG-UI app of ``agent``; its runs saved in ``store`` (a store, or a SQLite path).

    ``agent`` is an :class:`~agentfsm.Agent` (on the standard machine or any machine
    it runs), or a :class:`ServedMachine`: a machine you declared, with the chain its
    runs start on.

    ``token``, when given, is needed by every request (``Authorization: Bearer``);
    without it only requests addressed to a loopback host are answered. ``origins``
    are the other sites whose pages may call the app (CORS); none by default.
    ``max_body`` bounds a request's body; ``keep`` how many runs' event streams are
    kept for clients to come back to; ``going`` how many runs may go at once (past it
    a new run or answer is refused with 429).

    ``a2a_url`` (the address other agents reach this app at) serves the agent over
    A2A too: its card at ``/.well-known/agent-card.json`` (``description`` says what
    it does; by default its machine and tools), JSON-RPC at ``/a2a``. ``a2a_tasks`` is
    the a2a-sdk task store that keeps the tasks (in memory by default; the SDK's
    ``DatabaseTaskStore`` keeps them across restarts, the runs being in ``store``).
    """
    if max_body < 1:
        raise ValueError(f"max_body is a positive number of bytes, got {max_body!r}")
    if going < 1:
        raise ValueError(f"going is how many runs may go at once, at least 1; got {going!r}")
    served = Served(agent, store, keep=keep, going=going)
    guard = Middleware(Guard, token=token, origins=tuple(origins), max_body=max_body)
    routes: list[Any] = list(agui_routes(served))
    if a2a_url is not None:
        # an extra's part: loaded only when asked for
        from ._a2a import a2a_routes

        if isinstance(agent, ServedMachine):
            raise TypeError("A2A serves an Agent (its card is made of its tools)")
        routes += a2a_routes(served, a2a_url, description=description, tasks=a2a_tasks)
    app = make_app(served, routes, [guard])
    app.state.token = token
    return app


def serve(
    app: Starlette,
    *,
    host: str | None = None,
    port: int = 0,
    out: TextIO | None = None,
) -> None:
    """Serve ``app`` (from :func:`create_app`) until interrupted; its address goes to ``out``.

    Without ``host`` it listens on 127.0.0.1. A ``host`` other than loopback needs an
    app made with a ``token``: anyone on the network could run the agent otherwise.
    Port 0 takes a free port.
    """
    # an extra's part: loaded only when asked for
    import uvicorn

    out = out or sys.stdout
    bind = host or "127.0.0.1"
    if bind.strip("[]") not in _LOOPBACK and getattr(app.state, "token", None) is None:
        raise ValueError(
            f"serving on {bind} needs a token: create_app(..., token=secrets.token_urlsafe())"
        )
    family = socket.AF_INET6 if ":" in bind.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind.strip("[]"), port))
    sock.listen(128)
    shown = f"[{bind.strip('[]')}]" if family == socket.AF_INET6 else bind
    print(f"agentfsm serve: http://{shown}:{sock.getsockname()[1]}/", file=out)
    out.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    uvicorn.Server(config).run(sockets=[sock])


def new_token() -> str:
    """A token to serve with."""
    return secrets.token_urlsafe(24)
