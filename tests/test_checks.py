"""Static checks: every built-in machine proves its properties; broken ones show a path."""

from __future__ import annotations

import pytest

from agentfsm.cli import main
from agentfsm.modes.langchain import LANGCHAIN_MACHINES
from agentfsm.modes.standard import STANDARD
from agentfsm.results import Continue, PipelineResult
from agentfsm.steps import call_llm, execute_tools
from agentfsm.testing import MachineProblem, check_machine, effects, effects_of
from tests.test_path_cases import MACHINES


@effects("tools")
def prefetch(result: PipelineResult, opts: object = None) -> PipelineResult:
    """Runs tools the model asked for, before the approval check."""
    return result


def endless(result: PipelineResult, opts: object = None) -> PipelineResult:
    """Decides to go on, with no bound."""
    return Continue(result.chain) if isinstance(result, Continue) else result


PREFETCHING = STANDARD.insert("prefetching", (prefetch,), after="calling", name="check_prefetch")
ENDLESS = STANDARD.replace("deciding", (endless,), name="check_endless")


@pytest.mark.parametrize("table", MACHINES, ids=lambda t: t.name)
def test_every_built_in_machine_passes(table: object) -> None:
    assert check_machine(table) == []  # type: ignore[arg-type]


def test_tools_before_the_approval_check_are_found() -> None:
    (problem,) = check_machine(PREFETCHING)
    assert problem.rule == "approval"
    assert problem.path == ("expanding", "calling", "prefetching")
    assert "counterexample: expanding -> calling -> prefetching" in str(problem)


def test_a_cycle_without_a_bound_is_found() -> None:
    (problem,) = check_machine(ENDLESS)
    assert isinstance(problem, MachineProblem) and problem.rule == "bounded"
    loop = "calling interrupt_check executing propagating until_check deciding expanding calling"
    assert problem.path == ("expanding", *loop.split())
    assert f"the cycle {loop.replace(' ', ' -> ')} passes no step that bounds it" in problem.message


@effects("tools")
def run_tools(result: PipelineResult, opts: object = None) -> PipelineResult:
    return result


@effects("model")
def ask_again(result: PipelineResult, opts: object = None) -> PipelineResult:
    return result


def test_a_model_call_after_tools_in_one_state_is_found() -> None:
    table = STANDARD.replace("executing", (run_tools, ask_again), name="check_tools_then_model")
    problems = check_machine(table)
    assert [p.rule for p in problems] == ["checkpointed"]
    assert problems[0].path == ("interrupt_check", "executing")  # from "pending tool calls"
    assert "calls the model after running tools" in problems[0].message


def test_effects_are_declared_and_checked() -> None:
    assert effects_of(prefetch) == {"tools"}
    assert effects_of(call_llm) == {"model"} and effects_of(execute_tools) == {"tools"}
    assert effects_of(endless) is None
    with pytest.raises(ValueError, match="unknown effect"):
        effects("network")  # type: ignore[arg-type]


def test_the_cli_checks_a_module_attribute(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "agentfsm.modes.langchain:LANGCHAIN_MACHINES"]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok (approval, bounded, checkpointed)") == len(LANGCHAIN_MACHINES)
    assert main(["check", "tests.test_checks:PREFETCHING"]) == 1
    out = capsys.readouterr().out
    assert "check_prefetch: 1 problem(s)" in out
    assert "counterexample: expanding -> calling -> prefetching" in out
    assert main(["check", "--draw", "tests.test_checks:PREFETCHING"]) == 1
    drawn = capsys.readouterr().out
    assert "Calling --> Prefetching : called ◀ #2" in drawn
    assert "class Prefetching broken" in drawn
    assert main(["check", "tests.test_checks:ENDLESS"]) == 1
    assert "steps with no declared effects (taken as pure): endless" in capsys.readouterr().out
    assert main(["check", "tests.test_checks:prefetch"]) == 2
    assert "not a MachineTable" in capsys.readouterr().err
