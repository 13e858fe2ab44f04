"""The studio over a durable engine: a DBOS database or a Temporal server's runs.

``agentfsm studio --db temporal://HOST:PORT/NAMESPACE`` (or a DBOS database) serves an
index of the engine's runs, as ``agentfsm runs list`` lists them (status, agent, task
queue, the worker that last ran each, why one is orphaned), and each run's page, the
page ``agentfsm view`` writes: a Temporal run still going as far as it went (its
progress query, answered by a worker of its task queue); two runs side by side. A run
waiting for approval shows its requests in a form (no script: a plain POST carrying the
page's CSRF token), and the decision goes through the engine's own ``decide``, so the
first decision wins in whichever process sends it, and a later different one is told
which won (409). Every value from the engine goes through :func:`html.escape`.

One idea: the app over a durable engine, as ``_app`` is the app over a store: its routes,
pages and decisions all read and act through the one engine it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hmac
import html
import json
import secrets
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib.resources import files
from typing import Any, Final
from urllib.parse import parse_qs, quote

import attrs
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route

from .._approval import Approval, DecisionError
from .._compare import compare_runs
from .._durable_readers import open_engine, read_run, terminal
from .._durable_records import RunRecord, RunResult
from .._durable_shared import CONTINUATION
from .._errors import AgentfsmError, DecisionConflictError, ResumeError, RunNotFoundError
from .._machine import UnknownMachineError, machine_named
from .._serialization import dump_trace
from .._view import page
from ..store import SavedRun
from ._compare_page import compare_form, compare_page
from ._pages import DECIDED_AS, decided_words, document, select

__all__ = ["create_durable_app", "unknown_machine_page"]

#: The order of the index: runs waiting for a human first, then those nothing runs.
_FIRST: Final = {"waiting": 0, "orphaned": 1, "running": 2, "queued": 3}
#: The header a JSON decision carries the page's CSRF token in (the store's studio's).
_CSRF_HEADER: Final = "X-CSRF-Token"


def _style() -> str:
    return files(__package__ or __name__).joinpath("studio.css").read_text(encoding="utf-8")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _link(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


class _Durable:
    """The app's one engine (opened on first use, closed with the app), and the token a
    decision carries (the page's, so no other site can send one)."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.csrf = secrets.token_urlsafe(32)
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


#: The newest runs an index lists: a durable engine lists its workflows newest first.
LISTED: Final = 200

#: What the index filters on: a run's status, agent and queue, each chosen from those listed.
_FILTERS: Final = ("status", "agent", "queue")


def _listing(
    durable: _Durable, filters: Mapping[str, str]
) -> tuple[list[RunRecord], list[RunRecord]]:
    """The :data:`LISTED` newest runs (those waiting for a human first), and those of them
    ``filters`` pick: ``status``, ``agent`` and ``queue`` equal, ``q`` in the run's id or
    why (any case). A value no run has picks none, as on the store's index."""
    every = sorted(
        durable.engine().runs(limit=LISTED),
        key=lambda r: (_FIRST.get(r.status, 4), -(r.updated or 0.0), r.run_id),
    )
    wanted = {k: filters.get(k, "") for k in _FILTERS}
    needle = filters.get("q", "").strip().lower()
    picked = [
        r
        for r in every
        if all(not v or getattr(r, k) == v for k, v in wanted.items())
        and (not needle or needle in r.run_id.lower() or needle in (r.reason or "").lower())
    ]
    return every, picked


def _filters_of(request: Request) -> dict[str, str]:
    return {k: request.query_params.get(k, "") for k in (*_FILTERS, "q")}


def _index_html(durable: _Durable, filters: Mapping[str, str]) -> str:
    every, runs = _listing(durable, filters)
    rows = "\n".join(
        f'<tr class="{_e(r.status)}" data-run="{_e(r.run_id)}">'
        f'<td><a href="{_e(_link(r.run_id))}">{_e(r.run_id)}</a></td>'
        f'<td><span class="badge {_e(r.status)}">{_e(r.status)}</span></td>'
        f"<td>{_e(r.agent or '-')}</td><td>{_e(r.queue or '-')}</td>"
        f"<td>{_e(r.executor or '-')}</td><td>{_e(_when(r.created))}</td>"
        f"<td>{_e(_when(r.updated))}</td>"
        f'<td class="summary">{_e(r.reason or "")}</td></tr>'
        for r in runs
    ) or (
        '<tr><td colspan="8" class="empty">No runs match.</td></tr>'
        if every
        else '<tr><td colspan="8" class="empty">No durable runs yet: start a worker on '
        "this database (<code>agentfsm worker --db URL module:agent</code>) and submit "
        "one (<code>Engine(URL).submit(...)</code>).</td></tr>"
    )
    counts: dict[str, int] = {}
    for r in every:
        counts[r.status] = counts.get(r.status, 0) + 1
    tally = " · ".join(f"{_e(s)} {n}" for s, n in sorted(counts.items()))
    newest = f"the {LISTED} newest" if len(every) >= LISTED else f"{len(every)}"
    selects = "\n  ".join(
        select(k, k, sorted({str(v) for r in every if (v := getattr(r, k))}), filters[k])
        for k in _FILTERS
    )
    body = f"""<header>
  <h1>agentfsm studio</h1>
  <div class="sub">{_e(durable.db)} · {newest} durable runs · {tally} ·
  <a href="/compare">compare two runs</a></div>
</header>
<form id="filters" method="get" action="/">
  {selects}
  <label>text <input type="search" name="q" value="{_e(filters.get("q", ""))}"
    placeholder="run id or why"></label>
  <button type="submit">Show</button>
</form>
<div class="scroll">
<table id="runs">
<thead><tr><th>run</th><th>status</th><th>agent</th><th>queue</th><th>worker</th>
<th>started</th><th>updated</th><th>why</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
</div>
<nav id="pager"><span id="shown">{len(runs)} shown</span></nav>"""
    return document("runs", _style(), body)


# ---------------------------------------------------------------- deciding


def _approval(
    record: RunRecord, result: RunResult | None, waiting: Mapping[str, Any] | None
) -> Approval | None:
    """What the run waits on a reviewer for: the request it waits on now, or (a run whose
    wait timed out, ended ``interrupted``) the one it ended asking; None when neither."""
    data: Any = waiting
    if data is None and record.status == "interrupted" and result is not None:
        data = result.state.interrupt_data
    if not Approval.is_approval(data):
        return None
    try:
        return Approval.of(data)
    except DecisionError:
        return None


def _request_box(index: int, approval: Approval) -> str:
    request = approval.requests[index]
    allowed = approval.allowed(request.tool_name) or ["approve", "edit", "reject"]
    # One radio button per decision, none checked: the browser sends nothing until the
    # user chose (``required``), and the server refuses a request left undecided.
    options = "".join(
        f'<label class="choice"><input type="radio" name="decision-{index}" '
        f'value="{_e(k)}" required> {_e(k)}</label>'
        for k in allowed
    )
    arguments = json.dumps(dict(request.arguments), indent=2, ensure_ascii=False)
    edit = (
        f'<label>edited arguments (JSON, for "edit")<textarea name="arguments-{index}" '
        f'rows="4">{_e(arguments)}</textarea></label>'
        if "edit" in allowed
        else ""
    )
    return (
        f'<fieldset class="decide" data-call="{_e(request.tool_call_id)}">'
        f"<legend>{_e(request.tool_name)} ({_e(request.tool_call_id)})</legend>"
        f"<pre>{_e(request.display_text)}\n{_e(arguments)}</pre>"
        f'<p class="digest">digest <code>{_e(request.digest)}</code></p>'
        f'<input type="hidden" name="digest-{index}" value="{_e(request.digest)}">'
        f'<div class="choices">decision {options}</div>{edit}'
        "</fieldset>"
    )


def _decision_html(
    durable: _Durable,
    record: RunRecord,
    result: RunResult | None,
    approval: Approval,
    said: str = "",
) -> str:
    run_id = record.run_id
    boxes = "".join(_request_box(i, approval) for i in range(len(approval.requests)))
    path = (
        f' · <a href="{_e(_link(run_id))}?path=1">its path so far</a>' if result is not None else ""
    )
    everyone = all(
        "approve" in (approval.allowed(r.tool_name) or ["approve"]) for r in approval.requests
    )
    approve_all = (
        '<button type="submit" name="all" value="approve" id="approve" formnovalidate>'
        "Approve all</button>"
        if everyone
        else ""
    )
    note = f'<p class="problem" id="said">{_e(said)}</p>' if said else ""
    body = f"""<header>
  <a class="back" href="/">← all runs</a>
  <h1>run {_e(run_id)}</h1>
  <div class="sub"><span class="badge {_e(record.status)}">{_e(record.status)}</span>
  · agent {_e(record.agent or "-")} · {_e(durable.db)}{path}</div>
</header>
{note}
<form id="decide" method="post" action="{_e(_link(run_id))}/decide">
  <strong>This run waits for your decision</strong>
  <input type="hidden" name="csrf" value="{_e(durable.csrf)}">
  {boxes}
  <div>{approve_all}<button type="submit" id="send">Send decisions</button></div>
</form>"""
    return document(f"run {run_id}", _style(), body)


#: What a page reached after a decision says (``?said=``).
_SAID: Final = {
    "decided": "Your decision was sent; the run takes it and goes on.",
    "gone": "This run no longer waits for a decision.",
}


def _decisions_of(form: Mapping[str, list[str]], approval: Approval) -> list[dict[str, Any]]:
    """The decisions a posted form names, one per request, each bound to its digest."""
    everyone = (form.get("all") or [""])[0]
    out: list[dict[str, Any]] = []
    for index in range(len(approval.requests)):
        kind = everyone or (form.get(f"decision-{index}") or [""])[0]
        if not kind:
            request = approval.requests[index]
            raise ValueError(
                f"choose a decision for {request.tool_name} ({request.tool_call_id}): "
                "none is made for you"
            )
        digest = (form.get(f"digest-{index}") or [""])[0]
        decision: dict[str, Any] = {"type": kind, "digest": digest}
        if kind == "edit":
            text = (form.get(f"arguments-{index}") or ["{}"])[0]
            try:
                decision["arguments"] = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"the edited arguments are not JSON: {exc}") from None
        out.append(decision)
    return out


def _won(engine: Any, run_id: str, exc: ResumeError) -> list[dict[str, Any]] | None:
    """The decisions that won a run's wait, when a decision came too late."""
    if isinstance(exc, DecisionConflictError) and exc.decisions is not None:
        return [dict(d) for d in exc.decisions]
    ledger = getattr(engine, "ledger", None)
    if ledger is None:
        return None
    try:
        claims = ledger.decided(run_id, CONTINUATION)
    except Exception:  # the ledger says who won; without it the refusal stands alone
        return None
    return [dict(d) for d in claims[0]] if claims else None


def _decide_now(
    durable: _Durable, run_id: str, decisions: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Send ``decisions`` through the engine's own ``decide``; None when sent (or a repeat
    of the ones the run took), else the refusal: why, and the decisions that won."""
    engine = durable.engine()
    record, result, waiting = read_run(engine, run_id)
    approval = _approval(record, result, waiting)
    asked = {r.tool_call_id: r for r in approval.requests} if approval is not None else {}
    by_digest = {r.digest: r for r in asked.values()}
    try:
        engine.decide(run_id, list(decisions))
    except ResumeError as exc:
        won = _won(engine, run_id, exc)
        decided = []
        for d in won or ():
            request = by_digest.get(str(d.get("digest"))) or asked.get(str(d.get("tool_call_id")))
            decided.append(
                {
                    "tool": request.tool_name if request is not None else None,
                    "call_id": d.get("tool_call_id")
                    or (request.tool_call_id if request is not None else None),
                    "decision": DECIDED_AS.get(str(d.get("type")), "approved"),
                    "where": "elsewhere",
                }
            )
        status = engine.status(run_id).status
        # the store's studio's shape (error, decided, status), and the decisions that won
        return {
            "error": _one_line(exc),
            "decided": decided,
            "status": status,
            "run_id": run_id,
            "decisions": won,
        }
    return None


def _check_action(request: Request, sent: str, durable: _Durable) -> str | None:
    """Why an action is refused (the CSRF token, another site's page), or None."""
    if not hmac.compare_digest(sent, durable.csrf):
        return "missing or wrong CSRF token"
    # A form posted under the pages' no-referrer policy says its origin is "null".
    origin = request.headers.get("origin", "null")
    if origin != "null" and origin != f"{request.url.scheme}://{request.url.netloc}":
        return "a decision comes from the studio's own page"
    return None


async def _decide_form(request: Request) -> Response:
    """A decision posted from a run's page: sent, then the run's page again (or why not)."""
    durable = _state(request)
    run_id = request.path_params["run_id"]
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    refused = _check_action(request, (form.get("csrf") or [""])[0], durable)
    if refused is not None:
        return PlainTextResponse(refused, 403)
    try:
        record, result, waiting = await asyncio.to_thread(read_run, durable.engine(), run_id)
    except RunNotFoundError as exc:
        return PlainTextResponse(_one_line(exc), 404)
    approval = _approval(record, result, waiting)
    if approval is None:
        return RedirectResponse(_link(run_id) + "?said=gone", 303)
    try:
        decisions = _decisions_of(form, approval)
    except ValueError as exc:
        return HTMLResponse(_decision_html(durable, record, result, approval, _one_line(exc)), 400)
    try:
        refusal = await asyncio.to_thread(_decide_now, durable, run_id, decisions)
    except ValueError as exc:
        return HTMLResponse(_decision_html(durable, record, result, approval, _one_line(exc)), 400)
    if refusal is not None:
        decided = refusal["decided"]
        text = "; ".join(decided_words(d) for d in decided) if decided else refusal["error"]
        return HTMLResponse(_decision_html(durable, record, result, approval, text), 409)
    return RedirectResponse(_link(run_id) + "?said=decided", 303)


async def _decide_json(request: Request) -> Response:
    """``{"decisions": [...]}`` with the page's CSRF token: 202 when sent, 409 with the
    decisions that won when another decision came first."""
    durable = _state(request)
    run_id = request.path_params["run_id"]
    refused = _check_action(request, request.headers.get(_CSRF_HEADER, ""), durable)
    if refused is not None:
        return JSONResponse({"error": refused}, 403)
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse({"error": "the body is not JSON"}, 400)
    decisions = body.get("decisions") if isinstance(body, Mapping) else None
    if not isinstance(decisions, list) or not all(isinstance(d, Mapping) for d in decisions):
        return JSONResponse({"error": "send {'decisions': [one object per request]}"}, 400)
    try:
        refusal = await asyncio.to_thread(_decide_now, durable, run_id, decisions)
    except RunNotFoundError as exc:
        return JSONResponse({"error": _one_line(exc)}, 404)
    except ValueError as exc:
        return JSONResponse({"error": _one_line(exc)}, 400)
    if refusal is not None:
        return JSONResponse(refusal, 409)
    return JSONResponse({"run_id": run_id, "resumed": True}, 202)


# ---------------------------------------------------------------- showing


def unknown_machine_page(run_id: str, exc: UnknownMachineError) -> str:
    """The page of a run made on a machine the studio was not told of, and the flag that
    tells it."""
    body = f"""<header>
  <a class="back" href="/">← all runs</a>
  <h1>run {_e(run_id)} cannot be drawn</h1>
</header>
<p class="problem">{_e(_one_line(exc))}</p>
<p>Start the studio with <code>--machines MODULE</code>, the module that declares the
machine (repeatable; or <code>AGENTFSM_MACHINES=MODULE</code>):
<code>agentfsm studio --db STORE --machines MODULE</code>.</p>"""
    return document(f"run {run_id}", _style(), body)


def _run_html(durable: _Durable, run_id: str, *, path: bool = False, said: str = "") -> str:
    record, result, waiting = read_run(durable.engine(), run_id)
    approval = _approval(record, result, waiting)
    if approval is not None and not path:
        return _decision_html(durable, record, result, approval, _SAID.get(said, ""))
    if result is None or not result.traces:
        done = "the decision was sent: " if said == "decided" else ""
        what = "waits for decisions" if waiting is not None else f"is {record.status}"
        why = f": {record.reason}" if record.reason else ""
        raise _Unshown(f"{done}run {run_id} {what}{why}; it has no path to draw yet")
    table = machine_named(result.traces[-1].machine)
    return page(
        result.traces, title=f"run {run_id}", table=table, run_id=run_id, result=terminal(result)
    )


class _Unshown(ValueError):
    """A run with no path to draw yet (queued, or no worker to tell it)."""


def _saved(durable: _Durable, run_id: str) -> SavedRun:
    """A durable run as a comparison reads it (its path and where it ended)."""
    record, result, _ = read_run(durable.engine(), run_id)
    if result is None or not result.traces:
        raise _Unshown(f"run {run_id} is {record.status}; it has no path to compare yet")
    steps = [t for trace in result.traces for t in trace.transitions]
    if not steps:
        raise _Unshown(f"run {run_id} took no step; it has no path to compare yet")
    return SavedRun(
        run_id=run_id,
        status=result.state.status,  # type: ignore[arg-type]
        state=steps[-1].dest,
        chain=steps[-1].chain,
        traces=result.traces,
        options={},
        result=terminal(result),
        agent_state=result.state,
        messages=(),
        contexts=(),
    )


async def _index(request: Request) -> Response:
    return HTMLResponse(await asyncio.to_thread(_index_html, _state(request), _filters_of(request)))


async def _runs_json(request: Request) -> Response:
    _, runs = await asyncio.to_thread(_listing, _state(request), _filters_of(request))
    return JSONResponse({"runs": [attrs.asdict(r) for r in runs]})


async def _run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    path = request.query_params.get("path") == "1"
    said = request.query_params.get("said", "")
    try:
        text = await asyncio.to_thread(_run_html, _state(request), run_id, path=path, said=said)
    except RunNotFoundError as exc:
        return PlainTextResponse(_one_line(exc), 404)
    except UnknownMachineError as exc:
        return HTMLResponse(unknown_machine_page(run_id, exc), 422)
    except _Unshown as exc:
        return PlainTextResponse(_one_line(exc), 422)
    return HTMLResponse(text)


async def _run_json(request: Request) -> Response:
    durable = _state(request)
    run_id = request.path_params["run_id"]
    try:
        record, result, waiting = await asyncio.to_thread(read_run, durable.engine(), run_id)
    except RunNotFoundError as exc:
        return JSONResponse({"error": _one_line(exc)}, 404)
    doc: dict[str, Any] = attrs.asdict(record)
    doc["waiting"] = dict(waiting) if waiting is not None else None
    approval = _approval(record, result, waiting)
    doc["requests"] = (
        []
        if approval is None
        else [
            {**r.to_data(), "digest": r.digest, "allowed": approval.allowed(r.tool_name)}
            for r in approval.requests
        ]
    )
    if result is not None:
        doc["ends"] = list(result.ends)
        doc["traces"] = [dump_trace(t) for t in result.traces]
    return JSONResponse(doc)


async def _compare(request: Request) -> Response:
    durable = _state(request)
    a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
    if not a or not b:
        runs = await asyncio.to_thread(lambda: durable.engine().runs(limit=200))
        problem = "pick two runs to compare" if request.query_params else ""
        return HTMLResponse(compare_form([r.run_id for r in runs], {"a": a, "b": b}, problem))

    def both() -> str:
        sides = (_saved(durable, a), _saved(durable, b))
        tables = (machine_named(sides[0].trace.machine), machine_named(sides[1].trace.machine))
        return compare_page(compare_runs(*sides), sides, tables)

    try:
        return HTMLResponse(await asyncio.to_thread(both))
    except RunNotFoundError as exc:
        return HTMLResponse(compare_form([], {"a": a, "b": b}, _one_line(exc)), 404)
    except (_Unshown, UnknownMachineError) as exc:
        return HTMLResponse(compare_form([], {"a": a, "b": b}, _one_line(exc)), 422)


async def _compare_json(request: Request) -> Response:
    durable = _state(request)
    a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
    if not a or not b:
        return JSONResponse({"error": "name the two runs: ?a=RUN&b=RUN"}, 400)
    try:
        sides = await asyncio.to_thread(lambda: (_saved(durable, a), _saved(durable, b)))
    except RunNotFoundError as exc:
        return JSONResponse({"error": _one_line(exc)}, 404)
    except _Unshown as exc:
        return JSONResponse({"error": _one_line(exc)}, 422)
    return JSONResponse(compare_runs(*sides).as_json())


async def _failed(request: Request, exc: Exception) -> Response:
    """The engine's own failures (a server down, a run it cannot read) in one line."""
    return PlainTextResponse(_one_line(exc), 502)


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
            Route("/compare", _compare),
            Route("/api/compare", _compare_json),
            Route("/api/runs", _runs_json),
            Route("/runs/{run_id:path}/decide", _decide_form, methods=["POST"]),
            Route("/runs/{run_id:path}", _run_page),
            Route("/api/runs/{run_id:path}/decide", _decide_json, methods=["POST"]),
            Route("/api/runs/{run_id:path}", _run_json),
        ],
        middleware=[guard],
        exception_handlers={AgentfsmError: _failed},
        lifespan=_lifespan,
    )
    app.state.durable = _Durable(db)
    return app
