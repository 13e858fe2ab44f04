"""N resumers of one saved run, killed, frozen and thawed at random: no call runs twice.

    python -m tests._chaos DB LEDGER RUN_ID LEASE      (a resumer, from the repository root)

A resumer loops until the run ended ok: it approves an interrupted run, resumes a paused
one or one whose holder died, and waits a little when another process holds it. Its
tools write ``start CALL PID TIME`` and ``done CALL PID TIME`` lines to LEDGER.

:func:`trial` runs one: it saves a run that stops for approval, starts the resumers,
sends ``SIGKILL``/``SIGSTOP``/``SIGCONT`` at random for a while, lets the survivors (or a
last clean resumer) finish, and checks the ledger against the signals it sent. A call
that ran twice is excused only when the documented at-least-once says so: its first
run was in flight in a process killed then, or frozen then past its lease (a lease
cannot stop a frozen process's tool once it started, nor in the instant between the
lease check at the boundary and the tool).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from agentfsm import (
    Agent,
    AgentState,
    Approval,
    HumanInTheLoop,
    Message,
    ResumeError,
    RunInUseError,
    StoreError,
    ToolContext,
    start_run,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import SQLiteStore, load_run

ROOT = Path(__file__).resolve().parent.parent
CALLS = ("c1", "c2", "c3")
#: How long after a thaw a tool's start still counts as the lease check's instant.
THAW_WINDOW = 0.2


def script(messages: Sequence[Message]) -> Message:
    """A gated call, an ungated one, a gated one, then done: fixed by the conversation."""
    turns = sum(m.role == "tool" for m in messages)
    if turns == 0:
        return call_tool("launch", target="moon", call_id="c1")
    if turns == 1:
        return call_tool("note", text="two", call_id="c2")
    if turns == 2:
        return call_tool("launch", target="mars", call_id="c3")
    return say("done")


def make_agent(ledger: Path) -> Agent:
    def mark(what: str, call_id: str) -> None:
        with ledger.open("a") as out:
            out.write(f"{what} {call_id} {os.getpid()} {time.time():.6f}\n")

    def side_effect(context: ToolContext) -> None:
        mark("start", context.tool_call_id)
        time.sleep(random.uniform(0.02, 0.25))  # a while: signals land in flight
        mark("done", context.tool_call_id)

    @tool
    def launch(target: str, context: ToolContext) -> str:
        """Launch a rocket (needs approval)."""
        side_effect(context)
        return f"launched to {target}"

    @tool
    def note(text: str, context: ToolContext) -> str:
        """Note something."""
        side_effect(context)
        return f"noted {text}"

    return Agent(
        ScriptedModel(script, model_name="chaos-model"),
        [launch, note],
        middleware=[HumanInTheLoop({"launch": True})],
    )


def resumer(db: Path, ledger: Path, run_id: str, lease: float, seconds: float = 60) -> int:
    """Resume ``run_id`` until it ended ok; 0 then, 3 if it ended otherwise."""
    rng = random.Random()
    deadline = time.time() + seconds
    with SQLiteStore(db, lease=lease, timeout=10) as store:
        while time.time() < deadline:
            try:
                saved = load_run(store, run_id, strict=False)
                if saved.status == "ok":
                    return 0
                if saved.status == "error":
                    return 3
                answer = None
                if saved.status == "interrupted":
                    data = saved.agent_state.interrupt_data if saved.agent_state else None
                    answer = Approval.of(data).approve_all()
                make_agent(ledger).resume_run_sync(run_id, store, answer)
            except (RunInUseError, StoreError, ResumeError):
                time.sleep(rng.uniform(0.02, 0.2))
    return 4


@attrs.frozen
class Outcome:
    """One trial: how it ended and what ran how often."""

    resumers: int
    kills: int
    stops: int
    #: Call id -> how many times it ran (its ``start`` lines).
    runs: dict[str, int]
    #: Second runs excused: in flight in a killed process, in flight in a frozen one.
    killed_in_flight: int
    frozen_in_flight: int
    #: Second runs nothing excuses: each one is a bug.
    unexcused: int
    #: The saved run as a single resumer would leave it.
    ended_as_one: bool
    seconds: float


def _ledger(ledger: Path) -> list[tuple[str, str, int, float]]:
    if not ledger.exists():
        return []
    rows = []
    for line in ledger.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:  # a line cut by a kill is not a run
            rows.append((parts[0], parts[1], int(parts[2]), float(parts[3])))
    return rows


def _ended_as_one(db: Path, run_id: str) -> bool:
    with SQLiteStore(db) as store:
        saved = load_run(store, run_id, strict=False)
    results = [r.tool_call_id for m in saved.chain.messages for r in m.tool_results]
    last = saved.chain.last_message
    return (
        saved.status == "ok" and results == list(CALLS) and last is not None and last.text == "done"
    )


def _signal(pid: int, number: int) -> None:
    """Signal a resumer that may have ended meanwhile (its exit is then its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def trial(
    folder: Path, *, seed: int, resumers: int, lease: float = 0.5, chaos: float = 3.0
) -> Outcome:
    """One run, ``resumers`` processes, ``chaos`` seconds of random signals."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    db, ledger = folder / "runs.db", folder / "ledger.txt"
    started = time.time()
    with SQLiteStore(db, lease=lease) as store:
        start_run(make_agent(ledger), AgentState.of("go"), store, run_id="r").run_sync()
    command = [sys.executable, "-m", "tests._chaos", str(db), str(ledger), "r", str(lease)]
    procs = [
        subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(resumers)
    ]
    killed: dict[int, list[float]] = {}
    frozen: dict[int, list[tuple[float, float]]] = {}
    thaw: dict[int, float] = {}
    kills = stops = 0
    end = time.time() + chaos
    while time.time() < end and any(p.poll() is None for p in procs):
        time.sleep(rng.uniform(0.02, 0.25))
        now = time.time()
        for pid, when in list(thaw.items()):
            if when <= now:
                _signal(pid, signal.SIGCONT)
                frozen[pid][-1] = (frozen[pid][-1][0], time.time())
                del thaw[pid]
        live = [p for p in procs if p.poll() is None and p.pid not in thaw]
        if not live:
            continue
        proc = rng.choice(live)
        action = rng.choice(("kill", "stop", "stop", "none", "none"))
        if action == "kill":
            killed.setdefault(proc.pid, []).append(time.time())
            proc.kill()
            kills += 1
        elif action == "stop":
            frozen.setdefault(proc.pid, []).append((time.time(), float("inf")))
            _signal(proc.pid, signal.SIGSTOP)
            thaw[proc.pid] = time.time() + rng.uniform(0.05, 2.5 * lease)
            stops += 1
    for pid in list(thaw):
        _signal(pid, signal.SIGCONT)
        frozen[pid][-1] = (frozen[pid][-1][0], time.time())
    errors = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        if proc.returncode not in (0, -signal.SIGKILL):
            errors.append(err.decode(errors="replace")[-2000:])
    assert not errors, errors
    if resumer(db, ledger, "r", lease, seconds=120) != 0:  # a last clean resumer finishes
        raise AssertionError("the run did not end ok")
    rows = _ledger(ledger)
    starts = [(call, pid, t) for what, call, pid, t in rows if what == "start"]
    runs = {call: sum(1 for c, _, _ in starts if c == call) for call in CALLS}
    killed_in_flight = frozen_in_flight = unexcused = 0
    for call in CALLS:
        mine = sorted((t, pid) for c, pid, t in starts if c == call)
        # Every run but the last must be excused: its process was killed or frozen after
        # it started and before the call ran again elsewhere (in flight: its result not
        # checkpointed yet), or it started in the instant after a thaw (the lease check).
        for (t, pid), (again, _) in itertools.pairwise(mine):
            if any(t <= k <= again for k in killed.get(pid, ())):
                killed_in_flight += 1
            elif any(t <= s <= again or 0 <= t - c <= THAW_WINDOW for s, c in frozen.get(pid, ())):
                frozen_in_flight += 1
            else:
                unexcused += 1
    return Outcome(
        resumers=resumers,
        kills=kills,
        stops=stops,
        runs=runs,
        killed_in_flight=killed_in_flight,
        frozen_in_flight=frozen_in_flight,
        unexcused=unexcused,
        ended_as_one=_ended_as_one(db, "r"),
        seconds=time.time() - started,
    )


def main(argv: Sequence[str]) -> int:
    db, ledger, run_id, lease = argv
    return resumer(Path(db), Path(ledger), run_id, float(lease))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
