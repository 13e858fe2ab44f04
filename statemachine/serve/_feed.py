"""A run's AG-UI events as they happen, kept so that a client that comes back reads on.

The machine's run goes on in its own task whatever the client does; its events go
into a :class:`Feed`, numbered from 1. A client reads the feed from any number on
(SSE ``Last-Event-ID``), so a dropped connection loses nothing: the run was never
the connection's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from ag_ui.core import AssistantMessage as UIAssistant
from ag_ui.core import (
    BaseEvent,
    EventType,
    Interrupt,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core import FunctionCall as UIFunctionCall
from ag_ui.core import ToolCall as UIToolCall
from ag_ui.core import ToolMessage as UIToolMessage
from ag_ui.core import UserMessage as UIUserMessage

from agentfsm import (
    Approval,
    Failed,
    Interrupted,
    Message,
    MessageDelta,
    Ok,
    Paused,
    Trace,
    Transition,
)

__all__ = [
    "ENDS",
    "Feed",
    "Translator",
    "approval_in",
    "interrupts_of",
    "message_id",
    "replayed",
]

#: The events after which a feed has nothing more to say.
ENDS = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})


class Feed:
    """One AG-UI run's events in order; readers wait for the next one."""

    def __init__(self, thread_id: str, run_id: str, store_run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        #: The run in the store these events are of (a resume adds a feed to it).
        self.store_run_id = store_run_id
        self.events: list[BaseEvent] = []
        self._moved = asyncio.Event()

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1].type in ENDS

    def emit(self, event: BaseEvent) -> None:
        self.events.append(event)
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def follow(
        self, after: int = 0, quiet: float | None = None
    ) -> AsyncIterator[tuple[int, BaseEvent] | None]:
        """``(number, event)`` from number ``after + 1`` on, to the run's end; None after
        each ``quiet`` seconds with no event (for the stream to say it is still there)."""
        seen = max(after, 0)
        while True:
            while seen < len(self.events):
                event = self.events[seen]
                seen += 1
                yield seen, event
                if event.type in ENDS:
                    return
            if self.ended:
                return
            try:
                await asyncio.wait_for(asyncio.shield(self._moved.wait()), quiet)
            except TimeoutError:
                yield None


def message_id(store_run_id: str, index: int) -> str:
    """The AG-UI id of the conversation's ``index``-th message: the same on every replay."""
    return f"{store_run_id}:m{index}"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def approval_in(data: Mapping[str, Any]) -> tuple[Approval, list[str]] | None:
    """The approval an interrupt asks, and the subagents it waits in (outermost first):
    the run's own, or a waiting subagent's (``{"type": "subagent", "request": ...}``,
    nested as deep as the subagents are). None for a tool's own question."""
    path: list[str] = []
    while data.get("type") == "subagent" and isinstance(data.get("request"), Mapping):
        path.append(str(data.get("subagent")))
        data = data["request"]
    return (Approval.of(data), path) if Approval.is_approval(data) else None


def interrupts_of(store_run_id: str, data: Mapping[str, Any]) -> list[Interrupt]:
    """The AG-UI interrupts an interrupted run asks: one per gated call (its own or a
    waiting subagent's), identified by the digest of the request it decides (so the
    answer is bound to what was shown), or one per tool that asked its own question."""
    asking = approval_in(data)
    if asking is not None:
        approval, path = asking
        return [
            Interrupt(
                id=request.digest,
                reason="tool_approval",
                message=request.display_text or f"Run {request.tool_name}?",
                tool_call_id=request.tool_call_id,
                response_schema=_decision_schema(approval.allowed(request.tool_name)),
                metadata={
                    "run_id": store_run_id,
                    "subagents": path,
                    "tool_name": request.tool_name,
                    "arguments": _jsonable(dict(request.arguments)),
                    "allowed_decisions": approval.allowed(request.tool_name),
                },
            )
            for request in approval.requests
        ]
    asked: Sequence[Mapping[str, Any]] = data.get("interrupts") or [data]
    found = []
    for index, one in enumerate(asked):
        call = str(one.get("tool_call_id") or "")
        found.append(
            Interrupt(
                id=f"{store_run_id}:{call or index}",
                reason="input_required",
                message=str(one.get("question") or one.get("text") or one.get("type") or ""),
                tool_call_id=call or None,
                response_schema={"type": "string"},
                metadata={"run_id": store_run_id, "data": _jsonable(dict(one))},
            )
        )
    return found


def _decision_schema(allowed: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "type": {"enum": list(allowed)},
            "arguments": {"type": "object"},
        },
        "required": ["type"],
    }


class Translator:
    """A run's transitions, deltas and end as AG-UI events, into a feed.

    Steps are the machine's states: ``STEP_STARTED`` as a state's work begins,
    ``STEP_FINISHED`` (its trigger and destination in ``metadata``) when the
    transition is taken. Messages are read from the chain each transition carried,
    so the events of a saved run can be made again from its trace.
    """

    def __init__(self, feed: Feed, messages: int, state: Callable[[], Mapping[str, Any]]) -> None:
        self.feed = feed
        self._seen = messages  # messages of the chain already told
        self._state = state
        self._shown: dict[str, Any] = {}
        self._text: str | None = None  # the streamed reply's message id, while it streams
        self._thinking: str | None = None
        self._discarded = False
        self._subagents = 0

    # ------------------------------------------------------------ the run's life

    def started(self, machine: str, version: int, at: str) -> None:
        self.feed.emit(RunStartedEvent(thread_id=self.feed.thread_id, run_id=self.feed.run_id))
        self._shown = self.snapshot(machine, version, at)
        self.feed.emit(StateSnapshotEvent(snapshot=self._shown))

    def snapshot(self, machine: str, version: int, at: str) -> dict[str, Any]:
        return {
            "run_id": self.feed.store_run_id,
            "machine": {"name": machine, "version": version, "state": at},
            "state": _jsonable(dict(self._state())),
        }

    def step_started(self, state: str) -> None:
        self.feed.emit(StepStartedEvent(step_name=state))

    def delta(self, delta: MessageDelta) -> None:
        """A piece of the reply being streamed (``on_llm_new_delta``)."""
        kind = delta.kind
        if kind == "discard":
            self._end_thinking()
            self._discarded = True  # what was shown stays; the whole reply follows
            return
        if kind == "thinking":
            if self._thinking is None:
                self._thinking = message_id(self.feed.store_run_id, self._seen) + ":thinking"
                self.feed.emit(ReasoningStartEvent(message_id=self._thinking))
                self.feed.emit(ReasoningMessageStartEvent(message_id=self._thinking))
            self.feed.emit(
                ReasoningMessageContentEvent(message_id=self._thinking, delta=delta.thinking)
            )
            return
        if kind == "text" and delta.content:
            self._end_thinking()
            if self._text is None:
                self._text = message_id(self.feed.store_run_id, self._seen)
                if self._discarded:
                    self._text += ":retry"
                self.feed.emit(TextMessageStartEvent(message_id=self._text, role="assistant"))
            self.feed.emit(TextMessageContentEvent(message_id=self._text, delta=delta.content))

    def transition(self, transition: Transition) -> None:
        """The child runs the work made, the messages it added, then the step's end, then
        the state's change."""
        self._end_thinking()
        for child in transition.children:
            self._child(child, None)
        messages = transition.chain.messages
        if len(messages) < self._seen:
            self._seen = len(messages)  # a shorter conversation (compacted): tell what is new
        for index in range(self._seen, len(messages)):
            self._message(index, messages[index])
        self._seen = len(messages)
        if self._text is not None:  # streamed, and no reply came of it (the call failed)
            self.feed.emit(TextMessageEndEvent(message_id=self._text))
            self._text = None
        self._discarded = False
        self.feed.emit(
            StepFinishedEvent(
                step_name=transition.source,
                metadata={"trigger": transition.trigger, "dest": transition.dest},
            )
        )
        machine = {**self._shown["machine"], "state": transition.dest}
        now = {**self._shown, "machine": machine, "state": _jsonable(dict(self._state()))}
        patch = _patch(self._shown, now)
        if patch:
            self.feed.emit(StateDeltaEvent.model_validate({"delta": patch}))
        self._shown = now

    def ended(self, result: Any, messages: Sequence[Message], pause_reason: Any = None) -> None:
        """The run's end: its conversation, then RUN_FINISHED (or RUN_ERROR); a paused
        run's reason is the run's (``Run.pause_reason``)."""
        self.feed.emit(
            MessagesSnapshotEvent(messages=ui_messages(self.feed.store_run_id, messages))
        )
        match result:
            case Ok(chain):
                text = chain.last_message.text if chain.last_message is not None else ""
                self._finished({"status": "ok", "text": text}, RunFinishedSuccessOutcome())
            case Interrupted(_, data):
                self._finished(
                    {"status": "interrupted", "at": result.state},
                    RunFinishedInterruptOutcome(
                        interrupts=interrupts_of(self.feed.store_run_id, data)
                    ),
                )
            case Paused():
                self._finished(
                    {"status": "paused", "reason": _jsonable(pause_reason)},
                    RunFinishedCancelledOutcome(),
                )
            case Failed(_, error):
                self.feed.emit(RunErrorEvent(message=error.message, code=error.type))

    def _finished(self, result: dict[str, Any], outcome: Any) -> None:
        self.feed.emit(
            RunFinishedEvent(
                thread_id=self.feed.thread_id,
                run_id=self.feed.run_id,
                result=result,
                outcome=outcome,
            )
        )

    def crashed(self, error: BaseException) -> None:
        """The run could not go on (its store failed, say): the client is told so."""
        self._end_thinking()
        if self._text is not None:
            self.feed.emit(TextMessageEndEvent(message_id=self._text))
            self._text = None
        self.feed.emit(
            RunErrorEvent(message=str(error) or type(error).__name__, code="serve_error")
        )

    # ------------------------------------------------------------ pieces

    def _end_thinking(self) -> None:
        if self._thinking is not None:
            self.feed.emit(ReasoningMessageEndEvent(message_id=self._thinking))
            self.feed.emit(ReasoningEndEvent(message_id=self._thinking))
            self._thinking = None

    def _message(self, index: int, message: Message) -> None:
        mid = message_id(self.feed.store_run_id, index)
        if message.role == "assistant":
            text = message.text
            if self._text is not None:
                self.feed.emit(TextMessageEndEvent(message_id=self._text))
                self._text = None
            elif text:
                if message.thinking and not self._discarded:
                    self._told_thinking(mid, message)
                self.feed.emit(TextMessageStartEvent(message_id=mid, role="assistant"))
                self.feed.emit(TextMessageContentEvent(message_id=mid, delta=text))
                self.feed.emit(TextMessageEndEvent(message_id=mid))
            for call in message.tool_calls:
                self.feed.emit(
                    ToolCallStartEvent(
                        tool_call_id=call.call_id, tool_call_name=call.name, parent_message_id=mid
                    )
                )
                self.feed.emit(
                    ToolCallArgsEvent(tool_call_id=call.call_id, delta=_json(dict(call.arguments)))
                )
                self.feed.emit(ToolCallEndEvent(tool_call_id=call.call_id))
        elif message.role == "tool":
            for n, result in enumerate(message.tool_results):
                self.feed.emit(
                    ToolCallResultEvent(
                        message_id=f"{mid}:{n}" if n else mid,
                        tool_call_id=result.tool_call_id,
                        content=result.text,
                        role="tool",
                    )
                )

    def _child(self, trace: Trace, parent: str | None) -> None:
        """A child run (a machine run by a step, a subagent, a remote agent) as an AG-UI
        subagent: its steps and messages carry its id, nested children theirs, then how
        it ended."""
        self._subagents += 1
        sid = f"{self.feed.store_run_id}:child{self._subagents}"
        self.feed.emit(
            SubagentStartedEvent(
                subagent_run_id=sid, name=trace.machine, parent_subagent_run_id=parent
            )
        )
        first = trace.transitions[0].chain.messages if trace.transitions else ()
        users = [i for i, m in enumerate(first) if m.role == "user"]
        seen = users[-1] + 1 if users else 0  # the task it was given is its parent's call
        for t in trace.transitions:
            self.feed.emit(StepStartedEvent(step_name=t.source, subagent_run_id=sid))
            for child in t.children:
                self._child(child, sid)
            messages = t.chain.messages
            seen = min(seen, len(messages))
            for index in range(seen, len(messages)):
                self._child_message(sid, index, messages[index])
            seen = len(messages)
            self.feed.emit(
                StepFinishedEvent(
                    step_name=t.source,
                    subagent_run_id=sid,
                    metadata={"trigger": t.trigger, "dest": t.dest},
                )
            )
        end = trace.transitions[-1].dest if trace.transitions else ""
        if end == "error":
            where = trace.transitions[-1].source
            said = f"the {trace.machine} machine ended in error at {where}"
            self.feed.emit(SubagentErrorEvent(subagent_run_id=sid, message=said, code="error"))
        elif end in ("interrupted", "paused"):
            waiting = SubagentFinishedSuspendedOutcome()
            self.feed.emit(SubagentFinishedEvent(subagent_run_id=sid, outcome=waiting))
        else:
            done = SubagentFinishedSuccessOutcome()
            self.feed.emit(SubagentFinishedEvent(subagent_run_id=sid, outcome=done))

    def _child_message(self, sid: str, index: int, message: Message) -> None:
        """A child's message, whole, attributed to it; its ids are prefixed with the
        child's, since a child numbers its calls from 1 as its parent does."""
        mid = f"{sid}:m{index}"
        if message.role == "assistant":
            if message.text:
                self.feed.emit(
                    TextMessageStartEvent(message_id=mid, role="assistant", subagent_run_id=sid)
                )
                self.feed.emit(
                    TextMessageContentEvent(message_id=mid, delta=message.text, subagent_run_id=sid)
                )
                self.feed.emit(TextMessageEndEvent(message_id=mid, subagent_run_id=sid))
            for call in message.tool_calls:
                cid = f"{sid}:{call.call_id}"
                self.feed.emit(
                    ToolCallStartEvent(
                        tool_call_id=cid,
                        tool_call_name=call.name,
                        parent_message_id=mid,
                        subagent_run_id=sid,
                    )
                )
                arguments = _json(dict(call.arguments))
                self.feed.emit(
                    ToolCallArgsEvent(tool_call_id=cid, delta=arguments, subagent_run_id=sid)
                )
                self.feed.emit(ToolCallEndEvent(tool_call_id=cid, subagent_run_id=sid))
        elif message.role == "tool":
            for n, result in enumerate(message.tool_results):
                self.feed.emit(
                    ToolCallResultEvent(
                        message_id=f"{mid}:{n}" if n else mid,
                        tool_call_id=f"{sid}:{result.tool_call_id}",
                        content=result.text,
                        role="tool",
                        subagent_run_id=sid,
                    )
                )

    def _told_thinking(self, mid: str, message: Message) -> None:
        thought = "".join(t.text for t in message.thinking)
        if not thought:
            return
        tid = mid + ":thinking"
        self.feed.emit(ReasoningStartEvent(message_id=tid))
        self.feed.emit(ReasoningMessageStartEvent(message_id=tid))
        self.feed.emit(ReasoningMessageContentEvent(message_id=tid, delta=thought))
        self.feed.emit(ReasoningMessageEndEvent(message_id=tid))
        self.feed.emit(ReasoningEndEvent(message_id=tid))


def replayed(saved: Any, thread_id: str) -> Feed:
    """The stream of a saved run (every segment, in order), made again from its trace.

    For a client that comes back after the app let the run's stream go (a restart):
    the same steps, tool calls and results, each reply's text in one piece, numbered
    afresh. A run still going elsewhere ends its stream where its trace ends, without
    a RUN_FINISHED.
    """
    feed = Feed(thread_id, saved.run_id, saved.run_id)
    transitions = [t for trace in saved.traces for t in trace]
    first = transitions[0].chain.messages if transitions else saved.chain.messages
    users = [i for i, m in enumerate(first) if m.role == "user"]
    current: dict[str, Any] = {}
    say = Translator(feed, users[-1] + 1 if users else 0, lambda: current)
    trace = saved.trace
    say.started(trace.machine, trace.machine_version or 0, saved.traces[0].entry)
    for transition in transitions:
        context = transition.chain.custom_context.get("state")
        current = dict(context) if isinstance(context, Mapping) else {}
        say.step_started(transition.source)
        say.transition(transition)
    if saved.result is not None:
        reason = saved.agent_state.pause_reason if saved.agent_state is not None else None
        say.ended(saved.result, saved.result.chain.messages, reason)
    return feed


def _patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An RFC 6902 patch from ``before`` to ``after``, key by key two levels down."""
    ops: list[dict[str, Any]] = []

    def walk(a: Mapping[str, Any], b: Mapping[str, Any], at: str, depth: int) -> None:
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{at}/{_escape(key)}"})
        for key, value in b.items():
            path = f"{at}/{_escape(key)}"
            if key not in a:
                ops.append({"op": "add", "path": path, "value": value})
            elif a[key] != value:
                old = a[key]
                if depth < 2 and isinstance(old, Mapping) and isinstance(value, Mapping):
                    walk(old, value, path, depth + 1)
                else:
                    ops.append({"op": "replace", "path": path, "value": value})

    walk(before, after, "", 0)
    return ops


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def ui_messages(store_run_id: str, messages: Iterable[Message]) -> list[Any]:
    """The conversation as AG-UI messages (system messages are the server's own: left out)."""
    out: list[Any] = []
    for index, message in enumerate(messages):
        mid = message_id(store_run_id, index)
        if message.role == "user":
            out.append(UIUserMessage(id=mid, content=message.text))
        elif message.role == "assistant":
            calls = [
                UIToolCall(
                    id=c.call_id,
                    function=UIFunctionCall(name=c.name, arguments=_json(dict(c.arguments))),
                )
                for c in message.tool_calls
            ]
            out.append(UIAssistant(id=mid, content=message.text or None, tool_calls=calls or None))
        elif message.role == "tool":
            for n, result in enumerate(message.tool_results):
                out.append(
                    UIToolMessage(
                        id=f"{mid}:{n}" if n else mid,
                        content=result.text,
                        tool_call_id=result.tool_call_id,
                        error=result.text if result.is_error else None,
                    )
                )
    return out
