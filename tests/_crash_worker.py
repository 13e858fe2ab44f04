"""A saved run in its own process, to be killed and resumed by another.

    python -m tests._crash_worker MODE DB LOG RUN_ID      (from the repository root)

MODE: ``kill-after-executed`` (SIGKILL right after the first ``executed``
transition was checkpointed), ``kill-in-tool`` (the first tool call kills the
process halfway through), ``drain`` (the run pauses with reason "draining"
after its first tool turn), ``resume`` (resume RUN_ID to its end and print the
final status as JSON).

The tool ``record`` writes ``start NOTE`` then ``done NOTE`` to LOG, so a test
counts how often each call began and finished. The model answers from the
conversation alone (two tool turns, then text), so a fresh process resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from agentfsm import Agent, AgentState, Message, Run, Transition, start_run, tool
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore

PROMPT = "record two notes"


def script(messages: Sequence[Message]) -> Message:
    """Two tool turns, then done: a reply fixed by how far the conversation got."""
    turns = sum(m.role == "tool" for m in messages)
    if turns == 0:
        return call_tool("record", note="one", call_id="c1")
    if turns == 1:
        return call_tool("record", note="two", call_id="c2")
    return say("done")


def make_agent(log: Path, *, kill_in_tool: bool = False) -> Agent:
    """The agent under test; with ``kill_in_tool`` its first tool call dies halfway."""

    @tool
    def record(note: str) -> str:
        """Record a note."""
        with log.open("a") as out:
            out.write(f"start {note}\n")
        marker = log.with_suffix(".killed")
        if kill_in_tool and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        with log.open("a") as out:
            out.write(f"done {note}\n")
        return f"recorded {note}"

    return Agent(ScriptedModel(script, model_name="crash-model"), [record])


def agent() -> Agent:
    """For ``agentfsm runs resume --agent tests._crash_worker:agent``: LOG from the environment."""
    return make_agent(Path(os.environ["AGENTFSM_TEST_LOG"]))


class _KillAfterExecuted:
    def transition(self, run: Run, transition: Transition) -> None:
        if transition.trigger == "executed":
            os.kill(os.getpid(), signal.SIGKILL)


class _Drain:
    def transition(self, run: Run, transition: Transition) -> None:
        if transition.trigger == "executed" and len(run.trace.where("executing")) == 1:
            run.request_pause("draining")


def main(argv: Sequence[str]) -> int:
    mode, db, log, run_id = argv
    store = SQLiteStore(db)
    if mode == "resume":
        state = make_agent(Path(log)).resume_run_sync(run_id, store)
        print(json.dumps({"status": state.status, "pause_reason": state.pause_reason}))
        return 0
    run = start_run(
        make_agent(Path(log), kill_in_tool=mode == "kill-in-tool"),
        AgentState.of(PROMPT),
        store,
        run_id=run_id,
    )
    if mode == "kill-after-executed":
        run.add_hook(_KillAfterExecuted())
    elif mode == "drain":
        run.add_hook(_Drain())
    run.run_sync()
    print(json.dumps({"status": run.agent_state.status}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
