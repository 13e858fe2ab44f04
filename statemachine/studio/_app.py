"""The studio's web app: the index, the run pages, their live updates, and decisions.

Reading is open to whoever can reach the server; the server listens on loopback
unless told otherwise, and then every request needs the access token. A decision
also needs the page's CSRF token (a header no other site can send) and carries
each request's digest, so it approves exactly what the page showed.

One idea: the app over a store, its routes and the checks every action shares (the
token, the CSRF token, how a refusal is answered), kept together so that no action
can leave one out.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import secrets
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from importlib.resources import files
from typing import Any, Final, TypeVar

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
)
from starlette.routing import Route

from .._agent import Agent
from .._agent_spec import DEFAULT_AGENT, UsageError, load_agent
from .._compare import compare_runs
from .._durable_readers import is_durable
from .._errors import (
    AgentfsmError,
    ResumeError,
    RunExistsError,
    RunInUseError,
    RunNotFoundError,
    StoreError,
)
from .._evals._compare import compare
from .._machine import UnknownMachineError, machine_named
from .._resumable import check_resumable, recorded_command
from .._resume import restore_run
from .._serialization import FormatError, UnknownToolError
from .._view import page_data, render_page
from ..store import SavedRun, SQLiteStore, fork_run, load_run
from ._catalog import Catalog
from ._compare_page import compare_form, compare_page
from ._evals_page import eval_compare_page, eval_of, eval_page, evals_page
from ._forks import naming, resting, resume_fork, shown_status
from ._live import LIVE, Referee, forkable, index_events, index_mark, run_events, waiting
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
    """The app's state: the store read, the store written, the agents, the CSRF token."""

    def __init__(self, db: str, agent: str | Sequence[str] | Agent | None) -> None:
        self.db = db
        self.catalog = Catalog(db)
        #: The agents named (``--agent``, repeated), the first the one a run goes on with
        #: unless it was started with another of them.
        self.agent_specs: tuple[str, ...] = ()
        if isinstance(agent, str):
            self.agent_specs = (agent,)
        elif agent is not None and not isinstance(agent, Agent):
            self.agent_specs = tuple(dict.fromkeys(agent))  # in order, each once
        self.csrf = secrets.token_urlsafe(32)
        self._given: Agent | None = agent if isinstance(agent, Agent) else None
        # Loaded now: an agent named wrong is refused before the studio serves anything.
        self._loaded = {spec: load_agent(spec, from_cwd=True) for spec in self.agent_specs}
        self._writer: SQLiteStore | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.referee = Referee()

    @property
    def given(self) -> bool:
        """Whether the agent was given as an object (not named by a spec)."""
        return self._given is not None

    def spec_for(self, recorded: str | None = None) -> str | None:
        """The named agent a run ``recorded`` as started with ``--agent recorded`` goes on
        with: that one when the studio was given it, else the first (None: none named)."""
        if recorded in self.agent_specs:
            return recorded
        return self.agent_specs[0] if self.agent_specs else None

    def agent(self, recorded: str | None = None) -> Agent:
        """The agent given, else the one named for a run ``recorded`` as started with
        (:meth:`spec_for`), else the demo agent. A run started with an ``--agent`` of its
        own in a studio given none is refused with the flag to start the studio with: a
        saved file names code, and the studio loads only what its user named."""
        if self._given is not None:
            return self._given
        if not self.agent_specs and recorded is not None:
            raise UsageError(
                f"this run was started with --agent {recorded}, which a saved run names but "
                f"does not load: start the studio with --agent {shlex.quote(recorded)}"
            )
        spec = self.spec_for(recorded) or DEFAULT_AGENT
        if spec not in self._loaded:  # the demo agent, the first time it is asked for
            self._loaded[spec] = load_agent(spec, from_cwd=False)
        return self._loaded[spec]

    def agent_named(self, recorded: str | None = None) -> str:
        """The agent as a refusal names it."""
        if self._given is None and not self.agent_specs and recorded is not None:
            return recorded
        return self.spec_for(recorded) or ("the given agent" if self._given else DEFAULT_AGENT)

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


def _studio(request: Request) -> _Studio:
    studio: _Studio = request.app.state.studio
    return studio


def _filters(request: Request) -> dict[str, str]:
    return {k: request.query_params.get(k, "") for k in ("status", "machine", "tool", "q")}


def _page_number(request: Request) -> int:
    try:
        return int(request.query_params.get("page", "1"))
    except ValueError:
        return 1


def _pair(request: Request) -> tuple[str, str, list[str]]:
    """The two runs the compare page names (``a``/``b`` or two ``run``), and the picks."""
    picked = [r for r in request.query_params.getlist("run") if r]
    a = request.query_params.get("a") or (picked[0] if picked else "")
    b = request.query_params.get("b") or (picked[1] if len(picked) > 1 else "")
    return a, b, picked


# ---------------------------------------------------------------- refusals

#: What a failure of one kind answers: the first row whose types it is, its status.
_Table = tuple[tuple[tuple[type[BaseException], ...], int], ...]
_Render = Callable[[Request, int, str], Response]


class _Refused(Exception):
    """An action the studio refuses before doing anything: its status and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _text(_: Request, status: int, reason: str) -> Response:
    return PlainTextResponse(reason, status)


def _json(_: Request, status: int, reason: str) -> Response:
    return JSONResponse({"error": reason}, status)


def _compare_problem(request: Request, status: int, reason: str) -> Response:
    a, b, _ = _pair(request)
    return HTMLResponse(compare_form([], {"a": a, "b": b}, reason), status)


_READING: Final[_Table] = (
    ((RunNotFoundError,), 404),
    ((*_UNREADABLE, RecursionError), 422),
)
_DECIDING: Final[_Table] = (
    ((RunNotFoundError,), 404),
    ((RunInUseError, ResumeError), 409),
    ((UsageError, ValueError, AgentfsmError), 400),
)
_EVAL: Final[_Table] = (((StoreError,), 404), ((ValueError,), 422))
_FORKING: Final[_Table] = (
    ((RunNotFoundError,), 404),
    ((RunExistsError,), 409),
    ((*_UNREADABLE, RecursionError), 422),
    ((ValueError, AgentfsmError), 400),
)

#: Each endpoint's answer to a failure: how it is shown, and its status by kind.
_REFUSALS: dict[Callable[..., Any], tuple[_Render, _Table]] = {}

_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


def _refusing(render: _Render, table: _Table) -> Callable[[_Endpoint], _Endpoint]:
    """Declare how ``endpoint``'s failures are answered (the app's exception handlers
    read it), so each handler says only what it does when it succeeds."""

    def mark(endpoint: _Endpoint) -> _Endpoint:
        _REFUSALS[endpoint] = (render, table)
        return endpoint

    return mark


async def _refused(request: Request, exc: Exception) -> Response:
    """The response to a failure the endpoint declared; any other is the server's error."""
    if isinstance(exc, _Refused):
        return _json(request, exc.status, exc.reason)
    endpoint = request.scope.get("endpoint")
    render, table = _REFUSALS.get(endpoint, (_json, ())) if callable(endpoint) else (_json, ())
    for kinds, status in table:
        if isinstance(exc, kinds):
            return render(request, status, _one_line(exc))
    raise exc


# ---------------------------------------------------------------- endpoints


def _listing(studio: _Studio, request: Request) -> dict[str, Any]:
    filters = _filters(request)
    return studio.catalog.page(
        status=filters["status"],
        machine=filters["machine"],
        tool=filters["tool"],
        query=filters["q"],
        page=_page_number(request),
    )


async def _index(request: Request) -> Response:
    studio = _studio(request)
    mark = index_mark(await asyncio.to_thread(studio.catalog.store.runs))
    data = await asyncio.to_thread(_listing, studio, request)
    return HTMLResponse(index_page(data, _filters(request), store=studio.db, mark=mark))


async def _index_events(request: Request) -> Response:
    studio = _studio(request)
    return index_events(request, studio.catalog, lambda: _listing(studio, request), poll=POLL)


async def _runs_json(request: Request) -> Response:
    return JSONResponse(await asyncio.to_thread(_listing, _studio(request), request))


def _run_page_text(studio: _Studio, run_id: str) -> str:
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
    status = shown_status(
        run_id, saved.status, saved.forked_from is not None, studio.catalog.store.unheld
    )
    extra = {
        "run_id": run_id,
        "status": status,
        "head": studio.catalog.head(run_id),
        "live": status in LIVE,
        "events": f"/api/runs/{_quote(run_id)}/events",
        "steps": len(data["steps"]),
        "messages": len(data["messages"]),
        "decide": f"/api/runs/{_quote(run_id)}/decide",
        "csrf": studio.csrf,
        "requests": waiting(saved),
        "fork": f"/api/runs/{_quote(run_id)}/fork",
        "forkable": forkable(saved, table),
        "forked_from": _parent(saved),
        "compare": "/compare?a=" + _quote(run_id),
    }
    extra.update(resting(studio, saved))
    return render_page(
        data,
        saved.traces,
        table=table,
        addon=_asset("studio.js") + _asset("resume.js"),
        addon_data=extra,
        connect=True,
    )


@_refusing(_text, _READING)
async def _run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    try:
        return HTMLResponse(await asyncio.to_thread(_run_page_text, _studio(request), run_id))
    except UnknownMachineError as exc:
        # one page of it for both studios: the durable one's
        from ._durable import unknown_machine_page

        return HTMLResponse(unknown_machine_page(run_id, exc), 422)


@_refusing(_json, _READING)
async def _run_json(request: Request) -> Response:
    studio = _studio(request)
    run_id = request.path_params["run_id"]
    saved = await asyncio.to_thread(studio.load, run_id)
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
            "requests": waiting(saved),
            "page": data,
        }
    )


async def _events(request: Request) -> Response:
    return run_events(request, _studio(request).catalog, request.path_params["run_id"], poll=POLL)


@_refusing(_json, _DECIDING)
async def _decide(request: Request) -> Response:
    studio = _studio(request)
    run_id = request.path_params["run_id"]
    body = await _action(request, studio.csrf, "a decision")
    decisions = body.get("decisions")
    if not isinstance(decisions, list) or not all(isinstance(d, Mapping) for d in decisions):
        raise _Refused(400, "send {'decisions': [one object per request]}")
    if not all(isinstance(d.get("digest"), str) for d in decisions):
        raise _Refused(400, "every decision carries the digest of the request it answers")
    async with studio.referee.lock:  # one at a time: of two on one request, the first wins
        saved = await asyncio.to_thread(studio.load, run_id)
        second, asked = studio.referee.first(saved, decisions)
        if second is not None:
            return JSONResponse(second, 409)
        run = await _resume(studio, run_id, decisions)
        studio.referee.remember(run_id, asked, decisions)
    task = asyncio.create_task(run.run())
    studio.tasks.add(task)
    task.add_done_callback(functools.partial(_finished, studio, run_id))
    return JSONResponse({"run_id": run_id, "resumed": True}, 202)


@_refusing(_json, _FORKING)
async def _fork(request: Request) -> Response:
    studio = _studio(request)
    run_id = request.path_params["run_id"]
    body = await _action(request, studio.csrf, "a fork")
    step = body.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise _Refused(400, "send {'step': the step's number on the page}")
    fork_id = await asyncio.to_thread(fork_run, studio.writer(), run_id, step)
    return JSONResponse({"run_id": fork_id, "url": "/runs/" + _quote(fork_id)}, 201)


@_refusing(_json, _DECIDING)
async def _resume_fork(request: Request) -> Response:
    """Go on with a fork nothing runs, in this process, on the agent and model chosen."""
    studio = _studio(request)
    run_id = request.path_params["run_id"]
    body = await _action(request, studio.csrf, "a resume")
    run, said = await resume_fork(studio, run_id, body)
    task = asyncio.create_task(run.run())
    studio.tasks.add(task)
    task.add_done_callback(functools.partial(_finished, studio, run_id))
    return JSONResponse(said, 202)


def _comparison(studio: _Studio, a: str, b: str) -> str:
    sides = (studio.load(a), studio.load(b))
    tables = (machine_named(sides[0].trace.machine), machine_named(sides[1].trace.machine))
    return compare_page(compare_runs(*sides), sides, tables)


@_refusing(_compare_problem, _READING)
async def _compare(request: Request) -> Response:
    studio = _studio(request)
    a, b, picked = _pair(request)
    if not a or not b or len(picked) > 2:
        rows = await asyncio.to_thread(studio.catalog.rows, detailed=False)
        problem = "pick two runs to compare" if picked or len(request.query_params) else ""
        chosen = {"a": a, "b": b}
        return HTMLResponse(compare_form([r.run_id for r in rows], chosen, problem))
    return HTMLResponse(await asyncio.to_thread(_comparison, studio, a, b))


@_refusing(_json, _READING)
async def _compare_json(request: Request) -> Response:
    studio = _studio(request)
    a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
    if not a or not b:
        raise _Refused(400, "name the two runs: ?a=RUN&b=RUN")
    sides = await asyncio.to_thread(lambda: (studio.load(a), studio.load(b)))
    return JSONResponse(compare_runs(*sides).as_json())


async def _evals(request: Request) -> Response:
    rows = await asyncio.to_thread(_studio(request).catalog.store.evals)
    return HTMLResponse(evals_page(rows))


@_refusing(_text, _EVAL)
async def _eval(request: Request) -> Response:
    eval_id = request.path_params["eval_id"]
    report, table = await asyncio.to_thread(eval_of, _studio(request).catalog.store, eval_id)
    return HTMLResponse(eval_page(report, table))


@_refusing(_text, _EVAL)
async def _eval_compare(request: Request) -> Response:
    studio = _studio(request)
    a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
    if not a or not b:
        rows = await asyncio.to_thread(studio.catalog.store.evals)
        return HTMLResponse(evals_page(rows, "pick two evals to compare"), 400)
    (base, _), (candidate, table) = await asyncio.to_thread(
        lambda: (eval_of(studio.catalog.store, a), eval_of(studio.catalog.store, b))
    )
    return HTMLResponse(eval_compare_page(compare(base, candidate), table))


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    try:
        yield
    finally:
        studio: _Studio = app.state.studio
        for task in list(studio.tasks):
            task.cancel()
        studio.close()


_ROUTES: Final = [
    Route("/", _index),
    Route("/compare", _compare),
    Route("/evals", _evals),
    Route("/evals/compare", _eval_compare),
    Route("/evals/{eval_id:path}", _eval),
    Route("/api/compare", _compare_json),
    Route("/api/runs", _runs_json),
    Route("/api/events", _index_events),
    Route("/runs/{run_id:path}", _run_page),
    Route("/api/runs/{run_id:path}/events", _events),
    Route("/api/runs/{run_id:path}/decide", _decide, methods=["POST"]),
    Route("/api/runs/{run_id:path}/fork", _fork, methods=["POST"]),
    Route("/api/runs/{run_id:path}/resume", _resume_fork, methods=["POST"]),
    Route("/api/runs/{run_id:path}", _run_json),
]


def create_app(
    db: str, *, agent: str | Sequence[str] | Agent | None = None, token: str | None = None
) -> Starlette:
    """The studio over the SQLite store at ``db`` (a DBOS database or a Temporal server,
    ``temporal://HOST:PORT/NAMESPACE``: their durable runs, decided through the engine).

    ``agent`` (an :class:`~agentfsm.Agent`, or ``module:attribute`` as ``agentfsm runs
    resume --agent`` takes it, or several of those names; the demo agent by default) is
    the agent decisions resume runs with (of several, the one a run was started with, else
    the first); ``token``, when given, is needed by every
    request (as ``?token=``, then a cookie, or ``Authorization: Bearer``), and without
    it only requests addressed to a loopback host are answered.
    """
    if is_durable(db):
        # the durable engines' studio: only a durable --db needs it
        from ._durable import create_durable_app

        return create_durable_app(db, guard=Middleware(_Guard, token=token))
    app = Starlette(
        routes=_ROUTES,
        middleware=[Middleware(_Guard, token=token)],
        exception_handlers={
            _Refused: _refused,
            AgentfsmError: _refused,
            ValueError: _refused,
            RecursionError: _refused,
        },
        lifespan=_lifespan,
    )
    app.state.studio = _Studio(db, agent)
    return app


async def _action(request: Request, csrf: str, what: str) -> Mapping[str, Any]:
    """An action's JSON object; refused (:class:`_Refused`) without the CSRF token, from
    another site's page, or with a body that is not a JSON object."""
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent, csrf):
        raise _Refused(403, "missing or wrong CSRF token")
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise _Refused(403, f"{what} comes from the studio's own page")
    try:
        body = await request.json()
    except ValueError:
        raise _Refused(400, "the body is not JSON") from None
    return body if isinstance(body, Mapping) else {}


def _parent(saved: SavedRun) -> dict[str, Any] | None:
    if saved.forked_from is None:
        return None
    run_id, step = saved.forked_from
    return {"run_id": run_id, "step": step, "url": f"/runs/{_quote(run_id)}#step-{step}"}


async def _resume(studio: _Studio, run_id: str, decisions: Sequence[Mapping[str, Any]]) -> Any:
    """The run resumed with ``decisions``, claimed, at the approval state that takes them;
    not yet stepped (the approved calls run as it steps, in its trace)."""
    store = studio.writer()
    command = recorded_command(store, run_id)
    spec = command.get("agent")
    agent = studio.agent(spec)
    before = load_run(store, run_id, strict=False)
    named = studio.agent_named(spec)
    check_resumable(before, decisions, agent, named, studio.db, command, **naming(studio, spec))
    return await restore_run(agent, run_id, store, list(decisions))


def _finished(studio: _Studio, run_id: str, task: asyncio.Task[Any]) -> None:
    """A resumed run's end: its failure is the run's own (saved), a crash is logged."""
    studio.tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.error("run %r stopped: %r", run_id, task.exception())


def _quote(run_id: str) -> str:
    # import time: only a link needs it
    from urllib.parse import quote

    return quote(run_id, safe="")
