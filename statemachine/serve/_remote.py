"""A remote A2A agent as a tool of a local machine, traced as the call's child.

The parent's model calls it with a task, as it calls a :class:`~agentfsm.SubAgent`;
the task goes to the remote agent over A2A (the a2a-sdk's client), and its final
answer is the tool's result. When the remote agent is an agentfsm agent served by
:func:`agentfsm.serve.create_app`, its transitions come back in its status updates:
they become a child trace nested under the parent's transition that made the call,
so the parent's trace, diagrams and run page show what the remote machine did.

A remote task that needs input (an approval, a question) interrupts the parent at
the tool's state with the remote's request; :meth:`RemoteAgent.answer` sends the
answer to the remote task and gives the parent's state with the remote's final
answer as the tool's result, to run on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any, Final

import attrs
import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_data_parts, get_message_text, new_data_part, new_text_part
from a2a.types import Message as A2AMessage
from a2a.types import Role, SendMessageRequest, TaskState

from agentfsm import (
    AgentState,
    LLMChain,
    Message,
    Tool,
    ToolOutput,
    ToolResult,
    Trace,
    Transition,
)
from agentfsm._run import current_run

__all__ = ["REMOTE", "RemoteAgent"]

#: The interrupt type of a remote task that waits for input.
REMOTE: Final = "remote_agent"

_TASK: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The task, in full: the remote agent sees nothing else of this "
            "conversation.",
        }
    },
    "required": ["task"],
}


@attrs.frozen(init=False)
class RemoteAgent(Tool):
    """A tool that hands a task to the A2A agent at ``url`` (its card's base address).

    ``token`` is sent as ``Authorization: Bearer`` (a served agentfsm app off
    loopback needs it); ``timeout`` bounds each HTTP exchange.
    """

    url: str = attrs.field(kw_only=True)
    token: str | None = attrs.field(kw_only=True, default=None, repr=False)
    timeout: float = attrs.field(kw_only=True, default=60.0)

    def __init__(
        self,
        name: str,
        description: str,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        async def task(task: str) -> str | ToolOutput:
            return await self._call(task)

        self.__attrs_init__(
            name=name,
            description=description,
            function=task,
            parameters=_TASK,
            is_async=True,
            effects=frozenset({"model", "tools"}),
            url=url.rstrip("/"),
            token=token,
            timeout=timeout,
        )

    def _http(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.AsyncClient(headers=headers, timeout=self.timeout)

    async def _send(
        self, parts: list[Any], task: str, task_id: str = "", context_id: str = ""
    ) -> tuple[list[Any], Trace | None]:
        """The remote's events for one message, its transitions adopted as they come."""
        parent = current_run()
        trace: Trace | None = None
        stub = LLMChain(parent.chain.llm) if parent is not None else None
        events = []
        async with self._http() as http:
            client = await create_client(self.url, ClientConfig(streaming=True, httpx_client=http))
            try:
                request = SendMessageRequest(
                    message=A2AMessage(
                        message_id=uuid.uuid4().hex,
                        role=Role.ROLE_USER,
                        parts=parts,
                        task_id=task_id or None,
                        context_id=context_id or None,
                    )
                )
                async for event in client.send_message(request):
                    events.append(event)
                    moved = _moved(event)
                    if moved is None or stub is None:
                        continue
                    if trace is None:
                        trace = Trace(entry=moved["source"], machine=moved.get("machine", ""))
                        if parent is not None:
                            parent.adopt(trace)
                    chain = stub.add_message(Message.user(task))
                    trace.transitions.append(
                        Transition(moved["source"], moved["trigger"], moved["dest"], chain)
                    )
            finally:
                await client.close()
        return events, trace

    async def _call(self, task: str) -> str | ToolOutput:
        try:
            events, _ = await self._send([new_text_part(task)], task)
        except Exception as exc:  # the remote is down, or not an A2A agent
            return ToolOutput(f"The {self.name} agent was not reached: {exc}", is_error=True)
        return self._outcome(events)

    def _outcome(self, events: list[Any]) -> str | ToolOutput:
        """The tool's result from the remote task's last status."""
        for event in reversed(events):
            if event.HasField("status_update"):
                status = event.status_update.status
                task_id, context_id = event.status_update.task_id, event.status_update.context_id
                break
            if event.HasField("task"):
                status = event.task.status
                task_id, context_id = event.task.id, event.task.context_id
                break
        else:
            return ToolOutput(f"The {self.name} agent answered nothing", is_error=True)
        said = get_message_text(status.message) if status.HasField("message") else ""
        if status.state == TaskState.TASK_STATE_COMPLETED:
            return said
        if status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            data = get_data_parts(status.message.parts) if status.HasField("message") else []
            asked = next((d for d in data if isinstance(d, Mapping)), {})
            interrupt = {
                "type": REMOTE,
                "agent": self.name,
                "task_id": task_id,
                "context_id": context_id,
                "question": said,
                "requests": list(asked.get("requests") or ()),
            }
            return ToolOutput(f"Waiting for the {self.name} agent.", interrupt=interrupt)
        return ToolOutput(f"The {self.name} agent failed: {said}", is_error=True)

    async def answer(self, state: AgentState, answer: Any) -> AgentState:
        """``state`` (interrupted by this agent's remote task) with the task answered.

        ``answer`` is the remote's own: decisions (dicts carrying each request's
        ``digest``) for an approval, text for a question. The remote task runs on to
        its end; its final answer replaces the tool's result, and the state is ready
        for ``agent.execute(state)`` to run on. A remote that asks again interrupts
        the state again.
        """
        data = state.interrupt_data or {}
        if data.get("type") != REMOTE or data.get("agent") != self.name:
            raise ValueError(f"the state is not waiting for the {self.name} agent")
        call = str(data.get("tool_call_id") or "")
        if isinstance(answer, list):
            parts = [new_data_part({"decisions": answer})]
        else:
            parts = [new_text_part(str(answer))]
        events, _ = await self._send(parts, "", data["task_id"], data["context_id"])
        outcome = self._outcome(events)
        text = outcome if isinstance(outcome, str) else str(outcome.content)
        result = ToolResult(call, self.name, text, is_error=isinstance(outcome, ToolOutput))
        answered = state.replace_tool_result(result)
        if isinstance(outcome, ToolOutput) and outcome.interrupt is not None:
            return answered.interrupt({**outcome.interrupt, "tool_call_id": call})
        return attrs.evolve(answered, status="new", interrupt_data=None, interrupted_at=None)

    def answer_sync(self, state: AgentState, answer: Any) -> AgentState:
        """:meth:`answer` for scripts (no event loop running in this thread)."""
        return asyncio.run(self.answer(state, answer))


def _moved(event: Any) -> dict[str, str] | None:
    """The transition a served agentfsm agent's working status names, if it names one."""
    if not event.HasField("status_update"):
        return None
    update = event.status_update
    if update.status.state != TaskState.TASK_STATE_WORKING:
        return None
    meta = {k: str(v) for k, v in update.metadata.items()}
    return meta if {"source", "trigger", "dest"} <= set(meta) else None
