"""A resumer that approved a saved run, killed at every boundary after the decision: a
fresh resumer finishes the run and the approved call ran once, bar the one in flight.

The resumed run enters at the approval state with the answer in its chain, which the
resume's first checkpoint saves; the approval state applies it and executing runs the
approved call as a checkpointed transition that names the decision. So wherever the
resumer dies, a fresh one (no answer: the run is running, not interrupted) goes on from
the last boundary written, and the call ran exactly once, unless the kill landed while it
was in flight: inside the tool, or after it finished and before its result was written
(at least once, then).

Beside ``test_approval_kills.py`` (every boundary, a plain agent and a subagent, one
after another), this one runs its trials at once, adds the kill before the first step
and the two in flight, each with its exact ledger, and checks the finished run took the
path a resumer never killed takes, its decision recorded once.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from agentfsm import STANDARD
from agentfsm.store import SQLiteStore, load_run
from tests._approval_resumer import interrupted, make_agent

ROOT = Path(__file__).resolve().parent.parent
RESUMED = (
    "interrupt_check executing propagating until_check deciding expanding calling "
    "interrupt_check executing propagating until_check deciding expanding calling "
    "interrupt_check executing propagating until_check deciding ok"
)


def _worker(mode: str, folder: Path, at: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tests._approval_resumer", mode]
    command += [str(folder / "runs.db"), str(folder / "ledger"), "r", str(at)]
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _ledger(folder: Path) -> Counter[str]:
    """``start CALL`` / ``done CALL`` lines, by how often each was written."""
    path = folder / "ledger"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(" ".join(line.split()[:2]) for line in lines)


def _finish(folder: Path) -> tuple[str, ...]:
    """A fresh resumer goes on from the last boundary written; the resumed segment's edges."""
    with SQLiteStore(folder / "runs.db") as store:
        before = load_run(store, "r", strict=False)
        assert before.status in ("running", "ok"), before.status  # the answer was saved
        if before.status == "running":
            state = make_agent(folder / "ledger").resume_run_sync("r", store)
            assert state.status == "ok", state
        saved = load_run(store, "r", strict=False)
    assert saved.status == "ok" and len(saved.traces) == 2
    results = [r.tool_call_id for m in saved.chain.messages for r in m.tool_results]
    assert results == ["c1", "c2"]
    assert saved.chain.last_message is not None and saved.chain.last_message.text == "done"
    resumed = saved.traces[1]
    assert STANDARD.is_path(resumed.states, resumed.triggers)
    assert resumed.transitions[1].detail == {
        "tools": ["launch"],
        "errors": 0,
        "decisions": {"c1": "approve"},
    }
    return tuple(f"{t.source} --{t.trigger}--> {t.dest}" for t in resumed)


def test_a_resumer_killed_at_any_boundary_after_the_decision_runs_the_approved_call_once(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    interrupted(base / "runs.db", base / "ledger")
    assert _ledger(base) == Counter()  # nothing ran before the decision

    def copy(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(base, folder)
        return folder

    # A resumer never killed: the resumed run's boundaries, and what it did.
    clean = copy("clean")
    done = _worker("after", clean, 10_000)
    _, err = done.communicate(timeout=60)
    assert done.returncode == 0, err
    edges = _finish(clean)
    assert " ".join([e.split()[0] for e in edges] + ["ok"]) == RESUMED
    once = Counter({"start c1": 1, "done c1": 1, "start c2": 1, "done c2": 1})
    assert _ledger(clean) == once
    steps = len(edges)

    # One trial per boundary (0: killed as soon as the resume returned), all at once,
    # and the two kills that land while the approved call is in flight.
    trials = {f"after-{n}": ("after", n) for n in range(steps + 1)}
    trials |= {"in-tool": ("in-tool", 0), "unsaved-executed": ("unsaved-executed", 0)}
    folders = {name: copy(name) for name in trials}
    workers = {name: _worker(mode, folders[name], at) for name, (mode, at) in trials.items()}
    for name, worker in workers.items():
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == -signal.SIGKILL, (name, err)

    for name, folder in folders.items():
        killed = dict(_ledger(folder))
        assert _finish(folder) == edges, name  # the same run as one resumer's
        ran = _ledger(folder)
        if name == "in-tool":  # began in the killed process, ran whole in the fresh one
            assert killed == {"start c1": 1}, name
            assert ran == once + Counter({"start c1": 1}), (name, ran)
        elif name == "unsaved-executed":  # ran whole, its result never written
            assert killed == {"start c1": 1, "done c1": 1}, name
            assert ran == once + Counter({"start c1": 1, "done c1": 1}), (name, ran)
        else:
            assert ran == once, (name, ran)
