"""A resumer that approves a saved run and is killed at one boundary of the resumed run.

    python -m tests._approval_resumer MODE DB LEDGER RUN_ID N   (from the repository root)

The run (:func:`interrupted`) waits for approval of ``launch`` (call ``c1``); after it
runs, the model calls the ungated ``note`` (``c2``), then says done. The worker loads
the run, approves the request as shown (bound) and steps the resumed run; MODE says
where its own process gets ``SIGKILL``:

``after``
    once the N-th transition of the resumed run was heard, after its checkpoint was
    written (N = 0: as soon as the resume returned, before any step);
``unsaved-executed``
    when ``executing`` ended, before its checkpoint was written: ``launch`` ran, its
    result is not saved (the approved call was in flight);
``in-tool``
    inside ``launch``, after it began and before it finished.

It prints the run's status as JSON when it was not killed (N past the run's end). The
tools write ``start CALL PID`` and ``done CALL PID`` lines to LEDGER.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from agentfsm import (
    Agent,
    AgentState,
    Approval,
    HumanInTheLoop,
    Message,
    Run,
    ToolContext,
    Transition,
    restore_run,
    start_run,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore, load_run

PROMPT = "launch, then take a note"


def script(messages: Sequence[Message]) -> Message:
    """A gated call, an ungated one, then done: fixed by the conversation."""
    turns = sum(m.role == "tool" for m in messages)
    if turns == 0:
        return call_tool("launch", target="moon", call_id="c1")
    if turns == 1:
        return call_tool("note", text="launched", call_id="c2")
    return say("done")


def make_agent(ledger: Path, *, kill_in_tool: bool = False) -> Agent:
    def mark(what: str, context: ToolContext) -> None:
        with ledger.open("a") as out:
            out.write(f"{what} {context.tool_call_id} {os.getpid()}\n")

    @tool
    def launch(target: str, context: ToolContext) -> str:
        """Launch a rocket (needs approval)."""
        mark("start", context)
        if kill_in_tool:
            os.kill(os.getpid(), signal.SIGKILL)
        mark("done", context)
        return f"launched to {target}"

    @tool
    def note(text: str, context: ToolContext) -> str:
        """Note something."""
        mark("start", context)
        mark("done", context)
        return f"noted {text}"

    return Agent(
        ScriptedModel(script, model_name="kill-model"),
        [launch, note],
        middleware=[HumanInTheLoop({"launch": True})],
    )


def interrupted(db: Path, ledger: Path, run_id: str = "r") -> None:
    """The run, saved in ``db``, waiting for approval of ``launch``."""
    with SQLiteStore(db) as store:
        run = start_run(make_agent(ledger), AgentState.of(PROMPT), store, run_id=run_id)
        run.run_sync()
    assert run.agent_state.status == "interrupted", run.trace.path


def approve(store: SQLiteStore, run_id: str) -> list[object]:
    """Bound approvals of the requests the saved run shows."""
    saved = load_run(store, run_id, strict=False)
    assert saved.agent_state is not None
    return list(Approval.of(saved.agent_state.interrupt_data).approve_all())


class _KillAt:
    """SIGKILL this process when the ``at``-th transition is heard."""

    def __init__(self, at: int) -> None:
        self.at, self.heard = at, 0

    def transition(self, run: Run, transition: Transition) -> None:
        self.heard += 1
        if self.heard == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


class _KillWhenExecuted:
    def transition(self, run: Run, transition: Transition) -> None:
        if transition.trigger == "executed":
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: Sequence[str]) -> int:
    mode, db, ledger, run_id, at = argv
    with SQLiteStore(db) as store:
        agent = make_agent(Path(ledger), kill_in_tool=mode == "in-tool")
        run = asyncio.run(restore_run(agent, run_id, store, approve(store, run_id)))
        if mode == "after":
            if int(at) == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            run.add_hook(_KillAt(int(at)))  # after the checkpointer: the boundary is written
        elif mode == "unsaved-executed":
            run.add_hook(_KillWhenExecuted(), first=True)  # before the checkpointer
        run.run_sync()
    print(json.dumps({"status": run.agent_state.status, "steps": len(run.trace)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
