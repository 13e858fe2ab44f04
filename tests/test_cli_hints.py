"""The commands the command line prints work when pasted: a user's own agent, run with
``agentfsm run --agent``, stopped at an approval or by Ctrl-C (inside a sync tool or an
async one), goes on with the very command printed, run in a shell as a user would."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

AGENTS = '''
import asyncio
import pathlib
import time

from agentfsm import STANDARD, Agent, HumanInTheLoop, tool
from agentfsm.providers import ScriptedModel, call_tool, say


@tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    pathlib.Path("sent.txt").write_text(to)
    return f"sent to {to}"


@tool
def wait_sync(flag: str) -> str:
    """Wait, blocking, until the file ``flag`` exists."""
    pathlib.Path("started.txt").write_text("sync")
    while not pathlib.Path(flag).exists():
        time.sleep(0.02)
    return "waited"


@tool
async def wait_async(flag: str) -> str:
    """Wait until the file ``flag`` exists."""
    pathlib.Path("started.txt").write_text("async")
    while not pathlib.Path(flag).exists():
        await asyncio.sleep(0.02)
    return "waited"


def _script(name, **arguments):
    def reply(messages):
        if sum(m.role == "assistant" for m in messages) == 0:
            return call_tool(name, **arguments)
        return say("All done.")

    return reply


def mailer():
    return Agent(
        ScriptedModel(_script("send_email", to="ann@example.com", body="hi"), model_name="m"),
        [send_email],
        middleware=[HumanInTheLoop({"send_email": {"allowed_decisions": ["approve", "reject"]}})],
    )


def tally(result, opts):
    return result


TALLYING = STANDARD.insert("tallying", (tally,), after="until_check", name="hints_tallying")


def tallying_mailer():
    agent = mailer()
    return Agent(agent.model, agent.tools, middleware=agent.middleware, machine=TALLYING)


def sync_waiter():
    return Agent(ScriptedModel(_script("wait_sync", flag="go"), model_name="m"), [wait_sync])


def async_waiter():
    return Agent(ScriptedModel(_script("wait_async", flag="go"), model_name="m"), [wait_async])
'''

#: The path of a run that called one tool and answered (segment 2 of a resumed run
#: goes on from where the first stopped).
TOOL_THEN_ANSWER = (
    "propagating --propagated--> until_check",
    "until_check --unsatisfied--> deciding",
    "deciding --loop--> expanding",
    "expanding --expanded--> calling",
    "calling --called--> interrupt_check",
    "interrupt_check --clear--> executing",
    "executing --executed--> propagating",
    "propagating --propagated--> until_check",
    "until_check --unsatisfied--> deciding",
    "deciding --done--> ok",
)


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "100", "AGENTFSM_DB": ""}


def _agentfsm(folder: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -P: the folder is not on sys.path by itself, as for the installed agentfsm script.
    return subprocess.run(
        [sys.executable, "-P", "-m", "agentfsm", *args],
        cwd=folder,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _pasted(folder: pathlib.Path, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` as printed, run by a shell (its quoting included) from ``folder``."""
    assert command.startswith("agentfsm "), command
    line = f"{sys.executable} -P -m {command}"
    return subprocess.run(
        ["/bin/sh", "-c", line],
        cwd=folder,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _steps(stdout: str) -> list[str]:
    """The transitions a command printed: ``source --trigger--> dest``, in order."""
    return re.findall(r"^\s+\d+\s+(\S+ --\S+--> \S+)", stdout, re.M)


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "my_agents.py").write_text(AGENTS, encoding="utf-8")
    return tmp_path


def test_the_approval_hint_of_runs_show_works_when_pasted(folder: pathlib.Path) -> None:
    started = _agentfsm(folder, "run", "--agent", "my_agents:mailer", "mail ann", "--db", "r.db")
    assert started.returncode == 0, started.stderr
    run_id = re.search(r"^saved: run (\S+) in r\.db", started.stdout, re.M)
    assert run_id is not None, started.stdout
    (printed,) = re.findall(r"answer with: (agentfsm runs resume .*?) \(one per", started.stdout)
    assert " --agent my_agents:mailer " in printed
    shown = _agentfsm(folder, "runs", "show", run_id.group(1), "--db", "r.db")
    assert shown.returncode == 0, shown.stderr
    (hint,) = re.findall(r"answer with: (agentfsm runs resume .*?) \(one per", shown.stdout)
    assert hint == printed
    assert not (folder / "sent.txt").exists()
    resumed = _pasted(folder, hint)
    assert resumed.returncode == 0, resumed.stderr
    assert _steps(resumed.stdout) == [
        "interrupt_check --clear--> executing",
        "executing --executed--> propagating",
        *TOOL_THEN_ANSWER,
    ]
    assert f"run {run_id.group(1)}: ok at ok" in resumed.stdout
    assert "answer: All done." in resumed.stdout
    assert (folder / "sent.txt").read_text() == "ann@example.com"


def test_a_run_on_its_own_machine_names_the_module_that_declares_it(
    folder: pathlib.Path,
) -> None:
    """Every command printed for a run of a machine of the user's own imports the module
    that declares it, so it works from a fresh shell."""
    agent = "my_agents:tallying_mailer"
    started = _agentfsm(folder, "run", "--agent", agent, "mail ann", "--db", "r.db")
    assert started.returncode == 0, started.stderr
    (view,) = re.findall(r"see it with: (agentfsm view .*)", started.stdout)
    run_id = view.split()[2]
    assert view == f"agentfsm view {run_id} --db r.db --machines my_agents"
    viewed = _pasted(folder, view)
    assert viewed.returncode == 0, viewed.stderr
    assert (folder / f"{run_id}.html").exists()
    # A decision without its digest: the refusal names the show command that lists them.
    unbound = _agentfsm(
        folder, "runs", "resume", run_id, "--db", "r.db", "--agent", agent, "--decisions", "[{}]"
    )
    assert unbound.returncode == 2
    (show,) = re.findall(r"(agentfsm runs show .*?) lists each request", unbound.stderr)
    assert show == f"agentfsm runs show {run_id} --db r.db --machines my_agents"
    shown = _pasted(folder, show)
    assert shown.returncode == 0, shown.stderr
    (hint,) = re.findall(r"answer with: (agentfsm runs resume .*?) \(one per", shown.stdout)
    assert f" --agent {agent} " in hint
    resumed = _pasted(folder, hint)
    assert resumed.returncode == 0, resumed.stderr
    assert "until_check --unsatisfied--> tallying" in _steps(resumed.stdout)
    assert _steps(resumed.stdout)[-1] == "deciding --done--> ok"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stopped_by_ctrl_c(folder: pathlib.Path, agent: str, *command: str) -> tuple[str, float]:
    """``agentfsm run --agent`` (or ``command``) sent SIGINT while its tool waits: its
    stderr, and the seconds it took to exit after the signal."""
    (folder / "started.txt").unlink(missing_ok=True)
    command = command or ("run", "--agent", agent, "go on", "--db", "r.db")
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "agentfsm", *command],
        cwd=folder,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as at a person's terminal, also when the tests run in the background
        # (a shell's `&`), which hands its children SIGINT ignored.
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 30
        while not (folder / "started.txt").exists():  # the tool is running
            assert process.poll() is None and time.monotonic() < deadline, process.stderr
            time.sleep(0.02)
        time.sleep(0.2)
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    return err, took


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_ctrl_c_inside_a_tool_stops_the_run_and_its_hint_resumes_it(
    folder: pathlib.Path, kind: str
) -> None:
    err, took = _stopped_by_ctrl_c(folder, f"my_agents:{kind}_waiter")
    assert took < 10, took  # at once, not when the tool returns (it never would)
    # One line, no traceback: what stopped, where the run is saved, the command going on.
    assert len(err.splitlines()) == 1, err
    line = re.fullmatch(
        r"agentfsm run: interrupted; run (\S+) is saved at paused \(paused: cancelled\); "
        r"go on with: (agentfsm runs resume \S+ --db \S+ --agent my_agents:\w+)\n",
        err,
    )
    assert line is not None, err
    assert line.group(2).endswith(f" --agent my_agents:{kind}_waiter")
    shown = _agentfsm(folder, "runs", "show", line.group(1), "--db", "r.db")
    assert f"run {line.group(1)}: paused at paused" in shown.stdout
    assert "paused: cancelled; go on with: agentfsm runs resume" in shown.stdout
    (folder / "go").write_text("")  # the tool returns this time
    resumed = _pasted(folder, line.group(2))
    assert resumed.returncode == 0, resumed.stderr
    # A paused run goes on in a new segment at its pending calls: the cancelled one runs again.
    assert _steps(resumed.stdout) == [
        "interrupt_check --clear--> executing",
        "executing --executed--> propagating",
        *TOOL_THEN_ANSWER,
    ]
    assert f"run {line.group(1)}: ok at ok" in resumed.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_a_stopped_run_resumes_with_the_agent_its_hint_names(folder: pathlib.Path) -> None:
    """``agentfsm runs resume RUN_ID`` alone is told the ``--agent`` to add (a saved run names
    its agent's module but never loads it); with it, the run goes on to its end."""
    err, _ = _stopped_by_ctrl_c(folder, "my_agents:sync_waiter")
    run_id = re.search(r"run (\S+) is saved at paused", err)
    assert run_id is not None, err
    (folder / "go").write_text("")
    alone = _agentfsm(folder, "runs", "resume", run_id.group(1), "--db", "r.db")
    assert alone.returncode == 2
    assert alone.stderr.strip().endswith(
        "the run was started with --agent my_agents:sync_waiter, which a saved run names "
        "but does not load: add --agent my_agents:sync_waiter"
    ), alone.stderr
    assert alone.stderr.count("\n") == 1
    (hint,) = re.findall(r"go on with: (.*)", err)
    resumed = _pasted(folder, hint)
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id.group(1)}: ok at ok" in resumed.stdout
    assert _steps(resumed.stdout)[-1] == "deciding --done--> ok"


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_ctrl_c_while_runs_resume_runs_a_sync_tool(folder: pathlib.Path) -> None:
    """Stopped again while resuming: one line, the same command to go on with."""
    err, _ = _stopped_by_ctrl_c(folder, "my_agents:sync_waiter")
    run_id = re.search(r"run (\S+) is saved at paused", err)
    assert run_id is not None, err
    again, took = _stopped_by_ctrl_c(
        folder, "", "runs", "resume", run_id.group(1), "--db", "r.db",
        "--agent", "my_agents:sync_waiter",
    )  # fmt: skip
    assert took < 10, took
    assert again == (
        f"agentfsm runs: interrupted; run {run_id.group(1)} is saved at paused; go on with: "
        f"agentfsm runs resume {run_id.group(1)} --db r.db --agent my_agents:sync_waiter\n"
    )


def test_a_run_of_the_small_agent_resumes_with_its_own_model(folder: pathlib.Path) -> None:
    """A fork of an ``agentfsm run --provider scripted`` run goes on with no --agent: the
    store recorded the provider and model it ran on."""
    started = _agentfsm(folder, "run", "--provider", "scripted", "what is 2+3?", "--db", "r.db")
    assert started.returncode == 0, started.stderr
    run_id = re.search(r"^saved: run (\S+) in r\.db", started.stdout, re.M)
    assert run_id is not None
    forked = _agentfsm(folder, "runs", "fork", run_id.group(1), "2", "--id", "f", "--db", "r.db")
    assert forked.returncode == 0, forked.stderr
    (hint,) = re.findall(r"go on with: (.*)", forked.stdout)
    assert hint == "agentfsm runs resume f --db r.db"
    resumed = _pasted(folder, hint)
    assert resumed.returncode == 0, resumed.stderr
    assert "run f: ok at ok" in resumed.stdout
    assert "You said: what is 2+3?" in resumed.stdout


def test_run_takes_an_agent_or_a_provider_not_both(folder: pathlib.Path) -> None:
    both = _agentfsm(folder, "run", "--agent", "my_agents:mailer", "--provider", "scripted", "x")
    assert both.returncode == 2
    assert "--agent runs your agent on its own model: drop --provider" in both.stderr
    neither = _agentfsm(folder, "run", "x")
    assert neither.returncode == 2
    assert "--provider NAME" in neither.stderr and "--agent MODULE:ATTR" in neither.stderr


def _all_parsers() -> list[tuple[str, object]]:
    """Every (sub)command of the parser, by its words (``agentfsm runs list``)."""
    import argparse

    from agentfsm._cli._main import _parser

    found: list[tuple[str, object]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")

    walk(_parser(), "agentfsm")
    return found


def test_every_option_has_help_and_one_metavar_wherever_it_is_taken() -> None:
    import argparse

    missing: list[str] = []
    metavars: dict[str, set[str]] = {}
    for path, parser in _all_parsers():
        assert isinstance(parser, argparse.ArgumentParser)
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
            for option in action.option_strings:
                if isinstance(action.metavar, str):
                    metavars.setdefault(option, set()).add(action.metavar)
    assert missing == []
    # --out is a folder (demo, diagrams) or the page view writes: two things, two names.
    assert metavars.pop("--out") == {"DIR", "FILE.html"}
    assert {o: m for o, m in metavars.items() if len(m) > 1} == {}
    assert metavars["--db"] == {"PATH"} and metavars["--agent"] == {"MODULE:ATTR"}


#: The commands that print a listing or a report, each of which prints it as JSON too.
LISTINGS = (
    "runs list",
    "runs show",
    "runs compare",
    "runs migrate",
    "runs replay",
    "machines diff",
    "check",
)


def test_every_listing_takes_json() -> None:
    import argparse

    parsers = dict(_all_parsers())
    for words in LISTINGS:
        parser = parsers[f"agentfsm {words}"]
        assert isinstance(parser, argparse.ArgumentParser)
        options = {o for a in parser._actions for o in a.option_strings}
        assert "--json" in options, words


def test_the_reports_as_json(folder: pathlib.Path) -> None:
    import json

    started = _agentfsm(folder, "run", "--provider", "scripted", "hi", "--db", "r.db")
    run_id = re.search(r"^saved: run (\S+) in r\.db", started.stdout, re.M)
    assert run_id is not None, started.stderr
    one = run_id.group(1)
    assert _agentfsm(folder, "runs", "fork", one, "2", "--id", "f", "--db", "r.db").returncode == 0
    compared = _agentfsm(folder, "runs", "compare", one, "f", "--db", "r.db", "--json")
    doc = json.loads(compared.stdout)
    assert (doc["a"]["run_id"], doc["b"]["run_id"], doc["parted"]) == (one, "f", 3)
    assert doc["rows"][0] == {
        "number": 1,
        "a": "expanding --expanded--> calling",
        "b": "expanding --expanded--> calling",
        "likeness": "same",
    }
    migrated = _agentfsm(
        folder, "runs", "migrate", "--to", "agentfsm:STANDARD", "--dry-run", "--db", "r.db",
        "--json",
    )  # fmt: skip
    report = json.loads(migrated.stdout)
    assert report["machine"]["name"] == "standard" and report["dry_run"] is True
    assert sorted((r["run_id"], r["verdict"], r["policy"]) for r in report["runs"]) == [
        (one, "ok", "unchanged"),
        ("f", "ok", "unchanged"),
    ]
    replayed = _agentfsm(
        folder, "runs", "replay", one, "--machine", "agentfsm:STANDARD", "--db", "r.db", "--json"
    )
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["agrees"] is True
    diffed = _agentfsm(
        folder, "machines", "diff", "agentfsm:STANDARD", "agentfsm:STANDARD", "--json"
    )
    assert diffed.returncode == 0
    assert json.loads(diffed.stdout)["same"] is True
    checked = _agentfsm(folder, "check", "agentfsm:STANDARD", "--json")
    assert checked.returncode == 0, checked.stderr
    (verdict,) = json.loads(checked.stdout)
    assert (verdict["machine"], verdict["ok"], verdict["problems"]) == ("standard", True, [])
