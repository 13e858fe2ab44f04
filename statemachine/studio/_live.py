"""The studio's live pages: what a run page and the index are sent as they change, and
which of two decisions on one request came first.

A run page holds its run's steps and messages as :func:`page_data` wrote them. As the
run moves, the page is sent (as JSON, over server-sent events) the steps and messages
it lacks, and the run's segments, status and waiting requests as they are now: the
table of messages grows with the run and never renumbers, so what the page holds stays
valid and its script appends what is new. Each event's id is the count of steps and
messages sent so far, so a browser that reconnects is sent only what it lacks.

The index is sent its rows (as the server writes them, text only) whenever a run of the
store is added, moves or changes status.

Two windows may decide the same request. Decisions are taken one at a time; each is
remembered by the digest of the request it answered (:func:`request_digest`, the one
the engine binds a decision with), so the second is answered with the first (409) in
words a reader understands, not a refusal.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Mapping, Sequence
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .._approval import request_digest
from .._errors import AgentfsmError
from .._machine import MachineTable, machine_named
from .._view import page_data, saved_run_data, unanswered_calls
from ..store import RunInfo, SavedRun, load_run
from ._catalog import Catalog
from ._forks import shown_status
from ._pages import DECIDED_AS, decided_words, index_change

__all__ = [
    "LIVE",
    "STREAM_FOR",
    "Referee",
    "counts",
    "forkable",
    "index_events",
    "index_mark",
    "run_change",
    "run_events",
    "stream",
    "waiting",
]

#: The statuses of a run that may still move: a page of one follows it.
LIVE: Final = frozenset({"running", "interrupted", "paused"})
#: How long one event stream lasts, in seconds; the browser then reconnects (and is sent
#: what changed since the last event it read), so no stream outlives a dead connection.
STREAM_FOR: Final = 300.0

#: How a decision is said: the decision's type as a reader reads it.


def counts(request: Request) -> tuple[int, int]:
    """The steps and messages a run page holds: the last event's id when the browser
    reconnects, else the page's own (``?steps=&messages=``)."""
    last = request.headers.get("last-event-id", "")
    if last.count(".") == 1:
        steps, messages = last.split(".")
    else:
        steps = request.query_params.get("steps", "0")
        messages = request.query_params.get("messages", "0")
    try:
        return max(0, int(steps)), max(0, int(messages))
    except ValueError:
        return 0, 0


def run_change(
    saved: SavedRun,
    table: MachineTable,
    clock: Sequence[float | None],
    *,
    head: str | None,
    steps_from: int,
    messages_from: int,
    unheld: Callable[[], Container[str]],
) -> dict[str, Any]:
    """What a run page holding ``steps_from`` steps and ``messages_from`` messages lacks,
    and the run as it is now (``from``/``messages_from`` say where the new rows go), in
    the status its page shows it with (``unheld``: the store's runs no lease holds, see
    :func:`~agentfsm.studio._forks.shown_status`)."""
    data = saved_run_data(saved, table, clock)
    if len(data["steps"]) < steps_from or len(data["messages"]) < messages_from:
        # Not the run the page holds (it was replaced): all of it, which the page refuses
        # to append, and starts afresh from.
        steps_from = messages_from = 0
    segments = data["segments"]
    ending = (segments[-1].get("outcome") or {}) if segments else {}
    waiting = saved.status == "interrupted"
    status = shown_status(saved.run_id, saved.status, saved.forked_from is not None, unheld)
    return {
        "head": head,
        "status": status,
        "live": status in LIVE,
        "from": steps_from,
        "steps": data["steps"][steps_from:],
        "messages_from": messages_from,
        "messages": data["messages"][messages_from:],
        "segments": segments,
        "usage": data["usage"],
        "elapsed": data["elapsed"],
        "version": data["version"],
        "requests": (ending.get("requests") or []) if waiting else [],
        "forkable": forkable(saved, table),
    }


def waiting(saved: SavedRun) -> list[dict[str, Any]]:
    """The action requests a waiting run shows, as the run page's outcome holds them."""
    if saved.status != "interrupted":
        return []
    table = machine_named(saved.trace.machine)
    data = page_data(saved.traces[-1:], table, title="", result=saved.result)
    outcome = data["segments"][-1].get("outcome") or {}
    requests: list[dict[str, Any]] = outcome.get("requests") or []
    return requests


def forkable(saved: SavedRun, table: MachineTable) -> list[int]:
    """The page's numbers of the steps a fork may start from: those into a working state."""
    dests = [t.dest for trace in saved.traces for t in trace]
    return [n for n, dest in enumerate(dests, 1) if dest not in table.terminals]


def index_mark(infos: Sequence[RunInfo]) -> str:
    """A short mark of the store's runs as the index lists them: it changes when a run
    is added or removed, moves, or changes status."""
    seen = sorted((i.run_id, i.status, i.updated, i.steps) for i in infos)
    text = json.dumps(seen, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def stream(
    request: Request,
    seen: str | None,
    look: Callable[[], Awaitable[str | None]],
    send: Callable[[str | None], Awaitable[tuple[str, Mapping[str, Any]]]],
    *,
    poll: float,
    first_id: str,
) -> StreamingResponse:
    """Server-sent events: ``look`` every ``poll`` seconds, and a ``change`` event (its id
    and JSON from ``send``) whenever what it sees is not ``seen``, for :data:`STREAM_FOR`
    seconds. The stream starts with ``first_id`` as its id, so the browser names it when
    it reconnects, and a browser that reconnects is sent how things stand at once (its
    page may have missed anything while it was cut off)."""
    if request.headers.get("last-event-id"):
        seen = None

    async def events() -> AsyncIterator[str]:
        nonlocal seen
        quiet = lived = 0.0
        yield f"retry: 1000\nid: {first_id}\n\n"
        while lived < STREAM_FOR and not await request.is_disconnected():
            now = await look()
            if now != seen:
                seen = now
                event_id, body = await send(now)
                text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
                yield f"id: {event_id}\nevent: change\ndata: {text}\n\n"
                quiet = 0.0
            elif quiet >= 10:
                yield ": still here\n\n"
                quiet = 0.0
            await asyncio.sleep(poll)
            quiet += poll
            lived += poll

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def run_events(request: Request, catalog: Catalog, run_id: str, *, poll: float) -> Response:
    """A run page's live updates: the steps and messages it lacks, and the run as it is."""
    held = list(counts(request))

    def change(head: str | None) -> dict[str, Any]:
        saved = load_run(catalog.store, run_id, strict=False)
        clock = catalog.clock(run_id, saved.steps)
        table = machine_named(saved.trace.machine)
        return run_change(
            saved,
            table,
            clock,
            head=head,
            steps_from=held[0],
            messages_from=held[1],
            unheld=catalog.store.unheld,
        )

    def mark() -> str | None:
        head = catalog.head(run_id)
        # A run its holder lets go of (a fork back at rest) writes no checkpoint: its page
        # is told as well, and shows it as the page would now.
        if head is not None and catalog.store.unheld(run_id):
            return head + ":unheld"
        return head

    async def look() -> str | None:
        return await asyncio.to_thread(mark)

    async def send(head: str | None) -> tuple[str, dict[str, Any]]:
        try:
            body = await asyncio.to_thread(change, head)
        except (AgentfsmError, ValueError, RecursionError) as exc:  # unreadable: said so
            return f"{held[0]}.{held[1]}", {"head": head, "problem": " ".join(str(exc).split())}
        held[0] += len(body["steps"])
        held[1] += len(body["messages"])
        return f"{held[0]}.{held[1]}", body

    first = f"{held[0]}.{held[1]}"
    return stream(request, request.query_params.get("head"), look, send, poll=poll, first_id=first)


def index_events(
    request: Request, catalog: Catalog, listing: Callable[[], Mapping[str, Any]], *, poll: float
) -> Response:
    """The index's rows (``listing()``, the page's filters), sent again whenever a run
    is added, moves or changes status."""

    async def look() -> str:
        return index_mark(await asyncio.to_thread(catalog.store.runs))

    async def send(mark: str | None) -> tuple[str, dict[str, Any]]:
        return mark or "", index_change(await asyncio.to_thread(listing))

    seen = request.query_params.get("mark")
    return stream(request, seen, look, send, poll=max(poll, 0.5), first_id=seen or "")


class Referee:
    """Decisions, one at a time (:attr:`lock`), and the first one on each request."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        #: What was decided on a request in this studio, by run and the request's digest
        #: (two runs of one script ask the same call ids, with the same digests).
        self._decided: dict[tuple[str, str], dict[str, Any]] = {}

    def remember(
        self,
        run_id: str,
        requests: Sequence[Mapping[str, Any]],
        decisions: Sequence[Mapping[str, Any]],
    ) -> None:
        """``decisions`` were taken on run ``run_id``'s ``requests`` (it resumed with them)."""
        by_digest = {r["digest"]: r for r in requests}
        for decision in decisions:
            request = by_digest.get(decision.get("digest"))
            if request is not None:
                self._decided[(run_id, request["digest"])] = {
                    "tool": request["tool"],
                    "call_id": request["call_id"],
                    "decision": DECIDED_AS.get(
                        str(decision.get("type")), str(decision.get("type"))
                    ),
                }

    def first(
        self, saved: SavedRun, decisions: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The run's waiting requests, and the answer to ``decisions`` if they come second:
        when a request they answer was decided already (here, or by whoever resumed the
        run), what was decided. None when they answer the run's requests as they stand,
        or requests the run never asked (the resume refuses those)."""
        table = machine_named(saved.trace.machine)
        data = page_data(saved.traces, table, title="", run_id=saved.run_id, result=saved.result)
        segments: list[dict[str, Any]] = data["segments"]
        waiting = saved.status == "interrupted" and bool(segments)
        ending = (segments[-1].get("outcome") or {}) if waiting else {}
        now: list[dict[str, Any]] = list(ending.get("requests") or [])
        sent = [str(d.get("digest")) for d in decisions]
        mine = {
            digest: said for (run, digest), said in self._decided.items() if run == saved.run_id
        }
        if all(s in {r["digest"] for r in now} for s in sent):
            return None, now
        asked = _asked(saved)
        if not any(s in asked or s in mine for s in sent):
            return None, now
        decided = []
        for digest in sent:
            if digest in mine:
                decided.append({**mine[digest], "where": "in another window"})
            elif digest in asked:
                number, call_id, tool = asked[digest]
                later = segments[number + 1] if number + 1 < len(segments) else {}
                found = [
                    d["decision"] for d in later.get("decisions") or [] if d["call_id"] == call_id
                ]
                decided.append(
                    {
                        "tool": tool,
                        "call_id": call_id,
                        "decision": found[0] if found else None,
                        "where": "elsewhere",
                    }
                )
        words = "; ".join(decided_words(d) for d in decided)
        return {"error": words, "decided": decided, "status": saved.status}, now


def _asked(saved: SavedRun) -> dict[str, tuple[int, str, str]]:
    """The requests the run's interrupts asked, by digest: the segment that asked each,
    its call id and tool (an interrupt asks for the calls it left unanswered)."""
    asked = {}
    for number, trace in enumerate(saved.traces):
        for call in unanswered_calls(trace) or ():
            shown = {
                "tool_call_id": call.call_id,
                "tool_name": call.name,
                "arguments": dict(call.arguments),
            }
            asked[request_digest(shown)] = (number, call.call_id, call.name)
    return asked
