"""The pytest plugin, run in a pytest of its own (``pytester``): fixtures, coverage, cassettes."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _quiet_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


AGENT_TEST = '''
from agentfsm import Agent, AgentState, tool
from agentfsm.providers import call_tool, say


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_answers(scripted_model):
    model = scripted_model(call_tool("add", a=1, b=2), say("3"))
    run = Agent(model, [add]).start(AgentState.of("1+2?"))
    run.run_sync()
    assert run.agent_state.messages[-1].text == "3"
'''


def test_the_fixtures_are_there_without_configuration(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        AGENT_TEST
        + """

def test_store(agentfsm_store):
    from agentfsm.store import SQLiteStore
    assert isinstance(agentfsm_store, SQLiteStore)
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "agentfsm coverage" not in result.stdout.str()


def test_coverage_reports_each_machine_run_and_what_it_never_took(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(AGENT_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--agentfsm-coverage")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "agentfsm coverage" in out
    result.stdout.fnmatch_lines(
        [
            "standard: 1 runs; edges 8/25 (32%), paths 1/95 (1%; 2 no run can take)",
            "  edges never taken:",
            "    calling --failed--> error  (*",
            "  94 paths never taken (--agentfsm-coverage=full lists them)",
        ]
    )
    assert "    interrupt_check --interrupted--> interrupted" in out
    assert len(out.splitlines()) < 40  # a summary, not every untaken path
    full = pytester.runpytest("-p", "no:cacheprovider", "--agentfsm-coverage=full")
    full.stdout.fnmatch_lines(["  paths never taken:", "    fresh: expanding calling error"])
    assert len(full.stdout.str().splitlines()) > 100


def test_fail_under_fails_a_green_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(AGENT_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--agentfsm-fail-under=90")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["edges taken over all machines: *(--agentfsm-fail-under=90): FAIL"]
    )
    last = result.stdout.str().strip().splitlines()[-1]
    assert "1 passed" in last and "1 agentfsm_fail_under" in last
    passing = pytester.runpytest("-p", "no:cacheprovider", "--agentfsm-fail-under=10")
    assert passing.ret == pytest.ExitCode.OK


def test_path_cases_cover_every_edge_of_a_machine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
import pytest
from agentfsm._modes.langchain import UNTIL_SUCCESS
from agentfsm.testing import path_cases


@pytest.mark.parametrize("case", [c.param for c in path_cases(UNTIL_SUCCESS)])
def test_path(case):
    case.check()
"""
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--agentfsm-coverage", "--agentfsm-fail-under=100"
    )
    result.assert_outcomes(passed=25)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["until_success: 25 runs; edges 10/10 (100%), paths 25/25 (100%)"])


ANSWER_TEST = """
from agentfsm import Agent, AgentState
from agentfsm.providers import say


def test_answers_at_once(scripted_model):
    run = Agent(scripted_model(say("hi")), []).start(AgentState.of("hi?"))
    run.run_sync()
    assert run.result.__class__.__name__ == "Ok"
"""


def test_coverage_under_xdist_adds_up_every_workers_runs(pytester: pytest.Pytester) -> None:
    """Each xdist worker counts its own tests' runs; the report, the verdict and the
    drawing are the session's, the same as with the tests run in one process."""
    pytester.makepyfile(test_tools=AGENT_TEST, test_answer=ANSWER_TEST)
    pytester.makeconftest(
        "import os, pathlib, pytest\n"
        "@pytest.fixture(autouse=True)\n"
        "def _where():\n"
        "    pathlib.Path('ran-on-' + os.environ.get('PYTEST_XDIST_WORKER', 'one')).touch()\n"
    )
    options = ("--agentfsm-coverage=full", "--agentfsm-fail-under=30", "--agentfsm-coverage-dir=d")

    def report(*spread: str) -> tuple[list[str], str, pytest.ExitCode | int]:
        result = pytester.runpytest("-p", "no:cacheprovider", *spread, *options)
        result.assert_outcomes(passed=2)
        lines = result.stdout.str().splitlines()
        start = lines.index(next(line for line in lines if "agentfsm coverage" in line))
        end = next(i for i, line in enumerate(lines) if "edges taken over all" in line)
        drawn = (pytester.path / "d" / "standard.mmd").read_text()
        return [line for line in lines[start + 1 : end + 1] if line], drawn, result.ret

    alone, drawn_alone, ret_alone = report("-n", "0")
    spread, drawn_spread, ret_spread = report("-n", "2")
    assert alone[0] == "standard: 2 runs; edges 8/25 (32%), paths 2/95 (2%; 2 no run can take)"
    assert "    fresh: expanding calling interrupt_check executing … ok" not in alone  # taken
    assert sorted(p.name for p in pytester.path.glob("ran-on-gw*")) == ["ran-on-gw0", "ran-on-gw1"]
    assert spread == alone
    assert drawn_spread == drawn_alone and "Calling --> InterruptCheck : called x3" in drawn_alone
    assert ret_alone == ret_spread == pytest.ExitCode.OK
    assert alone[-1] == "edges taken over all machines: 32.0% (--agentfsm-fail-under=30): ok"


def test_coverage_dir_draws_each_machine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(AGENT_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--agentfsm-coverage-dir=drawn")
    result.assert_outcomes(passed=1)
    drawn = (pytester.path / "drawn" / "standard.mmd").read_text()
    assert drawn.startswith("stateDiagram-v2")
    assert "Calling --> InterruptCheck : called x2" in drawn
    assert "Calling --> Error : failed NEVER" in drawn


CASSETTE_TEST = '''
from agentfsm import Agent, AgentState, tool
from agentfsm.providers import ScriptedModel, call_tool, say


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_recorded(cassette):
    real = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    model = cassette(real if REAL else None)
    run = Agent(model, [add]).start(AgentState.of(QUESTION))
    run.run_sync()
    assert run.agent_state.messages[-1].text == "3"
'''


def test_cassette_records_then_replays_then_fails_with_a_diff(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_agent="REAL = True\nQUESTION = '1+2?'\n" + CASSETTE_TEST,
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    saved = pytester.path / "cassettes" / "test_agent" / "test_recorded.json"
    doc = json.loads(saved.read_text())
    assert doc["format"] == "agentfsm-cassette/1" and len(doc["episodes"]) == 2

    pytester.makepyfile(test_agent="REAL = False\nQUESTION = '1+2?'\n" + CASSETTE_TEST)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)

    pytester.makepyfile(test_agent="REAL = False\nQUESTION = '2+2?'\n" + CASSETTE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*request 1 differs from the one recorded in *test_recorded.json*",
            '*-      "content": "1+2?",',
            '*+      "content": "2+2?",',
        ]
    )


def test_cassette_without_recording_or_model_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent="REAL = False\nQUESTION = '1+2?'\n" + CASSETTE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no cassette at *test_recorded.json: pass the real model*"])


def test_the_project_takes_every_path_a_run_can_take(pytester: pytest.Pytester) -> None:
    suite = pathlib.Path(__file__).with_name("test_path_cases.py")
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--agentfsm-coverage=full",
        "--agentfsm-fail-under=100",
        str(suite),
    )
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str()
    for name in (
        "single_call",
        "step",
        "while_needs_response",
        "until_success",
        "until_tool_used",
    ):
        assert re.search(rf"^{name}: \d+ runs; edges (\d+)/\1 \(100%\), paths (\d+)/\2 ", out, re.M)
    for name in ("standard", "compacting"):
        assert re.search(
            rf"^{name}: \d+ runs; edges (\d+)/\1 \(100%\), "
            r"paths \d+/\d+ \(98%; 2 no run can take\)",
            out,
            re.M,
        ), out
    assert out.count("(no run can take it)") == 4


def test_a_saved_run_becomes_a_passing_regression_test(pytester: pytest.Pytester) -> None:
    from agentfsm import AgentState
    from agentfsm.providers import ScriptedModel, call_tool, say
    from agentfsm.testing import cassette_from_traces, regression_test
    from tests.test_cassettes import _agent

    run = _agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")])).start(AgentState.of("1+2?"))
    run.run_sync()
    cassette_from_traces(run.trace, pytester.path / "saved.json")
    text = regression_test(run.trace, "saved.json", agent="tests.test_cassettes:_agent")
    pytester.makepyfile(test_saved=text)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


USER_TEST = """
from agentfsm import Agent
from agentfsm.providers import ScriptedModel, say


async def test_an_agent(agentfsm_store):
    state = await Agent(ScriptedModel([say("Hello.")])).execute("hi")
    assert state.status == "ok"
"""

HEADER = """
def pytest_report_header(config):
    return "loop scope: " + str(config.getini("asyncio_default_fixture_loop_scope"))
"""


def test_a_project_starts_with_no_deprecation_warning(tmp_path: pathlib.Path) -> None:
    """A user's project with pytest-asyncio (``asyncio_mode = "auto"`` and nothing else)
    collects and runs its agent tests with deprecation warnings as errors: the plugin takes
    ``function`` for the loop scope pytest-asyncio warns about; a project's own is kept."""
    (tmp_path / "test_agent.py").write_text(USER_TEST, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(HEADER, encoding="utf-8")
    ini = '[tool.pytest.ini_options]\nasyncio_mode = "auto"\n'
    (tmp_path / "pyproject.toml").write_text(ini, encoding="utf-8")

    def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-W", "error::DeprecationWarning", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning"},
        )

    collected = pytest_run("--collect-only", "-q", "-p", "no:cacheprovider")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    ran = pytest_run("-p", "no:cacheprovider", "-p", "no:randomly")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout and "warning" not in ran.stdout.lower()
    assert "loop scope: function" in ran.stdout
    (tmp_path / "pyproject.toml").write_text(
        ini + 'asyncio_default_fixture_loop_scope = "module"\n', encoding="utf-8"
    )
    own = pytest_run("-p", "no:cacheprovider", "-p", "no:randomly")
    assert own.returncode == 0 and "loop scope: module" in own.stdout, own.stdout
