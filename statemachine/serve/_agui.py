"""The AG-UI app: an agent's runs as typed events over SSE, approvals answered in-protocol.

``POST /`` takes a ``RunAgentInput``. A new ``runId`` starts a run of the agent,
saved in the store under that id (so the studio shows it), and streams its events.
Its ``runId`` again reconnects: the stream goes on from ``Last-Event-ID``. An input
with ``resume`` answers the interrupt its run ended with; the answer goes through
the store's compare-and-set claim, as every decision does, so the first answer wins
and each decision is bound to the request it was shown (the interrupt's id is the
request's digest). ``GET /runs/{runId}/events`` reads a run's stream too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import pydantic
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    ResumeEntry,
    RunAgentInput,
    TextPart,
    ToolMessage,
    UserMessage,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentfsm import (
    Agent,
    AgentState,
    ChainError,
    DecisionError,
    LLMChain,
    MachineTable,
    Message,
    ResumeError,
    Run,
    RunExistsError,
    RunInUseError,
    RunNotFoundError,
    ToolCall,
    ToolResult,
    restore_run,
    start_run,
)
from agentfsm.store import SQLiteStore, Store, checkpoint, load_run

from ._feed import Feed, Translator, approval_in, interrupts_of, replayed

__all__ = ["Served", "ServedMachine", "agui_routes"]

_log = logging.getLogger("agentfsm.serve")

_RUN_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: Seconds of silence after which a stream says it is still there.
KEEPALIVE: Final = 15.0


@attrs.frozen
class ServedMachine:
    """A machine you declared, served without an agent: each run starts at the table's
    first entry on ``chain(messages)``, with ``options``. Its runs are saved and
    streamed as an agent's are; an interrupted one is answered from Python (its
    answer is the machine's own), not over the protocol."""

    table: MachineTable
    chain: Callable[[tuple[Message, ...]], LLMChain]
    options: Mapping[str, Any] = attrs.field(factory=dict)

    def start(self, messages: tuple[Message, ...]) -> Run:
        self.table.options.of(self.options)
        entry = next(iter(self.table.entries.values()))
        return Run(self.table, self.chain(messages), entry, self.options)


class _InputError(ValueError):
    """A request the app refuses as sent (400)."""


class Served:
    """The app's state: the agent, the store, the live feeds and the tasks running."""

    def __init__(
        self, target: Agent | ServedMachine, store: Store | str, *, keep: int, going: int
    ) -> None:
        self.target = target
        self.store: Store = SQLiteStore(store) if isinstance(store, str) else store
        self._owns_store = isinstance(store, str)
        self.feeds: dict[str, Feed] = {}
        self.threads: dict[str, str] = {}  # thread id -> the run in the store it is on
        self.tasks: set[asyncio.Task[None]] = set()
        self.keep = keep
        self.going = going
        #: Runs going outside the AG-UI routes (A2A tasks), counted against ``going``.
        self.elsewhere: Mapping[str, Any] = {}

    async def close(self) -> None:
        """Stop the runs going (each saves itself paused, ``cancelled``), then the store."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._owns_store:
            close = getattr(self.store, "close", None)
            if close is not None:
                close()

    def _add(self, feed: Feed) -> None:
        """Keep ``feed``; past ``keep`` feeds, the oldest ended ones are let go."""
        self.feeds[feed.run_id] = feed
        if len(self.feeds) > self.keep:
            for run_id in [r for r, f in self.feeds.items() if f.ended]:
                del self.feeds[run_id]
                if len(self.feeds) <= self.keep:
                    break

    # ------------------------------------------------------------ runs

    def counted(self) -> int:
        """The runs going now, over both protocols."""
        return len(self.tasks) + len(self.elsewhere)

    def _room(self) -> None:
        if self.counted() >= self.going:
            raise _Busy(f"{self.counted()} runs are going, the most this app runs at once")

    def start(self, given: RunAgentInput) -> Feed:
        """A new run of the agent over the conversation sent, saved, going."""
        self._room()
        messages = conversation(given.messages)
        try:
            if isinstance(self.target, ServedMachine):
                run = self.target.start(messages)
                checkpoint(run, self.store, run_id=given.run_id)
            else:
                state = AgentState(messages=messages)
                run = start_run(self.target, state, self.store, run_id=given.run_id)
        except RunExistsError as exc:
            raise _Conflict(str(exc)) from exc
        feed = Feed(given.thread_id, given.run_id, given.run_id)
        self.threads[given.thread_id] = given.run_id
        self._go(run, feed)
        return feed

    async def resume(self, given: RunAgentInput) -> Feed:
        """The interrupted run the input answers, resumed with its answer, going."""
        assert given.resume is not None
        self._room()
        if not isinstance(self.target, Agent):
            raise _Conflict("this app serves a machine, not an agent: answer its runs in Python")
        saved = None
        for store_run in self._answered_runs(given):
            try:
                saved = await asyncio.to_thread(load_run, self.store, store_run, strict=False)
                break
            except RunNotFoundError:
                continue
        if saved is None:
            raise _InputError("a resume names the run it answers (parentRunId): no such run")
        store_run = saved.run_id
        state = saved.agent_state
        if saved.status != "interrupted" or state is None or not state.interrupt_data:
            raise _Conflict(f"run {store_run!r} is {saved.status}: it waits for no answer")
        answer = answer_of(store_run, state.interrupt_data, given.resume)
        try:
            run = await restore_run(self.target, store_run, self.store, answer)
        except (RunInUseError, ResumeError) as exc:
            raise _Conflict(str(exc)) from exc
        feed = Feed(given.thread_id, given.run_id, store_run)
        self.threads[given.thread_id] = store_run
        self._go(run, feed)
        return feed

    def _answered_runs(self, given: RunAgentInput) -> list[str]:
        """The saved runs the resume may answer, most likely first: the run its
        ``parentRunId`` streamed, that run itself, then the thread's last run."""
        parent = given.parent_run_id
        found = []
        if parent is not None:
            known = self.feeds.get(parent)
            found.append(parent if known is None else known.store_run_id)
        if given.thread_id in self.threads:
            found.append(self.threads[given.thread_id])
        return found

    async def saved(self, run_id: str, thread_id: str) -> Feed | None:
        """The stream of a run the app no longer keeps, made again from the store."""
        try:
            saved = await asyncio.to_thread(load_run, self.store, run_id, strict=False)
        except RunNotFoundError:
            return None
        return replayed(saved, thread_id)

    @property
    def agent(self) -> Agent:
        """The agent served (A2A serves agents only)."""
        if not isinstance(self.target, Agent):
            raise TypeError("A2A serves an Agent; this app serves a machine")
        return self.target

    def _go(self, run: Run, feed: Feed) -> None:
        self._add(feed)
        task = asyncio.create_task(_drive(run, feed), name=f"agentfsm serve {feed.run_id}")
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("%s stopped: %r", task.get_name(), task.exception())


class _Busy(RuntimeError):
    """As many runs are going as the app runs at once (429): try again later."""


class _Conflict(ValueError):
    """The run is not where the request needs it (409): taken, answered, or over."""


async def _drive(run: Run, feed: Feed) -> None:
    """Step ``run`` to its end, telling ``feed`` everything: the client is not awaited."""
    say = Translator(feed, len(run.chain.messages), lambda: _agent_state(run))
    say.started(run.table.name, run.table.version, run.state)
    run.chain = run.chain.add_callback({"on_llm_new_delta": lambda _chain, d: say.delta(d)})
    try:
        while not run.done:
            say.step_started(run.state)
            say.transition(await run.step())
    except Exception as exc:  # the store failed under it, say: the client hears of it
        say.crashed(exc)
        raise
    assert run.result is not None
    say.ended(run.result, run.result.chain.messages, run.pause_reason)


def _agent_state(run: Run) -> Mapping[str, Any]:
    state = run.chain.custom_context.get("state")
    return state if isinstance(state, Mapping) else {}


def conversation(messages: Sequence[Any]) -> tuple[Message, ...]:
    """The AG-UI conversation as agentfsm messages; the last one is the user's.

    System and developer messages are refused: the served agent's instructions are
    the server's, not the client's. Activity and reasoning messages are the client's
    own display and are left out.
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    for message in messages:
        if isinstance(message, UserMessage):
            out.append(Message.user(_text(message.content)))
        elif isinstance(message, AssistantMessage):
            calls = []
            for call in message.tool_calls or ():
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                except ValueError as exc:
                    raise _InputError(f"tool call {call.id!r}: arguments are not JSON") from exc
                if not isinstance(arguments, dict):
                    raise _InputError(f"tool call {call.id!r}: arguments are not a JSON object")
                calls.append(ToolCall(call.id, call.function.name, arguments))
                names[call.id] = call.function.name
            out.append(Message.assistant(message.content or "", tool_calls=calls))
        elif isinstance(message, ToolMessage):
            if message.tool_call_id not in names:
                raise _InputError(f"tool message answers no call: {message.tool_call_id!r}")
            result = ToolResult(
                message.tool_call_id,
                names[message.tool_call_id],
                _text(message.content),
                is_error=message.error is not None,
            )
            if out and out[-1].role == "tool":
                out[-1] = Message.tool([*out[-1].tool_results, result])
            else:
                out.append(Message.tool([result]))
        elif getattr(message, "role", None) in ("system", "developer"):
            raise _InputError("system and developer messages are the server's own")
    if not out or out[-1].role != "user":
        raise _InputError("a new run's conversation ends with the user's message")
    return tuple(out)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if all(isinstance(part, TextPart) for part in content):
        return "".join(part.text for part in content)
    raise _InputError("this agent takes text; send text parts only")


def answer_of(
    store_run: str, data: Mapping[str, Any], entries: Sequence[ResumeEntry]
) -> list[dict[str, Any]] | str | list[str]:
    """The answer the resume entries give the run's interrupt.

    For an approval (the run's own or a waiting subagent's): one decision per
    request, in request order, each carrying the digest its interrupt's id is (so it
    decides exactly the request shown). A cancelled entry rejects; a resolved one's
    payload is ``{"type": "approve" | "edit" | "reject", "arguments": {...}}`` (none:
    approve). An entry for an interrupt the run no longer asks is refused: its
    request changed since.
    """
    by_id = {entry.interrupt_id: entry for entry in entries}
    asked = interrupts_of(store_run, data)
    unknown = sorted(set(by_id) - {i.id for i in asked})
    if unknown:
        raise _Conflict(f"the run does not ask {unknown[:3]}: its requests changed since")
    missing = [i.id for i in asked if i.id not in by_id]
    if missing:
        raise _InputError(f"answer every interrupt the run asks; missing {missing[:3]}")
    asking = approval_in(data)
    if asking is None:
        texts = []
        for interrupt in asked:
            entry = by_id[interrupt.id]
            if entry.status == "cancelled":
                texts.append("The user declined to answer.")
            elif isinstance(entry.payload, str):
                texts.append(entry.payload)
            else:
                raise _InputError("a question's answer is text: send a string payload")
        return texts[0] if len(texts) == 1 else texts
    decisions = []
    for request in asking[0].requests:
        entry = by_id[request.digest]
        payload = entry.payload if entry.payload is not None else {"type": "approve"}
        if entry.status == "cancelled":
            payload = {"type": "reject"}
        if not isinstance(payload, Mapping) or payload.get("type") not in (
            "approve",
            "edit",
            "reject",
        ):
            raise _InputError("a decision's payload is {'type': 'approve' | 'edit' | 'reject'}")
        decision = {
            "type": payload["type"],
            "digest": request.digest,
            "tool_call_id": request.tool_call_id,
        }
        if payload["type"] == "edit":
            decision["arguments"] = payload.get("arguments")
        decisions.append(decision)
    return decisions


def _error(status: int, text: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(text.split())[:500]}, status)


def _after(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    return int(raw) if raw.isdigit() else 0


def _stream(feed: Feed, after: int) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        async for told in feed.follow(after, KEEPALIVE):
            yield ": still here\n\n" if told is None else _sse(*told)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def _sse(number: int, event: BaseEvent) -> str:
    return f"id: {number}\ndata: {event.model_dump_json(by_alias=True)}\n\n"


def agui_routes(served: Served) -> list[Route]:
    """The AG-UI endpoint and the stream of a run already going."""

    async def run(request: Request) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error(415, "send the RunAgentInput as application/json")
        try:
            given = RunAgentInput.model_validate_json(await request.body())
        except pydantic.ValidationError as exc:
            return _error(422, f"not a RunAgentInput: {exc.errors()[0].get('msg', '')}")
        if not _RUN_ID.fullmatch(given.run_id) or not _RUN_ID.fullmatch(given.thread_id):
            return _error(400, "threadId and runId: letters, digits, '.', '_', ':', '-'")
        known = served.feeds.get(given.run_id)
        if known is not None:  # the same run again: a client back after losing its stream
            if known.thread_id != given.thread_id:
                return _error(409, f"run {given.run_id!r} is another thread's")
            return _stream(known, _after(request))
        if not given.resume:
            again = await served.saved(given.run_id, given.thread_id)
            if again is not None:  # a run of the store this app no longer streams
                return _stream(again, _after(request))
        try:
            feed = await served.resume(given) if given.resume else served.start(given)
        except _InputError as exc:
            return _error(400, str(exc))
        except _Busy as exc:
            return JSONResponse({"error": str(exc)}, 429, headers={"Retry-After": "1"})
        except DecisionError as exc:
            return _error(400, str(exc))
        except RunNotFoundError as exc:
            return _error(404, str(exc))
        except _Conflict as exc:
            return _error(409, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        except ChainError as exc:  # a middleware's before_model hook refused the run
            return _error(422, str(exc))
        return _stream(feed, _after(request))

    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        feed = served.feeds.get(run_id)
        if feed is None and _RUN_ID.fullmatch(run_id):
            feed = await served.saved(run_id, run_id)
        if feed is None:
            return _error(404, f"no run {run_id!r} here or in the store")
        return _stream(feed, _after(request))

    return [
        Route("/", run, methods=["POST"]),
        Route("/runs/{run_id}/events", events, methods=["GET"]),
    ]


def make_app(served: Served, routes: list[Any], middleware: list[Any]) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await served.close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.served = served
    return app
