"""A scripted run paused in one process and resumed in another.

    python -m tests._call_ids_worker start|resume DB      (from the repository root)

The model asks for ``note`` on each of its first two replies (ids left to
:class:`ScriptedModel`), then says done; ``start`` pauses after the first reply.
Each process prints the call ids its tool saw, as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from agentfsm import Agent, AgentState, Message, ToolContext, start_run, tool
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore

SEEN: list[str] = []


def script(messages: Sequence[Message]) -> Message:
    turns = sum(m.role == "tool" for m in messages)
    return call_tool("note", text=f"turn {turns}") if turns < 2 else say("done")


@tool
def note(text: str, context: ToolContext) -> str:
    """Note something once per call id."""
    SEEN.append(context.tool_call_id)
    return f"noted {text}"


def main(mode: str, db: str) -> int:
    agent = Agent(ScriptedModel(script), [note])
    with SQLiteStore(db) as store:
        if mode == "start":
            run = start_run(
                agent, AgentState.of("go"), store, run_id="r1", should_pause=lambda: True
            )
            run.run_sync()
            status = run.agent_state.status
        else:
            status = agent.resume_run_sync("r1", store).status
    print(json.dumps({"status": status, "seen": SEEN}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
