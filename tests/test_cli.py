"""The agentfsm command, run as users run it: in a subprocess, its files checked."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from agentfsm import STANDARD
from agentfsm.cli import load_runs, main

ROOT = pathlib.Path(__file__).resolve().parent.parent


def agentfsm(
    *args: str, cwd: pathlib.Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "100", **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _written(stdout: str) -> dict[str, pathlib.Path]:
    """The files the demo names on stdout: ``diagram: PATH`` and ``trace: PATH``."""
    out = {}
    for line in stdout.splitlines():
        key, _, path = line.partition(": ")
        if key in ("diagram", "trace"):
            out[key] = pathlib.Path(path)
    return out


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, pathlib.Path]]:
    """One demo run with --approve and one with --reject, shared by the tests below."""
    out: dict[str, dict[str, pathlib.Path]] = {}
    for decision in ("approve", "reject"):
        folder = tmp_path_factory.mktemp(decision)
        result = agentfsm("demo", f"--{decision}", "--out", str(folder))
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        files = _written(result.stdout)
        assert set(files) == {"diagram", "trace"}
        assert all(p.parent == folder for p in files.values())
        files["stdout"] = folder.parent / f"{decision}-stdout.txt"
        files["stdout"].write_text(result.stdout, encoding="utf-8")
        out[decision] = files
    return out


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_demo_writes_a_diagram_and_a_trace(
    demos: dict[str, dict[str, pathlib.Path]], decision: str
) -> None:
    files = demos[decision]
    assert files["diagram"].name.startswith("agentfsm-demo-")
    assert files["diagram"].suffix == ".md" and files["trace"].suffix == ".json"
    assert files["diagram"].stem == files["trace"].stem
    markdown = files["diagram"].read_text(encoding="utf-8")
    assert "```mermaid\nstateDiagram-v2\n" in markdown
    assert "## Run 1: ended `interrupted`" in markdown
    assert "## Run 2: ended `ok`" in markdown
    data = json.loads(files["trace"].read_text(encoding="utf-8"))
    assert data["decision"] == decision
    traces = load_runs(data)
    assert [t.entry for t in traces] == ["expanding", "propagating"]
    assert [t.terminal for t in traces] == ["interrupted", "ok"]
    for trace in traces:
        assert STANDARD.is_path(trace.states, trace.triggers)
    answer = traces[-1].transitions[-1].chain.last_message
    assert answer is not None
    assert ("did not write" in answer.text) == (decision == "reject")


def test_demo_live_view_and_decision_are_shown(
    demos: dict[str, dict[str, pathlib.Path]],
) -> None:
    stdout = demos["reject"]["stdout"].read_text(encoding="utf-8")
    assert "approval needed" in stdout and "write_file" in stdout
    assert "decision: reject write_file" in stdout
    assert "interrupt_check" in stdout and "ended" in stdout
    assert "(expanding … deciding)x2 expanding … interrupt_check interrupted" in stdout
    assert "propagating … deciding expanding … deciding ok" in stdout


def test_demo_asks_at_a_terminal(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def answer(prompt: str, **_: object) -> bool:
        asked.append(prompt)
        return True

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("agentfsm.cli.Confirm.ask", answer)
    assert main(["demo", "--out", str(tmp_path)]) == 0
    assert asked == ["Approve write_file?"]
    out = capsys.readouterr().out
    assert "decision: approve write_file" in out
    assert len(list(tmp_path.glob("agentfsm-demo-*.md"))) == 1


def test_demo_without_a_terminal_or_a_flag_asks_for_one(tmp_path: pathlib.Path) -> None:
    result = agentfsm("demo", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "--approve or --reject" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_show_draws_a_saved_trace(demos: dict[str, dict[str, pathlib.Path]]) -> None:
    result = agentfsm("show", str(demos["approve"]["trace"]))
    assert result.returncode == 0, result.stderr
    assert "run 1 of 2" in result.stdout and "run 2 of 2" in result.stdout
    assert "stateDiagram-v2" in result.stdout
    assert "Deciding --> Expanding : loop x3" in result.stdout
    assert "(expanding … deciding)x2 expanding … interrupt_check interrupted" in result.stdout


def test_show_refuses_what_is_not_a_trace(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "cannot read a trace" in err and err.count("\n") == 1


def test_diagrams_check_passes_on_the_committed_diagrams() -> None:
    result = agentfsm("diagrams", "--check")
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_diagrams_check_names_the_stale_files(tmp_path: pathlib.Path) -> None:
    copy = tmp_path / "diagrams"
    shutil.copytree(ROOT / "diagrams", copy)
    assert main(["diagrams", "--check", "--out", str(copy)]) == 0
    (copy / "paths.md").write_text("edited by hand\n")
    (copy / "machine.mmd").unlink()
    result = agentfsm("diagrams", "--check", "--out", str(copy))
    assert result.returncode == 1
    assert "machine.mmd" in result.stderr and "paths.md" in result.stderr
    assert "machine.dot" not in result.stderr
    assert "agentfsm diagrams" in result.stderr
    # Regenerating fixes them.
    assert main(["diagrams", "--out", str(copy)]) == 0
    assert main(["diagrams", "--check", "--out", str(copy)]) == 0


def test_diagrams_check_without_graphviz_checks_the_rest(tmp_path: pathlib.Path) -> None:
    copy = tmp_path / "diagrams"
    shutil.copytree(ROOT / "diagrams", copy)
    (copy / "machine.svg").write_text("stale, but not checkable here\n")
    no_dot = {"PATH": str(tmp_path / "empty-path")}
    result = agentfsm("diagrams", "--check", "--out", str(copy), env=no_dot)
    assert result.returncode == 0, result.stderr
    assert "machine.svg not checked" in result.stdout
    (copy / "machine.dot").write_text("stale\n")
    result = agentfsm("diagrams", "--check", "--out", str(copy), env=no_dot)
    assert result.returncode == 1 and "machine.dot" in result.stderr


def test_diagrams_writes_every_file(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "new"
    assert main(["diagrams", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"machine.mmd", "machine.md", "machine.dot", "paths.md"} <= names
    assert ("machine.svg" in names) == (shutil.which("dot") is not None)


def test_run_with_the_scripted_provider() -> None:
    result = agentfsm("run", "--provider", "scripted", "--model", "echo", "what is 2+3?")
    assert result.returncode == 0, result.stderr
    assert "You said: what is 2+3?" in result.stdout
    assert "ended" in result.stdout


def test_run_without_a_key_says_so(tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    args = ["run", "--provider", "openai", "--model", "gpt-4o-mini", "hi"]
    result = subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "API key" in result.stderr or "api key" in result.stderr.lower()


@pytest.mark.parametrize("command", [[], ["demo"], ["show"], ["diagrams"], ["run"]])
def test_help_on_every_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--help"]) == 0
    assert "usage: agentfsm" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["fly"],
        ["demo", "--approve", "--reject"],
        ["demo", "--bogus"],
        ["show"],
        ["run", "--provider", "nope", "--model", "m", "hi"],
        ["run", "--provider", "scripted", "hi"],
        ["run", "--provider", "scripted", "--model", "m", "--max-runs", "0", "hi"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err


def test_the_console_script_is_installed() -> None:
    script = pathlib.Path(sys.executable).parent / "agentfsm"
    if not script.exists():
        pytest.skip("agentfsm is not installed next to this python")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "demo" in result.stdout
