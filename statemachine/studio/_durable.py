"""The studio over a durable engine: a DBOS database or a Temporal server's runs.

``agentfsm studio --db temporal://HOST:PORT/NAMESPACE`` (or a DBOS database) serves an
index of the engine's runs, as ``agentfsm runs list`` lists them (status, agent, task
queue, the worker that last ran each, why one is orphaned), and each run's page, the
page ``agentfsm view`` writes: a Temporal run still going as far as it went (its
progress query, answered by a worker of its task queue). Reading only: a run's approval
is answered with ``agentfsm runs resume RUN --db URL --decisions ...`` or the engine's
``decide``. Every value from the engine goes through :func:`html.escape`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import html
import threading
from collections.abc import AsyncIterator
from importlib.resources import files
from typing import Any, Final
from urllib.parse import quote

import attrs
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .._durable_readers import open_engine, read_run, terminal
from .._errors import AgentfsmError, RunNotFoundError
from .._machine import UnknownMachineError, machine_named
from .._serialization import dump_trace
from .._view import page
from ._pages import document

__all__ = ["create_durable_app"]

#: The order of the index: runs waiting for a human first, then those nothing runs.
_FIRST: Final = {"waiting": 0, "orphaned": 1, "running": 2, "queued": 3}


def _style() -> str:
    return files(__package__ or __name__).joinpath("studio.css").read_text(encoding="utf-8")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


class _Durable:
    """The app's one engine (opened on first use, closed with the app)."""

    def __init__(self, db: str) -> None:
        self.db = db
        self._engine: Any = None
        self._lock = threading.Lock()

    def engine(self) -> Any:
        with self._lock:
            if self._engine is None:
                self._engine = open_engine(self.db)
            return self._engine

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None


def _state(request: Request) -> _Durable:
    durable: _Durable = request.app.state.durable
    return durable


def _index_html(durable: _Durable) -> str:
    runs = sorted(
        durable.engine().runs(limit=200),
        key=lambda r: (_FIRST.get(r.status, 4), -(r.updated or 0.0), r.run_id),
    )
    rows = (
        "\n".join(
            f'<tr class="{_e(r.status)}" data-run="{_e(r.run_id)}">'
            f'<td><a href="/runs/{_e(quote(r.run_id, safe=""))}">{_e(r.run_id)}</a></td>'
            f'<td><span class="badge {_e(r.status)}">{_e(r.status)}</span></td>'
            f"<td>{_e(r.agent or '-')}</td><td>{_e(r.queue or '-')}</td>"
            f"<td>{_e(r.executor or '-')}</td><td>{_e(_when(r.created))}</td>"
            f"<td>{_e(_when(r.updated))}</td>"
            f'<td class="summary">{_e(r.reason or "")}</td></tr>'
            for r in runs
        )
        or '<tr><td colspan="8" class="empty">No runs.</td></tr>'
    )
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    tally = " · ".join(f"{_e(s)} {n}" for s, n in sorted(counts.items()))
    body = f"""<header>
  <h1>agentfsm studio</h1>
  <div class="sub">{_e(durable.db)} · {len(runs)} durable runs · {tally}</div>
</header>
<div class="scroll">
<table id="runs">
<thead><tr><th>run</th><th>status</th><th>agent</th><th>queue</th><th>worker</th>
<th>started</th><th>updated</th><th>why</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
</div>"""
    return document("runs", _style(), body)


def _run_html(durable: _Durable, run_id: str) -> str:
    record, result, waiting = read_run(durable.engine(), run_id)
    if result is None or not result.traces:
        said = "waits for decisions" if waiting is not None else f"is {record.status}"
        why = f": {record.reason}" if record.reason else ""
        raise _Unshown(f"run {run_id} {said}{why}; it has no path to draw yet")
    table = machine_named(result.traces[-1].machine)
    return page(
        result.traces, title=f"run {run_id}", table=table, run_id=run_id, result=terminal(result)
    )


class _Unshown(ValueError):
    """A run with no path to draw yet (queued, or no worker to tell it)."""


async def _index(request: Request) -> Response:
    return HTMLResponse(await asyncio.to_thread(_index_html, _state(request)))


async def _runs_json(request: Request) -> Response:
    runs = await asyncio.to_thread(lambda: _state(request).engine().runs(limit=200))
    return JSONResponse({"runs": [attrs.asdict(r) for r in runs]})


async def _run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    try:
        return HTMLResponse(await asyncio.to_thread(_run_html, _state(request), run_id))
    except RunNotFoundError as exc:
        return PlainTextResponse(" ".join(str(exc).split()), 404)
    except (_Unshown, UnknownMachineError) as exc:
        return PlainTextResponse(" ".join(str(exc).split()), 422)


async def _run_json(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    try:
        record, result, waiting = await asyncio.to_thread(
            read_run, _state(request).engine(), run_id
        )
    except RunNotFoundError as exc:
        return JSONResponse({"error": " ".join(str(exc).split())}, 404)
    doc: dict[str, Any] = attrs.asdict(record)
    doc["waiting"] = dict(waiting) if waiting is not None else None
    if result is not None:
        doc["ends"] = list(result.ends)
        doc["traces"] = [dump_trace(t) for t in result.traces]
    return JSONResponse(doc)


async def _failed(request: Request, exc: Exception) -> Response:
    """The engine's own failures (a server down, a run it cannot read) in one line."""
    return PlainTextResponse(" ".join(str(exc).split()) or type(exc).__name__, 502)


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    try:
        yield
    finally:
        durable: _Durable = app.state.durable
        await asyncio.to_thread(durable.close)


def create_durable_app(db: str, *, guard: Middleware) -> Starlette:
    """The studio over the durable engine ``db`` names, behind ``guard`` (the studio's
    loopback-or-token check)."""
    app = Starlette(
        routes=[
            Route("/", _index),
            Route("/api/runs", _runs_json),
            Route("/runs/{run_id:path}", _run_page),
            Route("/api/runs/{run_id:path}", _run_json),
        ],
        middleware=[guard],
        exception_handlers={AgentfsmError: _failed},
        lifespan=_lifespan,
    )
    app.state.durable = _Durable(db)
    return app
