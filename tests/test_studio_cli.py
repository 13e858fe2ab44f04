"""The command line around the studio: --machines, several pages, and its paper cuts."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

MACHINES = """
import attrs
from agentfsm import STANDARD
MINE = attrs.evolve(STANDARD, name="mine")
"""

MAKE = """
import sys
from agentfsm import Agent, AgentState, Message
from agentfsm.providers import ScriptedModel
from agentfsm.store import SQLiteStore, start_run
from mymachines import MINE
with SQLiteStore(sys.argv[1]) as store:
    for run_id in ("mine-run", "other-run"):
        agent = Agent(ScriptedModel([Message.assistant("x" * 400_000)]), [], machine=MINE)
        start_run(agent, AgentState.of("hi"), store, run_id=run_id).run_sync()
"""


def _agentfsm(
    *argv: str, cwd: pathlib.Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "AGENTFSM_MACHINES"}
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment, **(env or {})},
    )


def _store_of_my_machine(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "mymachines.py").write_text(MACHINES, encoding="utf-8")
    (tmp_path / "make.py").write_text(MAKE, encoding="utf-8")
    db = tmp_path / "mine.db"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    subprocess.run([sys.executable, "make.py", str(db)], cwd=tmp_path, check=True, env=env)
    return db


def test_my_own_machines_through_machines_or_the_environment(tmp_path: pathlib.Path) -> None:
    db = str(_store_of_my_machine(tmp_path))
    refused = _agentfsm("view", "mine-run", "--db", db, cwd=tmp_path)
    assert refused.returncode == 2 and "No machine named 'mine'" in refused.stderr
    assert "--machines MODULE" in refused.stderr and refused.stderr.count("\n") == 1
    viewed = _agentfsm("view", "mine-run", "--db", db, "--machines", "mymachines", cwd=tmp_path)
    assert viewed.returncode == 0, viewed.stderr
    assert (tmp_path / "mine-run.html").exists()
    shown = _agentfsm(
        "runs",
        "show",
        "mine-run",
        "--db",
        db,
        cwd=tmp_path,
        env={"AGENTFSM_MACHINES": "mymachines"},
    )
    assert shown.returncode == 0 and "run mine-run: ok at ok" in shown.stdout
    missing = _agentfsm("view", "mine-run", "--db", db, "--machines", "nosuchmodule", cwd=tmp_path)
    assert missing.returncode == 2 and "cannot import 'nosuchmodule'" in missing.stderr


def test_several_runs_each_get_a_page(tmp_path: pathlib.Path) -> None:
    db = str(_store_of_my_machine(tmp_path))
    both = _agentfsm(
        "view", "mine-run", "other-run", "--db", db, "--machines", "mymachines", cwd=tmp_path
    )
    assert both.returncode == 0, both.stderr
    assert both.stdout.splitlines() == ["wrote mine-run.html", "wrote other-run.html"]
    one_file = _agentfsm(
        "view",
        "mine-run",
        "other-run",
        "--db",
        db,
        "--machines",
        "mymachines",
        "--out",
        "x.html",
        cwd=tmp_path,
    )
    assert one_file.returncode == 2 and "pass a folder" in one_file.stderr
    (tmp_path / "pages").mkdir()
    into = _agentfsm(
        "view",
        "mine-run",
        "other-run",
        "--db",
        db,
        "--machines",
        "mymachines",
        "--out",
        "pages",
        cwd=tmp_path,
    )
    assert into.returncode == 0, into.stderr
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == [
        "mine-run.html",
        "other-run.html",
    ]


def test_a_trace_page_never_takes_a_runs_page_name(tmp_path: pathlib.Path) -> None:
    demo = _agentfsm("demo", "--approve", "--db", "d.db", "--out", ".", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    demo = _agentfsm("demo", "--approve", "--db", "d.db", "--out", ".", cwd=tmp_path)
    traces = sorted(p.name for p in tmp_path.glob("agentfsm-demo-*.json"))
    assert len(traces) == 2
    viewed = _agentfsm("view", *traces, cwd=tmp_path)
    assert viewed.returncode == 0, viewed.stderr
    pages = sorted(p.name for p in tmp_path.glob("*.trace.html"))
    assert pages == [t.replace(".json", ".trace.html") for t in traces]


def test_a_closed_pipe_is_not_a_traceback(tmp_path: pathlib.Path) -> None:
    db = str(_store_of_my_machine(tmp_path))
    command = [sys.executable, "-m", "agentfsm", "runs", "show", "mine-run", "--db", db]
    command += ["--json", "--machines", "mymachines"]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == b"{\n"
    process.stdout.close()
    assert process.wait(60) == 0
    assert process.stderr.read() == b""


def test_version_and_did_you_mean(tmp_path: pathlib.Path) -> None:
    version = _agentfsm("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("agentfsm ")
    typo = _agentfsm("demo", "--aprove", cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean --approve?" in typo.stderr
    command = _agentfsm("veiw", "x", cwd=tmp_path)
    assert command.returncode == 2 and "did you mean view?" in command.stderr
    nested = _agentfsm("runs", "show", "x", "--jsn", cwd=tmp_path)
    assert nested.returncode == 2 and "did you mean --json?" in nested.stderr
    assert _agentfsm("demo", "--zzzzzz", cwd=tmp_path).stderr.count("did you mean") == 0
