"""The activities of a run: one model call, one tool call, each with its own record.

The workflow sends what a call needs as agentfsm values (the conversation, the
call, the state the tool may read) and names the agent, the subagent path and
the tools; the activity finds them in this worker's registry. A model's or a
tool's failure is part of the reply (as it is in an undurable run), so a failed
activity only ever means the worker was lost or the call outlived its timeout:
Temporal then runs it again on another worker. While it runs it heartbeats, so
a worker killed mid-call is noticed within the heartbeat timeout, not the call's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import attrs
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentfsm import Agent, ChainError, Message, SubAgent, Tool, ToolCall, ToolContext, ToolResult

from ._registry import AGENTS

__all__ = [
    "MACHINE_ACTIVITY",
    "MODEL_ACTIVITY",
    "TOOL_ACTIVITY",
    "ModelCall",
    "ModelReply",
    "ToolJob",
    "call_model",
    "call_tool",
    "find_agent",
    "machine_marker",
    "machine_of",
]

MODEL_ACTIVITY: Final = "agentfsm.model"
#: The local activity that records which machine a run started on (its first command).
MACHINE_ACTIVITY: Final = "agentfsm.machine"
TOOL_ACTIVITY: Final = "agentfsm.tool"


@attrs.frozen
class ModelCall:
    """One model call: whose model, over which messages, offered which tools."""

    agent: str
    path: tuple[str, ...]
    messages: tuple[Message, ...]
    tools: tuple[str, ...]


@attrs.frozen
class ModelReply:
    """The reply, or the ChainError the call ended in (never both)."""

    message: Message | None = None
    error: ChainError | None = None


@attrs.frozen
class ToolJob:
    """One tool call, with what its ToolContext reads (JSON values)."""

    agent: str
    path: tuple[str, ...]
    call: ToolCall
    state: dict[str, Any]
    custom_context: dict[str, Any]


def find_agent(name: str, path: Sequence[str]) -> Agent | None:
    """The registered agent ``name``, or the subagent ``path`` leads to from it."""
    agent = AGENTS.get(name)
    for step in path:
        if agent is None:
            return None
        found = [t for t in agent.tools if isinstance(t, SubAgent) and t.name == step]
        agent = found[0].agent if found else None
    return agent


def _agent(name: str, path: Sequence[str]) -> Agent:
    agent = find_agent(name, path)
    if agent is None:
        raise ApplicationError(
            f"No agent {' -> '.join([name, *path])!r} is registered on this worker",
            type="UnknownAgent",
            non_retryable=True,
        )
    return agent


def machine_marker(agent: Agent) -> str:
    """The machine an agent runs, as a run's history records it: ``NAME@FINGERPRINT``."""
    table = agent.mode.table
    return f"{table.name}@{table.fingerprint}"


@activity.defn(name=MACHINE_ACTIVITY)
async def machine_of(agent: str) -> str:
    """The machine this worker runs ``agent`` on: recorded once, read back on every replay."""
    return machine_marker(_agent(agent, ()))


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat while the call runs: a lost worker's call is retried within the timeout."""
    info = activity.info()
    timeout = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 0.0

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(max(timeout / 3, 0.1))

    task = asyncio.create_task(beat()) if timeout else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@activity.defn(name=MODEL_ACTIVITY)
async def call_model(job: ModelCall) -> ModelReply:
    """One model call of a run; its reply (or error) is what the history records."""
    agent = _agent(job.agent, job.path)
    by_name = {t.name: t for t in agent.tools}
    tools: list[Tool] = [by_name[n] for n in job.tools if n in by_name]
    async with _heartbeating():
        try:
            reply = await agent.model.complete(job.messages, tools)
            if not isinstance(reply, Message):
                raise TypeError(f"the model returned {reply!r}, not a Message")
            return ModelReply(message=reply)
        except ChainError as error:
            return ModelReply(error=error)
        except Exception as exc:
            return ModelReply(
                error=ChainError("model_error", f"{type(exc).__name__}: {exc}", retryable=False)
            )


@activity.defn(name=TOOL_ACTIVITY)
async def call_tool(job: ToolJob) -> ToolResult:
    """One tool call of a run; the ToolResult is what the history records."""
    agent = _agent(job.agent, job.path)
    found = [t for t in agent.tools if t.name == job.call.name]
    if not found:
        raise ApplicationError(
            f"No tool {job.call.name!r} on agent {job.agent!r}",
            type="UnknownTool",
            non_retryable=True,
        )
    context = ToolContext(job.state, job.custom_context, job.call.call_id)
    async with _heartbeating():
        return await found[0].invoke(job.call, context)
