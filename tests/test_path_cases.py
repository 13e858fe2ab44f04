"""Every path of every built-in machine, and of the compacting example, taken by a run.

``path_cases(table)`` plans a scenario per path; each test runs one and asserts
the run's trace is exactly that path. A path no run can take is a strict xfail
with its reason, and the list of those is pinned here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import attrs
import pytest

from agentfsm import STANDARD, ChainError, Edge, Failed, MachineTable, Message, Ok, Paused
from agentfsm._modes.langchain import LANGCHAIN_MACHINES, call_model
from agentfsm._paths import Path as MachinePath
from agentfsm.diagrams import paths
from agentfsm.steps import Continue, PipelineResult, check_max_runs
from agentfsm.testing import PathCase, Scenario, assert_took, path_cases

ROOT = Path(__file__).resolve().parent.parent


def _compacting() -> MachineTable:
    name = "agentfsm_example_compacting"  # the name tests/test_user_machines.py loads it as
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "compacting.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    table: MachineTable = sys.modules[name].COMPACTING
    return table


MACHINES: tuple[MachineTable, ...] = (STANDARD, *LANGCHAIN_MACHINES, _compacting())
CASES: dict[str, list[PathCase]] = {t.name: path_cases(t) for t in MACHINES}

#: The paths of the built-in machines that no run can take: entered with a tool call or
#: its results, the chain needs a response, so ``deciding`` loops before any model call.
UNFORCEABLE = {
    "standard": [
        "interrupt_check executing propagating until_check deciding ok",
        "propagating until_check deciding ok",
    ],
    "compacting": [
        "interrupt_check executing propagating until_check deciding ok",
        "propagating until_check deciding ok",
    ],
}


@pytest.mark.parametrize("case", [c.param for t in MACHINES for c in CASES[t.name]])
def test_each_path_is_taken_by_its_scenario(case: PathCase) -> None:
    run = case.run()
    assert_took(run, case.path)
    assert run.trace.machine == case.table.name


def test_every_path_has_a_case() -> None:
    for table in MACHINES:
        assert [c.path for c in CASES[table.name]] == paths(table)


def test_the_unforceable_paths_are_reported_with_why() -> None:
    found = {
        name: [c.path.text for c in cases if c.unforceable is not None]
        for name, cases in CASES.items()
    }
    assert {k: v for k, v in found.items() if v} == UNFORCEABLE
    for cases in CASES.values():
        for case in cases:
            if case.unforceable is not None:
                assert "needs a response" in case.unforceable, case.unforceable


def test_a_scenario_is_repeatable() -> None:
    case = CASES["standard"][5]
    assert case.scenario is not None
    first, second = case.scenario.run(), case.scenario.run()
    assert first.trace.states == second.trace.states == list(case.path.states)


def test_assert_took_names_both_paths() -> None:
    ok, other = CASES["single_call"][0], CASES["single_call"][1]
    with pytest.raises(AssertionError, match="wanted:") as info:
        assert_took(ok.run(), other.path)
    assert "took:" in str(info.value)


def test_a_machine_no_planner_knows_is_reported_not_skipped() -> None:
    def done(result: Continue, opts: object = None) -> Ok:
        return Ok(result.chain)

    table = MachineTable(
        name="testing_unknown_entries",
        steps={"only": (done,)},
        terminals=("ok", "paused", "error"),
        entries={"somewhere": "only"},
        edges=(Edge("only", "ok", on=Ok, trigger="done", why="always"),),
    )
    case = path_cases(table)[0]
    assert case.scenario is None and case.unforceable is not None
    assert "no scenario planner" in case.unforceable
    with pytest.raises(AssertionError, match="cannot be forced"):
        case.run()


def test_scenarios_say_what_they_give() -> None:
    case = next(c for c in CASES["standard"] if c.path.text.endswith("interrupt_check interrupted"))
    scenario: Scenario | None = case.scenario
    assert scenario is not None
    assert [r.tool_calls[0].name for r in scenario.replies if hasattr(r, "tool_calls")] == [
        "guarded"
    ]


def _judge(result: PipelineResult, opts: object = None) -> PipelineResult:
    """Done when the model said yes; ask again otherwise (bounded by max_runs)."""
    if not isinstance(result, Continue):
        return result
    last = result.chain.last_message
    return Ok(result.chain) if last is not None and last.text == "yes" else result


ASKING = MachineTable(
    name="testing_asking",
    steps={"asking": (call_model,), "judging": (_judge, check_max_runs)},
    terminals=("ok", "paused", "error"),
    entries={"fresh": "asking"},
    edges=(
        Edge("asking", "judging", on=Continue, trigger="asked", why="the model answered"),
        Edge("judging", "ok", on=Ok, trigger="agreed", why="the model said yes"),
        Edge("judging", "asking", on=Continue, trigger="again", why="the model said no"),
    ),
)


def _plan_asking(path: MachinePath) -> Scenario | None:
    replies: list[Message | ChainError] = []
    pauses: set[tuple[str, int]] = set()
    faults: set[tuple[str, int]] = set()
    visits: dict[str, int] = {}
    for i, edge in enumerate(path.edges):
        visit = visits[edge.source] = visits.get(edge.source, -1) + 1
        if edge.on is Paused:
            pauses.add((edge.source, visit))
        elif edge.source == "asking" and edge.on is Failed:
            replies.append(ChainError("bad_request", "no", retryable=False))
        elif edge.source == "asking":
            agreed = i + 1 < len(path.edges) and path.edges[i + 1].trigger == "agreed"
            replies.append(Message.assistant("yes" if agreed else "no"))
        elif edge.on is Failed:
            faults.add((edge.source, visit))
    return Scenario(
        table=ASKING,
        entry=path.entry,
        messages=(Message.user("agree?"),),
        replies=tuple(replies),
        pauses=frozenset(pauses),
        faults=frozenset(faults),
    )


def test_a_plan_of_your_own_forces_the_paths_of_your_machine() -> None:
    cases = path_cases(ASKING, plan=_plan_asking)
    assert len(cases) == len(paths(ASKING)) > 6
    assert [c.id for c in cases if c.unforceable] == []
    for case in cases:
        case.check()
    none = path_cases(ASKING, plan=lambda path: None)
    assert {c.unforceable for c in none} == {"the plan gives no scenario for it"}


def test_a_plan_whose_scenario_raises_is_an_error_naming_its_path() -> None:
    """Not a strict xfail: a suite of cases that all raise would go green testing nothing."""

    def broken(path: MachinePath) -> Scenario:
        planned = _plan_asking(path)
        assert planned is not None
        return attrs.evolve(planned, entry="no such situation")

    with pytest.raises(ValueError, match=r"^The plan's scenario for the path '[a-z_ ]+' raised "):
        path_cases(ASKING, plan=broken)
