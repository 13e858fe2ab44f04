"""The studio's web app: the index, the run pages, their live updates, and decisions.

Reading is open to whoever can reach the server; the server listens on loopback
unless told otherwise, and then every request needs the access token. A decision
also needs the page's CSRF token (a header no other site can send) and carries
each request's digest, so it approves exactly what the page showed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from importlib.resources import files
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from .._agent import Agent
from .._cli._runs import DEFAULT_AGENT, UsageError, _check_resumable, load_agent
from .._compare import compare_runs
from .._errors import (
    AgentfsmError,
    ResumeError,
    RunExistsError,
    RunInUseError,
    RunNotFoundError,
    StoreError,
)
from .._machine import MachineTable, UnknownMachineError, machine_named
from .._resume import restore_run
from .._serialization import FormatError, UnknownToolError
from .._view import page_data, render_page
from ..store import SavedRun, SQLiteStore, fork_run, load_run
from ._catalog import Catalog
from ._compare_page import compare_form, compare_page
from ._pages import index_page

__all__ = ["COOKIE", "CSRF_HEADER", "create_app"]

#: The cookie that carries the access token once a browser has shown it.
COOKIE: Final = "agentfsm_studio"
#: The header a decision carries the page's CSRF token in.
CSRF_HEADER: Final = "X-CSRF-Token"
#: How often a live page's run is looked at, in seconds.
POLL: Final = 0.2

_log = logging.getLogger("agentfsm.studio")

_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_UNREADABLE: Final = (
    FormatError,
    UnknownToolError,
    UnknownMachineError,
    StoreError,
    RunNotFoundError,
)


def _asset(name: str) -> str:
    return files(__package__ or __name__).joinpath(name).read_text(encoding="utf-8")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _host_of(header: str) -> str:
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class _Guard(BaseHTTPMiddleware):
    """Who may talk to the studio: a loopback Host (no DNS rebinding), or the token."""

    def __init__(self, app: Any, *, token: str | None) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await self._checked(request, call_next)
        # No other site may frame the studio's pages (a click on "approve" is an act).
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    async def _checked(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if self.token is None:
            if _host_of(request.headers.get("host", "")) not in _LOOPBACK:
                return PlainTextResponse("this studio answers on loopback only", 403)
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given, self.token):
            # A link with the token: keep it in a cookie, and drop it from the address bar.
            response = RedirectResponse(request.url.remove_query_params("token"), 303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
            return response
        bearer = request.headers.get("authorization", "")
        sent = request.cookies.get(COOKIE) or bearer.removeprefix("Bearer ").strip()
        if not sent or not hmac.compare_digest(sent, self.token):
            return PlainTextResponse("a token is needed: open the link the studio printed", 401)
        return await call_next(request)


class _Studio:
    """The app's state: the store read, the store written, the agent, the CSRF token."""

    def __init__(self, db: str, agent: str | Agent | None) -> None:
        self.db = db
        self.catalog = Catalog(db)
        self.agent_spec = agent if isinstance(agent, str) else None
        self.csrf = secrets.token_urlsafe(32)
        self._agent: Agent | None = agent if isinstance(agent, Agent) else None
        self._writer: SQLiteStore | None = None
        self.tasks: set[asyncio.Task[Any]] = set()

    def agent(self) -> Agent:
        if self._agent is None:
            spec = self.agent_spec or DEFAULT_AGENT
            self._agent = load_agent(spec, from_cwd=self.agent_spec is not None)
        return self._agent

    def writer(self) -> SQLiteStore:
        if self._writer is None:
            self._writer = SQLiteStore(self.db)
        return self._writer

    def close(self) -> None:
        self.catalog.close()
        if self._writer is not None:
            self._writer.close()

    def load(self, run_id: str) -> SavedRun:
        return load_run(self.catalog.store, run_id, strict=False)


def _requests(saved: SavedRun) -> list[dict[str, Any]]:
    """The action requests a waiting run shows, as the run page's outcome holds them."""
    if saved.status != "interrupted":
        return []
    table = machine_named(saved.trace.machine)
    data = page_data(saved.traces[-1:], table, title="", result=saved.result)
    outcome = data["segments"][-1].get("outcome") or {}
    requests: list[dict[str, Any]] = outcome.get("requests") or []
    return requests


def _filters(request: Request) -> dict[str, str]:
    return {k: request.query_params.get(k, "") for k in ("status", "machine", "tool", "q")}


def _page_number(request: Request) -> int:
    try:
        return int(request.query_params.get("page", "1"))
    except ValueError:
        return 1


def create_app(db: str, *, agent: str | Agent | None = None, token: str | None = None) -> Starlette:
    """The studio over the SQLite store at ``db``.

    ``agent`` (an :class:`~agentfsm.Agent`, or ``module:attribute`` as ``agentfsm runs
    resume --agent`` takes it; the demo agent by default) is the agent decisions resume
    runs with; ``token``, when given, is needed by every
    request (as ``?token=``, then a cookie, or ``Authorization: Bearer``), and without
    it only requests addressed to a loopback host are answered.
    """
    studio = _Studio(db, agent)

    def listing(request: Request) -> dict[str, Any]:
        filters = _filters(request)
        return studio.catalog.page(
            status=filters["status"],
            machine=filters["machine"],
            tool=filters["tool"],
            query=filters["q"],
            page=_page_number(request),
        )

    async def index(request: Request) -> Response:
        data = await asyncio.to_thread(listing, request)
        return HTMLResponse(index_page(data, _filters(request), store=db))

    async def runs_json(request: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(listing, request))

    def _run_page(run_id: str) -> tuple[int, str]:
        try:
            saved = studio.load(run_id)
            table = machine_named(saved.trace.machine)
            clock = studio.catalog.clock(run_id, saved.steps)
            data = page_data(
                saved.traces,
                table,
                title=f"run {run_id}",
                run_id=run_id,
                result=saved.result,
                clock=clock,
            )
        except RunNotFoundError as exc:
            return 404, _one_line(exc)
        except (*_UNREADABLE, RecursionError) as exc:
            return 422, _one_line(exc)
        extra = {
            "run_id": run_id,
            "status": saved.status,
            "head": studio.catalog.head(run_id),
            "live": saved.status in ("running", "interrupted", "paused"),
            "events": f"/api/runs/{_quote(run_id)}/events",
            "decide": f"/api/runs/{_quote(run_id)}/decide",
            "csrf": studio.csrf,
            "requests": _requests(saved),
            "fork": f"/api/runs/{_quote(run_id)}/fork",
            "forkable": _forkable(saved, table),
            "forked_from": _parent(saved),
            "compare": "/compare?a=" + _quote(run_id),
        }
        page = render_page(
            data,
            saved.traces,
            table=table,
            addon=_asset("studio.js"),
            addon_data=extra,
            connect=True,
        )
        return 200, page

    async def run_page(request: Request) -> Response:
        status, text = await asyncio.to_thread(_run_page, request.path_params["run_id"])
        if status != 200:
            return PlainTextResponse(text, status)
        return HTMLResponse(text)

    async def run_json(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            saved = await asyncio.to_thread(studio.load, run_id)
        except RunNotFoundError as exc:
            return JSONResponse({"error": _one_line(exc)}, 404)
        except (*_UNREADABLE, RecursionError) as exc:
            return JSONResponse({"error": _one_line(exc)}, 422)
        data = page_data(
            saved.traces,
            machine_named(saved.trace.machine),
            title=f"run {run_id}",
            run_id=run_id,
            result=saved.result,
            clock=studio.catalog.clock(run_id, saved.steps),
        )
        return JSONResponse(
            {
                "run_id": run_id,
                "status": saved.status,
                "state": saved.state,
                "head": studio.catalog.head(run_id),
                "requests": _requests(saved),
                "page": data,
            }
        )

    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        seen = request.query_params.get("head")

        async def stream() -> AsyncIterator[str]:
            nonlocal seen
            quiet = 0.0
            yield "retry: 1000\n\n"
            while not await request.is_disconnected():
                head = await asyncio.to_thread(studio.catalog.head, run_id)
                if head != seen:
                    seen = head
                    yield f"event: change\ndata: {json.dumps({'head': head})}\n\n"
                    quiet = 0.0
                elif quiet >= 10:
                    yield ": still here\n\n"
                    quiet = 0.0
                await asyncio.sleep(POLL)
                quiet += POLL

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def decide(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        body = await _action(request, studio.csrf, "a decision")
        if isinstance(body, Response):
            return body
        decisions = body.get("decisions")
        if not isinstance(decisions, list) or not all(isinstance(d, Mapping) for d in decisions):
            return JSONResponse({"error": "send {'decisions': [one object per request]}"}, 400)
        if not all(isinstance(d.get("digest"), str) for d in decisions):
            return JSONResponse(
                {"error": "every decision carries the digest of the request it answers"}, 400
            )
        try:
            run = await _resume(studio, run_id, decisions)
        except RunNotFoundError as exc:
            return JSONResponse({"error": _one_line(exc)}, 404)
        except (RunInUseError, ResumeError) as exc:
            return JSONResponse({"error": _one_line(exc)}, 409)
        except (UsageError, ValueError, AgentfsmError) as exc:
            return JSONResponse({"error": _one_line(exc)}, 400)
        task = asyncio.create_task(run.run())
        studio.tasks.add(task)
        task.add_done_callback(functools.partial(_finished, studio, run_id))
        return JSONResponse({"run_id": run_id, "resumed": True}, 202)

    async def fork(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        body = await _action(request, studio.csrf, "a fork")
        if isinstance(body, Response):
            return body
        step = body.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            return JSONResponse({"error": "send {'step': the step's number on the page}"}, 400)
        try:
            fork_id = await asyncio.to_thread(fork_run, studio.writer(), run_id, step)
        except RunNotFoundError as exc:
            return JSONResponse({"error": _one_line(exc)}, 404)
        except RunExistsError as exc:
            return JSONResponse({"error": _one_line(exc)}, 409)
        except (*_UNREADABLE, RecursionError) as exc:
            return JSONResponse({"error": _one_line(exc)}, 422)
        except (ValueError, AgentfsmError) as exc:
            return JSONResponse({"error": _one_line(exc)}, 400)
        return JSONResponse({"run_id": fork_id, "url": "/runs/" + _quote(fork_id)}, 201)

    def _comparison(a: str, b: str) -> tuple[int, str]:
        try:
            sides = (studio.load(a), studio.load(b))
            tables = (machine_named(sides[0].trace.machine), machine_named(sides[1].trace.machine))
        except RunNotFoundError as exc:
            return 404, _one_line(exc)
        except (*_UNREADABLE, RecursionError) as exc:
            return 422, _one_line(exc)
        return 200, compare_page(compare_runs(*sides), sides, tables)

    async def compare(request: Request) -> Response:
        picked = [r for r in request.query_params.getlist("run") if r]
        a = request.query_params.get("a") or (picked[0] if picked else "")
        b = request.query_params.get("b") or (picked[1] if len(picked) > 1 else "")
        if not a or not b or len(picked) > 2:
            rows = await asyncio.to_thread(studio.catalog.rows, detailed=False)
            problem = "pick two runs to compare" if picked or len(request.query_params) else ""
            chosen = {"a": a, "b": b}
            return HTMLResponse(compare_form([r.run_id for r in rows], chosen, problem))
        status, text = await asyncio.to_thread(_comparison, a, b)
        if status != 200:
            page = compare_form([], {"a": a, "b": b}, text)
            return HTMLResponse(page, status)
        return HTMLResponse(text)

    async def compare_json(request: Request) -> Response:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        if not a or not b:
            return JSONResponse({"error": "name the two runs: ?a=RUN&b=RUN"}, 400)
        try:
            sides = await asyncio.to_thread(lambda: (studio.load(a), studio.load(b)))
        except RunNotFoundError as exc:
            return JSONResponse({"error": _one_line(exc)}, 404)
        except (*_UNREADABLE, RecursionError) as exc:
            return JSONResponse({"error": _one_line(exc)}, 422)
        return JSONResponse(compare_runs(*sides).as_json())

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for task in list(studio.tasks):
                task.cancel()
            studio.close()

    routes = [
        Route("/", index),
        Route("/compare", compare),
        Route("/api/compare", compare_json),
        Route("/api/runs", runs_json),
        Route("/runs/{run_id:path}", run_page),
        Route("/api/runs/{run_id:path}/events", events),
        Route("/api/runs/{run_id:path}/decide", decide, methods=["POST"]),
        Route("/api/runs/{run_id:path}/fork", fork, methods=["POST"]),
        Route("/api/runs/{run_id:path}", run_json),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(_Guard, token=token)],
        lifespan=lifespan,
    )
    app.state.studio = studio
    return app


async def _action(request: Request, csrf: str, what: str) -> Mapping[str, Any] | Response:
    """An action's JSON object, or why it is refused: no CSRF token, another site's page
    sent it, or its body is not a JSON object."""
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent, csrf):
        return JSONResponse({"error": "missing or wrong CSRF token"}, 403)
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        return JSONResponse({"error": f"{what} comes from the studio's own page"}, 403)
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse({"error": "the body is not JSON"}, 400)
    return body if isinstance(body, Mapping) else {}


def _forkable(saved: SavedRun, table: MachineTable) -> list[int]:
    """The page's numbers of the steps a fork may start from: those into a working state."""
    dests = [t.dest for trace in saved.traces for t in trace]
    return [n for n, dest in enumerate(dests, 1) if dest not in table.terminals]


def _parent(saved: SavedRun) -> dict[str, Any] | None:
    if saved.forked_from is None:
        return None
    run_id, step = saved.forked_from
    return {"run_id": run_id, "step": step, "url": f"/runs/{_quote(run_id)}#step-{step}"}


async def _resume(studio: _Studio, run_id: str, decisions: Sequence[Mapping[str, Any]]) -> Any:
    """The run resumed with ``decisions``, claimed, at the approval state that takes them;
    not yet stepped (the approved calls run as it steps, in its trace)."""
    agent = studio.agent()
    store = studio.writer()
    before = load_run(store, run_id, strict=False)
    spec = studio.agent_spec or ("the given agent" if studio._agent else DEFAULT_AGENT)
    _check_resumable(before, decisions, agent, spec, studio.db)
    return await restore_run(agent, run_id, store, list(decisions))


def _finished(studio: _Studio, run_id: str, task: asyncio.Task[Any]) -> None:
    """A resumed run's end: its failure is the run's own (saved), a crash is logged."""
    studio.tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.error("run %r stopped: %r", run_id, task.exception())


def _quote(run_id: str) -> str:
    from urllib.parse import quote

    return quote(run_id, safe="")
