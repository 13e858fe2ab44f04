"""The agentfsm command, run as users run it: in a subprocess, its files checked."""

from __future__ import annotations

import json
import os
import pathlib
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from agentfsm import STANDARD, ToolOutput
from agentfsm._cli._main import load_runs, main
from agentfsm._demo import SUMMARY

ROOT = pathlib.Path(__file__).resolve().parent.parent


def agentfsm(
    *args: str, cwd: pathlib.Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
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


def _run_id(stdout: str) -> str:
    """The run id the demo names on stdout: ``saved: run RUN_ID in ...``."""
    match = re.search(r"^saved: run (\S+) in ", stdout, re.M)
    assert match, stdout
    return match.group(1)


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, pathlib.Path]]:
    """One demo run with --approve and one with --reject, shared by the tests below."""
    out: dict[str, dict[str, pathlib.Path]] = {}
    for decision in ("approve", "reject"):
        folder = tmp_path_factory.mktemp(decision)
        db = folder / "runs.db"
        result = agentfsm("demo", f"--{decision}", "--out", str(folder), "--db", str(db))
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        files = _written(result.stdout)
        assert set(files) == {"diagram", "trace"}
        assert all(p.parent == folder for p in files.values())
        files["stdout"] = folder.parent / f"{decision}-stdout.txt"
        files["stdout"].write_text(result.stdout, encoding="utf-8")
        files["db"] = db
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
    # The resumed segment enters at the state that asked, which applies the decision;
    # executing carries it out in the trace and names it.
    assert [t.path for t in traces] == [
        "expanding calling interrupt_check executing propagating until_check deciding "
        "expanding calling interrupt_check executing propagating until_check deciding "
        "expanding calling interrupt_check interrupted",
        "interrupt_check executing propagating until_check deciding expanding calling "
        "interrupt_check executing propagating until_check deciding ok",
    ]
    executed = traces[1].transitions[1]
    assert executed.source == "executing"
    if decision == "approve":
        assert executed.detail == {
            "tools": ["write_file"],
            "errors": 0,
            "decisions": {"call_4": "approve"},
        }
    else:  # a rejected call gets its result, and did not run
        assert executed.detail == {
            "tools": [],
            "errors": 0,
            "rejected": ["write_file"],
            "decisions": {"call_4": "reject"},
        }
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
    assert "interrupt_check … deciding expanding … deciding ok" in stdout
    assert "rejected write_file" in stdout and "ran write_file" not in stdout


def test_demo_asks_at_a_terminal(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def answer(prompt: str, **_: object) -> bool:
        asked.append(prompt)
        return True

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("agentfsm._cli._main.Confirm.ask", lambda prompt, **_: answer(str(prompt)))
    assert main(["demo", "--out", str(tmp_path), "--db", str(tmp_path / "runs.db")]) == 0
    assert asked == ["Approve write_file?"]
    out = capsys.readouterr().out
    assert "decision: approve write_file" in out
    assert len(list(tmp_path.glob("agentfsm-demo-*.md"))) == 1


def test_demo_without_a_terminal_or_a_flag_asks_for_one(tmp_path: pathlib.Path) -> None:
    result = agentfsm("demo", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "--approve, --reject or --later" in result.stderr
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


def test_run_with_the_scripted_provider(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "runs.db"
    args = ("run", "--provider", "scripted", "--model", "echo", "what is 2+3?", "--db", str(db))
    result = agentfsm(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "You said: what is 2+3?" in result.stdout
    assert "ended" in result.stdout
    # Saved like the demo's run: the store has it, and the page of it can be written.
    run_id = _run_id(result.stdout)
    assert run_id.startswith("agentfsm-run-")
    assert f"see it with: agentfsm view {run_id} --db {db}" in result.stdout
    shown = agentfsm("runs", "show", run_id, "--db", str(db), cwd=tmp_path)
    assert shown.returncode == 0 and f"run {run_id}: ok at ok" in shown.stdout
    again = agentfsm(*args, cwd=tmp_path)
    assert again.returncode == 0 and _run_id(again.stdout) != run_id  # never overwritten


def test_run_with_the_scripted_provider_needs_no_model(tmp_path: pathlib.Path) -> None:
    result = agentfsm("run", "--provider", "scripted", "what is 2+3?", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "agentfsm.db").exists()  # the default store, in the current folder
    assert "You said: what is 2+3?" in result.stdout
    assert "scripted: echo" in result.stdout


def test_run_on_a_real_provider_without_a_model_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--provider", "openai", "hi"]) == 2
    err = capsys.readouterr().err
    assert err == "agentfsm run: error: --provider openai needs --model NAME\n"


def test_run_without_a_key_says_so(tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    args = ["run", "--provider", "openai", "--model", "gpt-4o-mini", "hi"]
    result = subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
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
    # Said once, on stderr; the summary on stdout says how the run ended.
    assert (result.stdout + result.stderr).lower().count("no api key") == 1
    assert "ended" in result.stdout and "error" in result.stdout


@pytest.mark.parametrize("command", [[], ["demo"], ["show"], ["view"], ["diagrams"], ["run"]])
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
        ["run", "--provider", "scripted"],
        ["demo", "--approve", "--later"],
        ["view"],
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


# ---------------------------------------------------------------- a new user's rough edges


def test_the_approved_file_is_written_and_the_rejected_one_is_not(
    demos: dict[str, dict[str, pathlib.Path]],
) -> None:
    approved = demos["approve"]["trace"].parent / "summary.md"
    assert approved.read_text(encoding="utf-8") == SUMMARY
    assert not (demos["reject"]["trace"].parent / "summary.md").exists()


def test_the_approval_panel_shows_every_argument_in_full(
    demos: dict[str, dict[str, pathlib.Path]],
) -> None:
    stdout = demos["approve"]["stdout"].read_text(encoding="utf-8")
    panel = stdout[stdout.index("approval needed") : stdout.index("decision: approve")]
    words = re.sub(r"[\s│╭╮╰╯─]+", " ", panel)
    assert " ".join(SUMMARY.split()) in words
    assert "summary.md" in words


def test_the_resumed_run_counts_the_approved_tool(
    demos: dict[str, dict[str, pathlib.Path]],
) -> None:
    approved = demos["approve"]["stdout"].read_text(encoding="utf-8")
    assert re.search(r"run 2 \(resumed\)(.|\n)*ran write_file(.|\n)*tools run +1 *\n", approved)
    rejected = demos["reject"]["stdout"].read_text(encoding="utf-8")
    assert re.search(r"run 2 \(resumed\)(.|\n)*tools run +0 *\n", rejected)


def test_runs_list_show_and_view_work_right_after_the_demo(
    demos: dict[str, dict[str, pathlib.Path]],
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = demos["approve"]
    run_id = _run_id(files["stdout"].read_text(encoding="utf-8"))
    db = str(files["db"])
    assert main(["runs", "list", "--db", db]) == 0
    listed = capsys.readouterr().out
    assert run_id in listed and " ok " in listed
    assert main(["runs", "show", run_id, "--db", db]) == 0
    assert f"run {run_id}: ok at ok, 29 steps, 2 segment(s)" in capsys.readouterr().out
    page = tmp_path / "run.html"
    assert main(["view", run_id, "--db", db, "--out", str(page)]) == 0
    assert capsys.readouterr().out == f"wrote {page}\n"
    assert "<svg" in page.read_text(encoding="utf-8")
    assert main(["runs", "resume", run_id, "--db", db]) == 2
    assert f"run {run_id} ended ok: there is nothing to resume" in capsys.readouterr().err


@pytest.fixture
def later(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[str, str]:
    """``agentfsm demo --later`` in a fresh folder (the current one): the run id and stdout."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTFSM_DB", "")
    monkeypatch.setattr(sys, "path", list(sys.path))  # --agent may add the folder
    assert main(["demo", "--later"]) == 0
    stdout = capsys.readouterr().out
    return _run_id(stdout), stdout


def test_demo_later_leaves_the_run_for_runs_resume(
    later: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, stdout = later
    assert pathlib.Path("agentfsm.db").is_file() and not pathlib.Path("summary.md").exists()
    hint = stdout.strip().splitlines()[-1]
    assert hint.startswith("waiting for a decision on write_file; answer with: ")
    command = hint.split("answer with: ", 1)[1].split(" (one per request")[0]
    digest = _request_digest(run_id)
    approve = json.dumps([{"type": "approve", "digest": digest}])
    assert command == f"agentfsm runs resume {run_id} --decisions '{approve}'"
    # Without decisions: the hint again, in flags, not Python.
    assert main(["runs", "resume", run_id]) == 2
    err = capsys.readouterr().err
    assert "--decisions" in err and "resume_run(" not in err and "decisions=[" not in err
    # A decision on the command line is bound to the request it was made on: one without
    # a digest is refused, saying where the digests are, and nothing runs.
    assert main(["runs", "resume", run_id, "--decisions", '[{"type": "approve"}]']) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"agentfsm runs: decision 0 carries no digest of the request it decides; "
        f"agentfsm runs show {run_id} lists each request with its digest. Run {run_id} is "
        f"{hint}"
    )
    assert approve in err and "unbound" not in err
    assert not pathlib.Path("summary.md").exists()
    assert main(["runs", "show", run_id]) == 0
    assert f"digest {digest}" in capsys.readouterr().out
    # The command as printed.
    assert main(shlex.split(command)[1:]) == 0
    assert f"run {run_id}: ok at ok" in capsys.readouterr().out
    assert pathlib.Path("summary.md").read_text(encoding="utf-8") == SUMMARY


def test_runs_resume_names_flags_when_the_agent_lacks_the_tools(
    later: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, _ = later
    decide = ["--decisions", json.dumps([{"type": "approve", "digest": _request_digest(run_id)}])]
    assert main(["runs", "resume", run_id, *decide, "--agent", "tests.test_cli:calculator"]) == 2
    err = capsys.readouterr().err
    assert "lacks tools" in err and "--agent" in err and "strict=False" not in err
    # A factory that needs arguments: said, not a traceback.
    spec = "agentfsm._demo:calculator_agent"
    assert main(["runs", "resume", run_id, *decide, "--agent", spec]) == 2
    assert "calling calculator_agent() failed: TypeError" in capsys.readouterr().err
    # Decisions for a run that does not wait for any.
    reject = json.dumps([{"type": "reject", "digest": _request_digest(run_id)}])
    assert main(["runs", "resume", run_id, "--decisions", reject]) == 0
    capsys.readouterr()
    assert main(["runs", "resume", run_id, *decide]) == 2
    assert "there is nothing to resume" in capsys.readouterr().err


def calculator() -> object:
    from agentfsm._demo import calculator_agent
    from agentfsm.providers import ScriptedModel

    return calculator_agent(ScriptedModel([]))


AGENT_MODULE = """
from agentfsm._demo import demo_agent

agent = demo_agent(delay=0, stream=False)
"""


def test_runs_resume_imports_the_agent_from_the_current_folder(tmp_path: pathlib.Path) -> None:
    assert agentfsm("demo", "--later", "--out", ".", cwd=tmp_path).returncode == 0
    (tmp_path / "my_agents.py").write_text(AGENT_MODULE, encoding="utf-8")
    (run,) = _runs(tmp_path)
    decisions = json.dumps([{"type": "reject", "digest": _request_digest(run, tmp_path)}])
    # -P: the folder is not on sys.path by itself, as for the installed agentfsm script.
    result = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "agentfsm",
            "runs",
            "resume",
            run,
            "--agent",
            "my_agents:agent",
            "--decisions",
            decisions,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "did not write summary.md" in result.stdout


def _request_digest(run_id: str, folder: pathlib.Path = pathlib.Path()) -> str:
    """The digest of the one request the saved run ``run_id`` waits on."""
    from agentfsm import Approval
    from agentfsm.store import SQLiteStore, load_run

    with SQLiteStore(folder / "agentfsm.db", read_only=True) as store:
        state = load_run(store, run_id, strict=False).agent_state
    assert state is not None
    (request,) = Approval.of(state.interrupt_data).requests
    return request.digest


def _runs(folder: pathlib.Path) -> list[str]:
    from agentfsm.store import SQLiteStore

    with SQLiteStore(folder / "agentfsm.db", read_only=True) as store:
        return [r.run_id for r in store.runs()]


def _wait_for(fd: int, text: bytes | None, timeout: float = 90) -> bytes:
    """What the terminal showed until ``text`` (None: until the process closed it); neither
    within ``timeout`` seconds fails."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text is None or text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"never saw {text!r} in {seen[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: every end of the terminal is closed
                chunk = b""
            if not chunk:
                assert text is None, f"the terminal closed before {text!r}: {seen[-2000:]!r}"
                break
            seen += chunk
    return seen


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_until_reading_stdin(pid: int, timeout: float = 30) -> None:
    """Until process ``pid`` sleeps in ``read(0, ...)`` (Linux; elsewhere, at once).

    A signal that lands after the prompt is written but in the instant before the
    process blocks in ``read`` (inside ``input()``, past Python's last check of
    pending signals) is only acted on once ``read`` returns: the process would wait
    for a key press. A person presses Ctrl-C at a waiting prompt; so does the test.
    """
    syscall = pathlib.Path(f"/proc/{pid}/syscall")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            words = syscall.read_text().split()
        except OSError:
            return  # no /proc: the prompt's own wait has to do
        if words[:2] == ["0", "0x0"]:  # read(fd 0, ...)
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never waited for input: {syscall.read_text()!r}")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
@pytest.mark.timeout(300)
def test_one_ctrl_c_at_the_approval_prompt_stops_the_demo(tmp_path: pathlib.Path) -> None:
    """The demo asks at a terminal (stdin and stdout a pseudo-terminal); its error output
    goes to a pipe, which keeps every byte of its last words (a terminal closed by an
    exiting process may drop what it had not delivered yet)."""
    main_fd, child_fd = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "demo", "--out", str(tmp_path)],
        cwd=tmp_path,
        stdin=child_fd,
        stdout=child_fd,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "100"},
        # Ctrl-C as at a person's terminal, also when the tests run in the background
        # (a shell's `&`, mutmut's workers), which hands its children SIGINT ignored.
        preexec_fn=_default_sigint,
    )
    os.close(child_fd)
    try:
        _wait_for(main_fd, b"Approve write_file?")
        _wait_until_reading_stdin(process.pid)
        process.send_signal(signal.SIGINT)
        # Keep reading while it exits: a full terminal buffer would block its last words.
        _wait_for(main_fd, None)
        assert process.wait(timeout=60) == 130
        assert process.stderr is not None
        err = process.stderr.read()
        assert b"agentfsm demo: interrupted" in err and b"Traceback" not in err, err
        # The run waits in the store: the exact command that answers it, store named in full.
        db = shlex.quote(str(tmp_path / "agentfsm.db"))
        hint = re.search(rb"agentfsm runs resume (\S+) --db (\S+) --decisions", err)
        assert hint is not None and hint.group(2).decode() == db, err
        assert b"waiting for a decision on write_file" in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
        os.close(main_fd)


def test_narrow_terminals_never_cut_a_state_name(
    demos: dict[str, dict[str, pathlib.Path]],
) -> None:
    result = agentfsm("show", str(demos["approve"]["trace"]), env={"COLUMNS": "60"})
    assert result.returncode == 0, result.stderr
    assert not re.search(r"\w…", result.stdout)  # a name cut short ends in "…"
    assert "interrupt_check --interrupted--> interrupted" in result.stdout
    lines = result.stdout.split("the run on the machine")[0].splitlines()
    assert max(len(line) for line in lines if not line.startswith("path: ")) <= 60


def test_show_prints_mermaid_whole_when_piped(demos: dict[str, dict[str, pathlib.Path]]) -> None:
    from agentfsm.diagrams import _writers as diagrams

    trace = demos["approve"]["trace"]
    result = agentfsm("show", str(trace), env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    expected = diagrams.run_mermaid(load_runs(json.loads(trace.read_text())), STANDARD)
    assert any(len(line) > 80 for line in expected.splitlines())  # the case that used to break
    lines = set(result.stdout.splitlines())
    assert all(line in lines for line in expected.splitlines())


def test_every_command_and_argument_has_help_and_one_metavar_per_concept() -> None:
    """The help dump: each subcommand a one-line help and a description, each argument a
    help text; a module's attribute is MODULE:ATTR wherever a command takes one."""
    import argparse

    from agentfsm._cli._main import _parser

    missing: list[str] = []
    metavars: set[str] = set()

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    if not helps.get(name) or not sub.description:
                        missing.append(" ".join([*path, name]))
                    walk(sub, [*path, name])
            elif not isinstance(action, argparse._HelpAction):
                if not action.help:
                    missing.append(" ".join([*path, *(action.option_strings or [action.dest])]))
                if isinstance(action.metavar, str) and "MODULE" in action.metavar:
                    metavars.add(action.metavar)

    walk(_parser(), ["agentfsm"])
    assert missing == []
    assert metavars == {"MODULE:ATTR", "MODULE"}  # an attribute of a module; a module


def test_a_subcommands_unknown_option_names_the_subcommand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["runs", "show", "x", "--jsno"]) == 2
    assert capsys.readouterr().err == (
        "agentfsm runs show: error: unrecognized arguments: --jsno; did you mean --json? "
        "(see agentfsm runs show --help)\n"
    )


def test_runs_list_as_json(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    db = tmp_path / "runs.db"
    from agentfsm import Agent, start_run
    from agentfsm.providers import ScriptedModel, say
    from agentfsm.store import SQLiteStore

    with SQLiteStore(db) as store:
        start_run(Agent(ScriptedModel([say("hi")])), "hello", store, run_id="one").run_sync()
    assert main(["runs", "list", "--db", str(db), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert (run["run_id"], run["status"], run["steps"]) == ("one", "ok", 7)


def test_the_resume_hint_names_the_requests_the_store_and_the_decisions_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentfsm._approval import request_digest
    from agentfsm._resumable import db_flag, default_db, resume_hint

    monkeypatch.delenv("AGENTFSM_DB", raising=False)
    assert default_db() == "agentfsm.db" and db_flag("agentfsm.db") == ""
    assert db_flag("my runs.db") == " --db 'my runs.db'"
    monkeypatch.setenv("AGENTFSM_DB", "other.db")
    assert default_db() == "other.db" and db_flag("agentfsm.db") == " --db agentfsm.db"
    one = {"tool_call_id": "c1", "tool_name": "write_file", "arguments": {"path": "a"}}
    two = {"tool_call_id": "c2", "tool_name": "delete", "arguments": {}}
    data = {
        "action_requests": [one, "not a request", two],
        "review_configs": {
            "write_file": {"allowed_decisions": ["approve", "edit"]},
            "delete": {"allowed_decisions": "reject"},  # not a list: no types from it
        },
    }
    decisions = json.dumps(
        [
            {"type": "approve", "digest": request_digest(one)},
            {"type": "approve", "digest": request_digest(two)},
        ]
    )
    assert resume_hint("r 1", data, "other.db") == (
        "waiting for a decision on write_file, delete; answer with: agentfsm runs resume "
        f"'r 1' --decisions {shlex.quote(decisions)} (one per request, type approve or edit)"
    )
    assert resume_hint("r1", None, "x.db") == (
        "waiting for a decision on its interrupt; answer with: agentfsm runs resume r1 "
        """--db x.db --decisions '[{"type": "approve"}]'"""
    )
    assert resume_hint("r1", {"action_requests": [one], "review_configs": []}, "x.db").endswith(
        "--decisions "
        + shlex.quote(json.dumps([{"type": "approve", "digest": request_digest(one)}]))
    )


def test_a_bare_mode_run_waiting_on_a_tool_is_refused_a_decision_without_a_digest(
    tmp_path: pathlib.Path,
) -> None:
    """A run a mode ran without an agent keeps no agent state: the refusal still says
    what the run waits on, in the command line's words."""
    from agentfsm import Agent, LLMChain, Message, tool
    from agentfsm._agent_spec import UsageError
    from agentfsm._modes import StandardMode
    from agentfsm._resumable import check_resumable
    from agentfsm.providers import ScriptedModel, call_tool
    from agentfsm.store import SQLiteStore, checkpoint, load_run

    @tool
    def ask(question: str) -> ToolOutput:
        """Ask."""
        return ToolOutput("asked", interrupt={"question": question})

    model = ScriptedModel([call_tool("ask", question="why?")])
    with SQLiteStore(tmp_path / "runs.db") as store:
        run = StandardMode().start(LLMChain(model, tools=[ask]).add_message(Message.user("go")))
        checkpoint(run, store, run_id="bare")
        run.run_sync()
        saved = load_run(store, "bare", models=[model], tools=[ask])
    assert (saved.status, saved.agent_state) == ("interrupted", None)
    with pytest.raises(UsageError) as info:
        check_resumable(saved, [{"type": "approve"}], Agent(model, [ask]), "m:agent", "runs.db")
    assert str(info.value) == (
        "decision 0 carries no digest of the request it decides; agentfsm runs show bare "
        "--db runs.db lists each request with its digest. Run bare is waiting for a decision "
        """on its interrupt; answer with: agentfsm runs resume bare --db runs.db --decisions """
        """'[{"type": "approve"}]'"""
    )
    # A run the command line started with --agent on a machine of the user's own: the
    # refusal names every module that declares the machine, and the agent to resume with.
    command = {"agent": "my_agents:mailer", "machines": ["my_agents", "more.agents"]}
    with pytest.raises(UsageError) as info:
        check_resumable(saved, [{}], Agent(model, [ask]), "m:agent", "runs.db", command)
    assert str(info.value) == (
        "decision 0 carries no digest of the request it decides; agentfsm runs show bare "
        "--db runs.db --machines my_agents --machines more.agents lists each request with "
        "its digest. Run bare is waiting for a decision on its interrupt; answer with: "
        "agentfsm runs resume bare --db runs.db --agent my_agents:mailer --decisions "
        """'[{"type": "approve"}]'"""
    )
    with pytest.raises(UsageError) as info:
        check_resumable(saved, None, Agent(model, [ask]), "m:agent", "runs.db", command)
    assert str(info.value) == (
        "run bare is interrupted, waiting for a decision on its interrupt; answer with: "
        "agentfsm runs resume bare --db runs.db --agent my_agents:mailer --decisions "
        """'[{"type": "approve"}]'"""
    )


def test_a_recorded_command_is_read_back_checked(tmp_path: pathlib.Path) -> None:
    """The command a run was started with is data from a saved file: read back as it was
    recorded when it has the shape the command line writes, its module names checked one
    by one, and nothing of it when it is of another shape (never a name to import)."""
    from agentfsm import LLMChain, Message
    from agentfsm._modes import StandardMode
    from agentfsm._resumable import recorded_command
    from agentfsm.providers import ScriptedModel
    from agentfsm.store import SQLiteStore, checkpoint

    spec = "my_agents:mailer"
    read = {
        "as recorded": (
            {"agent": spec, "machines": ["my_agents", "pkg.more_agents"]},
            {"agent": spec, "machines": ["my_agents", "pkg.more_agents"]},
        ),
        "bad machines": (
            {"agent": spec, "machines": ["ok", "not a module", "os;rm", 3, None, "a.b"]},
            {"agent": spec, "machines": ["ok", "a.b"]},
        ),
        "machines not a list": (
            {"agent": spec, "machines": "my_agents"},
            {"agent": spec, "machines": []},
        ),
        "no machines": ({"agent": spec}, {"agent": spec, "machines": []}),
        "no attribute": ({"agent": "my_agents", "machines": ["m"]}, {}),
        "not a spec": ({"agent": "os.system('x'):y"}, {}),
        "agent not text": ({"agent": ["my_agents:mailer"]}, {}),
        "own agent": (
            {"provider": "openai", "model": "gpt-x", "base_url": None, "max_runs": 3, "x": 1},
            {"provider": "openai", "model": "gpt-x", "base_url": None, "max_runs": 3},
        ),
        "own agent at a url": (
            {"provider": "scripted", "model": "m", "base_url": "http://h/v1", "max_runs": 1},
            {"provider": "scripted", "model": "m", "base_url": "http://h/v1", "max_runs": 1},
        ),
        "anthropic": (
            {"provider": "anthropic", "model": "m", "max_runs": 2},
            {"provider": "anthropic", "model": "m", "base_url": None, "max_runs": 2},
        ),
        "unknown provider": ({"provider": "other", "model": "m", "max_runs": 1}, {}),
        "model not text": ({"provider": "openai", "model": 5, "max_runs": 1}, {}),
        "url not text": ({"provider": "openai", "model": "m", "base_url": 5, "max_runs": 1}, {}),
        "runs a flag": ({"provider": "openai", "model": "m", "max_runs": True}, {}),
        "no runs": ({"provider": "openai", "model": "m", "max_runs": 0}, {}),
        "runs as text": ({"provider": "openai", "model": "m", "max_runs": "3"}, {}),
        "no runs given": ({"provider": "openai", "model": "m"}, {}),
        "not recorded": (None, {}),
    }
    with SQLiteStore(tmp_path / "runs.db") as store:
        for run_id, (command, _) in read.items():
            run = StandardMode().start(LLMChain(ScriptedModel([])).add_message(Message.user("go")))
            checkpoint(run, store, run_id=run_id, command=command)
        assert {run_id: recorded_command(store, run_id) for run_id in read} == {
            run_id: expected for run_id, (_, expected) in read.items()
        }
        assert recorded_command(store, "no such run") == {}
