"""An agent as an A2A server: its card from its tools, A2A tasks as its saved runs.

A task is a run in the store under the task's id (the studio shows it). Each
transition is a ``working`` status update whose metadata names the machine's
source, trigger and destination; a reply's text streams as artifact chunks
(``reply-1``, ``reply-2``, ... appended to), and the final answer is the task's
``answer`` artifact. An
approval is ``input-required``: the status message carries the requests (each with
its digest) as a data part, and the client's next message on the task carries the
decisions, bound by those digests and applied through the store's claim as every
decision is. A tool's own question is ``input-required`` too, answered by text.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from a2a.helpers import get_data_parts, new_data_part, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    TaskState,
)
from starlette.routing import BaseRoute

from agentfsm import (
    Agent,
    AgentRun,
    AgentState,
    Approval,
    DecisionError,
    Failed,
    Interrupted,
    MessageDelta,
    Ok,
    Paused,
    ResumeError,
    RunInUseError,
    RunNotFoundError,
    restore_run,
    start_run,
)
from agentfsm.store import load_run

from ._agui import Served

__all__ = ["A2A_PATH", "a2a_routes", "agent_card"]

#: Where the JSON-RPC endpoint is, under the app's root.
A2A_PATH: Final = "/a2a"


def agent_card(agent: Agent, url: str, *, description: str | None = None) -> AgentCard:
    """The card other agents read: the agent's name, what it does, a skill per tool (an
    agent without tools has one skill: answering)."""
    name = agent.name or "agentfsm agent"
    tools = [t for t in agent.tools if t.name != "final_result"]
    said = description or (
        f"An agentfsm agent on the {agent.mode.table.name} machine"
        + (f" with tools: {', '.join(t.name for t in tools)}." if tools else ".")
    )
    gated = _gated(agent)
    skills = [
        AgentSkill(
            id=t.name,
            name=t.name,
            description=t.description,
            tags=["tool", "needs-approval"] if t.name in gated else ["tool"],
        )
        for t in tools
    ] or [AgentSkill(id="answer", name=name, description=said, tags=["chat"])]
    return AgentCard(
        name=name,
        description=said,
        version=str(agent.mode.table.version),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=skills,
    )


def _gated(agent: Agent) -> set[str]:
    names: set[str] = set()
    for middleware in agent.middleware:
        interrupt_on = getattr(middleware, "interrupt_on", None)
        if isinstance(interrupt_on, Mapping):
            names.update(k for k, v in interrupt_on.items() if v)
    return names


def _text(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_AGENT,
        parts=[new_text_part(text)],
        task_id=task_id,
        context_id=context_id,
    )


class Executor(AgentExecutor):
    """Runs the agent for A2A tasks: a new task starts a run, a reply to a waiting one
    answers it."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.running: dict[str, AgentRun] = {}
        served.elsewhere = self.running  # counted with the AG-UI runs against `going`

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        assert task_id is not None and context_id is not None
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
            )
        going = self.served.counted()
        if going >= self.served.going:
            said = f"{going} runs are going, the most this agent runs at once; try again later"
            if context.current_task is None:
                await updater.reject(_text(said, task_id, context_id))
            else:  # the task keeps waiting for its answer
                await updater.requires_input(_text(said, task_id, context_id))
            return
        if context.current_task is None:
            state = AgentState.of(context.get_user_input())
            run = start_run(self.served.agent, state, self.served.store, run_id=task_id)
        else:
            try:
                run = await self._answered(task_id, context)
            except (DecisionError, ValueError, RunInUseError, RunNotFoundError) as exc:
                refused = f"The answer was refused: {' '.join(str(exc).split())[:400]}"
                await updater.requires_input(_text(refused, task_id, context_id))
                return
        await updater.start_work()
        self.running[task_id] = run
        streamed = _Streamed(updater, task_id)
        run.chain = run.chain.add_callback({"on_llm_new_delta": streamed.delta})
        pump = asyncio.create_task(streamed.pump())
        try:
            while not run.done:
                t = await run.step()
                await streamed.pieces.join()  # the reply's pieces go out before its step
                if t.source == "calling":
                    streamed.replies += 1
                meta = {
                    "machine": run.table.name,
                    "source": t.source,
                    "trigger": t.trigger,
                    "dest": t.dest,
                }
                await updater.update_status(TaskState.TASK_STATE_WORKING, metadata=meta)
        finally:
            pump.cancel()
            self.running.pop(task_id, None)
        await self._end(run, updater, task_id, context_id)

    async def _answered(self, task_id: str, context: RequestContext) -> AgentRun:
        """The task's run, resumed with the message's answer (decisions carried as data,
        each bound by its digest; text for a question), claimed as every resume is."""
        store = self.served.store
        saved = load_run(store, task_id, strict=False)
        if saved.status == "paused":  # any message goes on with the run as it was
            return await restore_run(self.served.agent, task_id, store)
        state = saved.agent_state
        if saved.status != "interrupted" or state is None or not state.interrupt_data:
            raise ResumeError(f"run {task_id!r} is {saved.status}: it waits for no answer")
        answer: Any
        if Approval.is_approval(state.interrupt_data):
            data = list(get_data_parts(context.message.parts)) if context.message else []
            found = [d for d in data if isinstance(d, Mapping) and "decisions" in d]
            if not found or not isinstance(found[0]["decisions"], list):
                raise ValueError("answer an approval with a data part {'decisions': [...]}")
            answer = list(found[0]["decisions"])
            if not all(isinstance(d, Mapping) and d.get("digest") for d in answer):
                raise ValueError("every decision carries the digest of the request it answers")
        else:
            answer = context.get_user_input()
        return await restore_run(self.served.agent, task_id, store, answer)

    async def _end(
        self, run: AgentRun, updater: TaskUpdater, task_id: str, context_id: str
    ) -> None:
        result = run.result
        match result:
            case Ok(chain):
                text = chain.last_message.text if chain.last_message is not None else ""
                await updater.add_artifact(
                    [new_text_part(text)], artifact_id="answer", name="answer"
                )
                await updater.complete(_text(text, task_id, context_id))
            case Interrupted(_, data):
                await updater.requires_input(_asking(data, task_id, context_id))
            case Paused():
                said = f"The run paused ({run.pause_reason}); send a message to go on."
                await updater.requires_input(_text(said, task_id, context_id))
            case Failed(_, error):
                await updater.failed(_text(f"{error.type}: {error.message}", task_id, context_id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """The run pauses before its next state's work; the task is cancelled."""
        task_id, context_id = context.task_id, context.context_id
        assert task_id is not None and context_id is not None
        run = self.running.get(task_id)
        if run is not None:
            run.request_pause("cancelled")
        await TaskUpdater(event_queue, task_id, context_id).cancel()


class _Streamed:
    """A reply's text as it streams: artifact chunks ``reply-N`` of the task, in order."""

    def __init__(self, updater: TaskUpdater, task_id: str) -> None:
        self.updater = updater
        self.task_id = task_id
        self.pieces: asyncio.Queue[str] = asyncio.Queue()
        self.replies = 0
        self._open: set[str] = set()

    def delta(self, _chain: Any, delta: MessageDelta) -> None:
        if delta.kind == "text" and delta.content:
            self.pieces.put_nowait(delta.content)

    async def pump(self) -> None:
        while True:
            piece = await self.pieces.get()
            try:
                artifact = f"reply-{self.replies + 1}"
                await self.updater.add_artifact(
                    [new_text_part(piece)],
                    artifact_id=artifact,
                    name="reply",
                    append=artifact in self._open,
                )
                self._open.add(artifact)
            finally:
                self.pieces.task_done()


def _asking(data: Mapping[str, Any], task_id: str, context_id: str) -> Message:
    """The input-required message: what is asked, in words and as data."""
    if Approval.is_approval(data):
        approval = Approval.of(data)
        requests = [
            {
                "tool_call_id": r.tool_call_id,
                "tool_name": r.tool_name,
                "arguments": json.loads(json.dumps(dict(r.arguments), default=str)),
                "digest": r.digest,
                "allowed_decisions": approval.allowed(r.tool_name),
            }
            for r in approval.requests
        ]
        said = "Approval needed: " + ", ".join(
            f"{r['tool_name']}({json.dumps(r['arguments'])})" for r in requests
        )
        parts: Sequence[Part] = [
            new_text_part(said),
            new_data_part({"type": "approval", "requests": requests}),
        ]
    else:
        question = str(data.get("question") or data.get("text") or "The agent asks for input.")
        parts = [new_text_part(question)]
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_AGENT,
        parts=list(parts),
        task_id=task_id,
        context_id=context_id,
    )


def a2a_routes(
    served: Served, url: str, *, description: str | None = None, tasks: Any = None
) -> list[BaseRoute]:
    """The agent card (``/.well-known/agent-card.json``) and the JSON-RPC endpoint;
    ``tasks`` is the SDK's task store (in memory unless given)."""
    card = agent_card(served.agent, url.rstrip("/") + A2A_PATH, description=description)
    handler = DefaultRequestHandler(
        agent_executor=Executor(served),
        task_store=tasks if tasks is not None else InMemoryTaskStore(),
        agent_card=card,
    )
    return [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, A2A_PATH)]
