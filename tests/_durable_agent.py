"""The agent the durable engine's worker processes run, to be killed and drained.

    agentfsm worker --db URL tests._durable_agent:agent      (from the repository root)

The model answers from the conversation alone (``TURNS`` tool turns, then
text), after ``AGENTFSM_TEST_MODEL_DELAY`` seconds. The tool ``record`` writes
``start CALL`` then, after ``AGENTFSM_TEST_TOOL_DELAY`` seconds, ``done CALL
NONCE`` to the file ``AGENTFSM_TEST_LOG`` and returns the nonce: a test reads
how often each call began and which execution's result the run kept.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Sequence
from typing import Any

from agentfsm import Agent, HumanInTheLoop, Message, Tool, ToolContext, tool
from agentfsm.providers import ScriptedModel, call_tool, say

TURNS = 3


def _log(line: str) -> None:
    path = os.environ.get("AGENTFSM_TEST_LOG")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")
            out.flush()


def script(messages: Sequence[Message]) -> Message:
    """``TURNS`` tool turns, then text; call ids are the prompt's, so unique per run."""
    turns = sum(m.role == "tool" for m in messages)
    prompt = next(m.text for m in messages if m.role == "user")
    if turns < TURNS:
        return call_tool("record", note=f"n{turns}", call_id=f"{prompt}-{turns}")
    return say("done")


class SlowModel:
    """A scripted model that takes its time, as a real one does."""

    def __init__(self, delay: float) -> None:
        self.inner = ScriptedModel(script, model_name="slow")
        self.delay = delay

    @property
    def name(self) -> str:
        return "slow"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, on_delta: Any = None
    ) -> Message:
        _log("model")
        if self.delay:
            await asyncio.sleep(self.delay)
        return await self.inner.complete(messages, tools, on_delta=on_delta)


@tool
async def record(note: str, context: ToolContext) -> str:
    """Record a note."""
    call = context.tool_call_id
    _log(f"start {call}")
    await asyncio.sleep(float(os.environ.get("AGENTFSM_TEST_TOOL_DELAY", "0")))
    nonce = uuid.uuid4().hex[:12]
    _log(f"done {call} {nonce}")
    return f"recorded {note} {nonce}"


def agent() -> Agent:
    return Agent(SlowModel(float(os.environ.get("AGENTFSM_TEST_MODEL_DELAY", "0"))), [record])


def gated() -> Agent:
    """The same agent, with every ``record`` call waiting for approval."""
    return Agent(
        SlowModel(float(os.environ.get("AGENTFSM_TEST_MODEL_DELAY", "0"))),
        [record],
        middleware=[HumanInTheLoop({"record": True})],
    )
