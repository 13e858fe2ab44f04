"""Static checks: every built-in machine proves its properties; broken ones show a path."""

from __future__ import annotations

import pytest

from agentfsm import STANDARD, Agent, SubAgent, effects, tool
from agentfsm._checks import MachineProblem
from agentfsm._cli._main import main
from agentfsm._effects import effects_of
from agentfsm._modes.langchain import LANGCHAIN_MACHINES
from agentfsm.providers import ScriptedModel
from agentfsm.steps import (
    Continue,
    PipelineResult,
    call_llm,
    execute_tools,
    state_effects,
)
from agentfsm.testing import check_machine
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
    with pytest.raises(ValueError) as info:
        effects("tool", "network", "model")  # type: ignore[arg-type]
    assert str(info.value) == (
        "unknown effect(s) 'network', 'tool' (did you mean 'tools'?); "
        "effects: ['approval', 'bound', 'model', 'tools']"
    )


def test_the_cli_checks_a_module_attribute(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "agentfsm._modes.langchain:LANGCHAIN_MACHINES"]) == 0
    out = capsys.readouterr().out
    vacuous = (
        ": ok (bounded, checkpointed; approval holds vacuously: the machine has no approval "
        "state) over every path"
    )
    assert out.count(vacuous) == len(LANGCHAIN_MACHINES)
    assert "ok (approval" not in out  # no machine there has a gate to prove anything of
    assert main(["check", "agentfsm:STANDARD"]) == 0
    assert capsys.readouterr().out == (
        "standard: ok (approval (gate: interrupt_check), bounded, checkpointed) over every path\n"
    )
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


@tool(effects=("model",))
def summarise(text: str) -> str:
    """Asks a model for a summary (declared: its calls call a model)."""
    return text[:10]


WRITER = Agent(ScriptedModel([]), [summarise])
LEAD = Agent(ScriptedModel([]), [SubAgent("writer", "Writes notes", WRITER)])
#: ``executing`` runs tools in two steps, one after the other.
TWICE = STANDARD.replace("executing", (execute_tools, run_tools), name="check_tools_twice")
LEAD_TWICE = Agent(ScriptedModel([]), [summarise], machine=TWICE)


def test_tools_declare_effects_and_a_subagent_calls_a_model_and_runs_tools() -> None:
    assert summarise.effects == {"model"}
    assert LEAD.tools[0].effects == {"model", "tools"}
    assert tool(lambda: 1).effects == frozenset()
    with pytest.raises(ValueError, match=r"a tool's effects are among \['model', 'tools'\]"):
        tool(effects=("approval",))
    with pytest.raises(ValueError, match="did you mean 'tools'"):
        effects("tool")  # type: ignore[arg-type]


def test_a_subagent_in_a_tools_state_breaks_checkpointed() -> None:
    assert check_machine(STANDARD) == []  # the table alone runs no subagent
    (problem,) = check_machine(STANDARD, tools=LEAD.tools)
    assert problem.rule == "checkpointed"
    assert problem.path == ("interrupt_check", "executing")
    assert problem.message == (
        "'executing' runs the tool(s) writer, which run tools and then call the model inside "
        "this state's work, so those tool results are not saved at a boundary before it"
    )
    assert check_machine(STANDARD, tools=WRITER.tools) == []  # a model call alone is fine


def test_a_tool_that_calls_a_model_after_tools_in_one_state_breaks_checkpointed() -> None:
    assert check_machine(TWICE) == []
    assert state_effects(TWICE)["executing"] == {"tools"}
    (problem,) = check_machine(TWICE, tools=[summarise])
    assert (problem.rule, problem.path) == ("checkpointed", ("interrupt_check", "executing"))
    assert "calls the model after running tools in the same work" in problem.message


def test_the_cli_checks_an_agent_with_its_tools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "tests.test_checks:WRITER"]) == 0
    assert capsys.readouterr().out == (
        "standard: ok (approval (gate: interrupt_check), bounded, checkpointed) over every path\n"
        "  tools with effects, run in executing: summarise: model\n"
    )
    assert main(["check", "tests.test_checks:LEAD"]) == 1
    out = capsys.readouterr().out
    assert "standard: 1 problem(s)\n  checkpointed: 'executing' runs the tool(s) writer" in out
    assert "  tools with effects, run in executing: writer: model, tools\n" in out
