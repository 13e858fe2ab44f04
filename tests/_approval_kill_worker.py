"""An approved run resumed in its own process, killed at a chosen transition.

    python -m tests._approval_kill_worker SHAPE MODE DB LEDGER KILL_AT   (from the repository root)

SHAPE: ``plain`` (the agent gates ``publish``) or ``subagent`` (a lead whose ``writer``
subagent gates it). MODE: ``start`` saves a run that stops for approval; ``resume``
approves it (when it waits) or goes on with it, and sends itself ``SIGKILL`` right after
the KILL_AT-th transition of any run in the process was heard (each is checkpointed
before the hooks hear it); ``0`` never kills. ``publish`` writes ``start ID`` and
``done ID`` to LEDGER. Exit status: 0 when the run ended ok.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from agentfsm import (
    Agent,
    AgentState,
    Approval,
    HumanInTheLoop,
    Message,
    Run,
    SubAgent,
    ToolContext,
    Transition,
    start_run,
    tool,
)
from agentfsm._hooks import add_global_hook
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore, load_run

RUN_ID = "job"


def make_agent(shape: str, ledger: Path) -> Agent:
    @tool
    def publish(text: str, context: ToolContext) -> str:
        """Publish a note (needs approval)."""
        with ledger.open("a") as out:
            out.write(f"start {context.tool_call_id}\n")
        with ledger.open("a") as out:
            out.write(f"done {context.tool_call_id}\n")
        return "Published."

    gate = [HumanInTheLoop({"publish": True})]
    worker = Agent(
        ScriptedModel(_replies(call_tool("publish", text="Bees dance.", call_id="p1"), "Done.")),
        [publish],
        middleware=gate,
    )
    if shape == "plain":
        return worker
    return Agent(
        ScriptedModel(
            _replies(call_tool("writer", task="Publish: bees", call_id="w1"), "All set.")
        ),
        [SubAgent("writer", "Publishes notes", worker)],
    )


def _replies(first: Message, last: str) -> Callable[[Sequence[Message]], Message]:
    """A model fixed by the conversation alone, so a fresh process goes on with it."""

    def reply(messages: Sequence[Message]) -> Message:
        return say(last) if messages[-1].role == "tool" else first

    return reply


class _KillAt:
    def __init__(self, at: int) -> None:
        self.at = at
        self.heard = 0

    def transition(self, run: Run, transition: Transition) -> None:
        self.heard += 1
        if self.heard == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def main(shape: str, mode: str, db: str, ledger: str, kill_at: str) -> int:
    agent = make_agent(shape, Path(ledger))
    with SQLiteStore(db, lease=2.0) as store:
        if mode == "start":
            start_run(
                agent, AgentState.of("Publish the bee note."), store, run_id=RUN_ID
            ).run_sync()
            return 0
        if int(kill_at):
            add_global_hook(_KillAt(int(kill_at)))
        saved = load_run(store, RUN_ID, strict=False)
        if saved.status == "ok":  # killed right after its last checkpoint
            return 0
        answer = None
        if saved.status == "interrupted":
            assert saved.agent_state is not None
            answer = Approval.of(_innermost(saved.agent_state.interrupt_data)).approve_all()
        state = agent.resume_run_sync(RUN_ID, store, answer)
        return 0 if state.status == "ok" else 1


def _innermost(data: object) -> object:
    """The approval a reviewer answers: the run's own, or its waiting subagent's."""
    while isinstance(data, dict) and data.get("type") == "subagent":
        data = data["request"]
    return data


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
