"""A resumer of one interrupted run in its own process, to race others approving it.

    python -m tests._race_worker DB LEDGER RUN_ID GO      (from the repository root)

It waits until the file GO exists (so every racer starts at once), approves the
run's gated call and prints what happened as JSON: the run's status, or the
error's type. The gated tool ``launch`` appends its call id to LEDGER, so a
test counts how often each call ran.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from agentfsm import (
    Agent,
    AgentState,
    FormatError,
    HumanInTheLoop,
    Message,
    ResumeError,
    RunInUseError,
    StoreError,
    start_run,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore

PROMPT = "launch it"


def script(messages: Sequence[Message]) -> Message:
    """One gated call (then an ungated second turn), then done: fixed by the conversation."""
    turns = sum(m.role == "tool" for m in messages)
    if turns == 0:
        return call_tool("launch", target="moon", call_id="c1")
    if turns == 1:
        return call_tool("launch", target="mars", call_id="c2")
    return say("done")


def make_agent(ledger: Path, *, nap: float = 0.05) -> Agent:
    """The agent under test: ``launch`` needs approval and writes its call id to ``ledger``."""

    @tool
    def launch(target: str) -> str:
        """Launch a rocket (needs approval)."""
        time.sleep(nap)  # a side effect that takes a while: a wide window for a race
        with ledger.open("a") as out:
            out.write(f"{target}\n")
        return f"launched to {target}"

    return Agent(
        ScriptedModel(script, model_name="race-model"),
        [launch],
        middleware=[HumanInTheLoop({"launch": True})],
    )


def agent() -> Agent:
    """For ``agentfsm runs resume --agent tests._race_worker:agent``: the ledger from
    ``AGENTFSM_TEST_LEDGER``."""
    return make_agent(Path(os.environ["AGENTFSM_TEST_LEDGER"]))


def interrupted(db: Path, ledger: Path, run_id: str = "r") -> None:
    """A run of :func:`make_agent` stopped for approval of its first call, saved in ``db``."""
    with SQLiteStore(db) as store:
        run = start_run(make_agent(ledger), AgentState.of(PROMPT), store, run_id=run_id)
        run.run_sync()
    assert run.agent_state.status == "interrupted"


def resume(db: Path, ledger: Path, run_id: str) -> str:
    """Approve every request until the run ends; what happened, in one word."""
    try:
        with SQLiteStore(db) as store:
            state = make_agent(ledger).resume_run_sync(
                run_id, store, [{"type": "approve"}], unbound=True
            )
            while state.status == "interrupted":
                state = make_agent(ledger).resume_run_sync(
                    run_id, store, [{"type": "approve"}], unbound=True
                )
    except (RunInUseError, ResumeError, StoreError, FormatError) as exc:
        return type(exc).__name__
    return str(state.status)


def main(argv: Sequence[str]) -> int:
    db, ledger, run_id, go = argv
    while not Path(go).exists():
        time.sleep(0.005)
    print(json.dumps({"outcome": resume(Path(db), Path(ledger), run_id)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
