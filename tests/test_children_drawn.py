"""Machines inside machines, drawn: a child machine as a composite state of its parent's
state (Mermaid and DOT, nested), the pages that say which states run which machines,
and a run's child runs on the run drawings and in its trace table."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from agentfsm import STANDARD, Edge, MachineDefinitionError, MachineTable, Ok, Trace, Transition
from agentfsm.diagrams import _writers as d
from agentfsm.diagrams import diagram_files
from agentfsm.steps import Step
from tests._children import FETCH, RESEARCH, TEAM, RunsMachine, _chain, team_run

_DOT = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")


def _block(text: str, opener: str) -> str:
    """The lines of the ``{ ... }`` block that ``opener`` opens (braces counted)."""
    start = text.index(opener)
    depth, end = 0, start
    for end in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0 and text[end] == "}":
            break
    return text[start : end + 1]


def _mermaid_ids(text: str) -> list[str]:
    return re.findall(r'^\s*state "[^"]*" as (\S+)$', text, flags=re.M)


def test_a_child_machine_is_a_composite_state_of_its_parents_state() -> None:
    text = d.machine_mermaid(TEAM)
    team = _block(text, "state Researching {")
    # The child's own states, entry and edges, inside the parent's state, prefixed.
    assert "%% researching runs the test_research machine" in team
    assert 'state "Searching" as Researching_TestResearch_Searching' in team
    assert "[*] --> Researching_TestResearch_Searching : fresh" in team
    assert "Researching_TestResearch_Searching --> Researching_TestResearch_Reading : found" in team
    assert "Researching_TestResearch_Ok --> [*]" in team
    # Two levels: fetch inside research's searching, inside team's researching.
    fetch = _block(team, "state Researching_TestResearch_Searching {")
    assert "Researching_TestResearch_Searching_TestFetch_Getting --> " in fetch
    # Every drawn state has an id of its own: ok, paused and error three times over.
    ids = _mermaid_ids(text)
    assert len(ids) == len(set(ids)) == len(RESEARCH.states) + len(FETCH.states)
    assert not set(ids) & {s.capitalize() for s in TEAM.states}
    # The child's terminals are drawn as terminals too.
    assert text.rstrip().endswith("Researching_TestResearch_Searching_TestFetch_Error terminal")


def test_a_machine_without_children_draws_as_before() -> None:
    for table in (FETCH, STANDARD):
        assert not re.search(r" \{$", d.machine_mermaid(table), flags=re.M)
        assert "subgraph" not in d.machine_dot(table)
    assert "Child machines" not in d.machine_markdown(STANDARD) + d.paths_markdown(STANDARD)
    assert set(diagram_files(FETCH, svg=False)) == {
        "machine.mmd",
        "machine.md",
        "machine.dot",
        "overview.dot",
        "paths.md",
    }


def test_dot_draws_a_child_machine_as_a_cluster_inside_its_parents() -> None:
    text = d.machine_dot(TEAM)
    outer = _block(text, 'subgraph "cluster_Researching" {')
    assert 'label="researching runs test_research"' in outer
    assert '\n        "researching";' in outer  # the parent's own state is in its cluster
    inner = _block(outer, 'subgraph "cluster_Researching_TestResearch" {')
    assert '"Researching_TestResearch_Searching" [label="Searching"];' in inner
    assert (
        '"Researching_TestResearch_Searching" -> "Researching_TestResearch_Reading" '
        '[label="found"];' in inner
    )
    assert 'subgraph "cluster_Researching_TestResearch_Searching_TestFetch" {' in inner


@_DOT
@pytest.mark.parametrize("draw", ["machine", "run"])
def test_graphviz_renders_the_nested_drawings(draw: str) -> None:
    source = d.machine_dot(TEAM) if draw == "machine" else d.run_dot(team_run(), TEAM)
    done = subprocess.run(["dot", "-Tsvg"], input=source, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    svg = done.stdout
    # One cluster per composite and per child machine, each child state drawn once.
    assert svg.count('class="cluster"') == 4
    assert svg.count(">Getting<") == 1 and svg.count(">Searching<") == 1


def test_the_run_drawings_count_the_child_runs_inside_the_composite() -> None:
    run = team_run()
    text = d.run_mermaid(run, TEAM)
    team = _block(text, "state Researching {")
    assert 'state "Searching x1" as Researching_TestResearch_Searching' in team
    assert 'state "Paused" as Researching_TestResearch_Paused' in team
    assert ": found x1" in team and ": fresh x1" in team
    assert ": got x1" in _block(team, "state Researching_TestResearch_Searching {")
    # Child states are classed like the parent's: visited, idle, ended by outcome.
    assert re.search(r"class .*Researching_TestResearch_Reading.* visited", text)
    assert re.search(r"class .*Researching_TestResearch_Paused.* idle", text)
    assert "class Researching_TestResearch_Ok, " in text and " ended_ok" in text
    assert text.count("classDef ended_ok") == 1

    dot = d.run_dot(run, TEAM)
    cluster = _block(dot, 'subgraph "cluster_Researching_TestResearch" {')
    assert 'label="found x1"' in cluster and 'label="got x1"' in cluster
    assert '"Researching_TestResearch_Reading" [label=<Reading<BR/>' in cluster


def test_a_run_without_children_draws_as_before() -> None:
    run = Trace("getting", [Transition("getting", "got", "ok", _chain(), 0.001)], machine="x")
    assert "state Getting {" not in d.run_mermaid(run, FETCH)
    assert "cluster_" not in d.run_dot(run, FETCH)
    assert "ran:" not in d.trace_markdown(run)


def test_a_child_run_of_a_machine_not_declared_as_a_child_is_drawn_by_its_name() -> None:
    # A subagent's run: the step does not declare it, its trace names its machine.
    run = team_run()
    sub = Trace("getting", [Transition("getting", "got", "ok", _chain(), 0.0)], machine=FETCH.name)
    unknown = Trace("x", [Transition("x", "y", "z", _chain(), 0.0)], machine="no_such_machine")
    run.transitions[0].with_children([sub, unknown])
    text = d.run_mermaid(run, TEAM)
    planning = _block(text, "state Planning {")
    assert 'state "Getting x1" as Planning_TestFetch_Getting' in planning
    assert "no_such_machine" not in text and "NoSuchMachine" not in text


def test_a_subagent_on_the_parents_own_machine_is_drawn_for_its_run() -> None:
    chain = _chain()
    edges = [("expanding", "expanded", "calling"), ("calling", "called", "interrupt_check")]
    edges += [("interrupt_check", "clear", "executing"), ("executing", "executed", "propagating")]
    sub = Trace("calling", [Transition("calling", "failed", "error", chain)])
    # A standard-machine subagent ran by a tool of a standard-machine run.
    run = Trace("expanding", [Transition(a, t, b, chain) for a, t, b in edges])
    run.transitions[3].with_children([sub])
    assert sub.machine == run.machine == STANDARD.name
    text = d.run_mermaid(run, STANDARD)
    inside = _block(text, "state Executing {")
    assert 'state "Calling x1" as Executing_Standard_Calling' in inside
    assert "Executing_Standard_Calling --> Executing_Standard_Error : failed x1" in inside
    assert "state Executing_Standard_Executing {" not in inside  # its own runs only
    assert "cluster_Executing_Standard" in d.run_dot(run, STANDARD)
    assert "state Executing {" not in d.machine_mermaid(STANDARD)


def test_the_pages_say_which_states_run_which_machines() -> None:
    page = d.machine_markdown(TEAM)
    assert "## Child machines" in page
    assert (
        "| `researching` | [`test_research`](test_research/machine.md) | `searching`, "
        "`reading` | `ok`, `paused`, `error` |" in page
    )
    assert "state Researching {" in page  # the mermaid block draws it
    paths = d.paths_markdown(TEAM)
    assert "- `researching` runs the `test_research` machine as its work: 5 paths" in paths
    files = diagram_files(TEAM, svg=False)
    assert files["test_research/machine.md"] == d.machine_markdown(RESEARCH)
    assert files["test_research/test_fetch/paths.md"] == d.paths_markdown(FETCH)


def test_the_trace_table_lists_each_steps_child_runs_under_it() -> None:
    text = d.trace_markdown(team_run())
    listing = text[text.index("Step 2 (`researching` --`researched`--> `writing`) ran:") :]
    assert listing.splitlines()[2:7] == [
        "- the `test_research` machine: entered at `searching`; path "
        "`searching reading ok`; ended `ok`",
        "    - `searching` --`found`--> `reading` (2.0 ms)",
        "        - the `test_fetch` machine: entered at `getting`; path `getting ok`; ended `ok`",
        "            - `getting` --`got`--> `ok` (1.0 ms)",
        "    - `reading` --`read`--> `ok` (1.0 ms)",
    ]
    assert "ran:" in d.run_markdown(team_run(), TEAM)


def test_a_state_running_one_machine_twice_draws_it_once() -> None:
    twice = MachineTable(
        name="test_twice",
        steps={"working": (RunsMachine(FETCH), RunsMachine(FETCH))},
        terminals=("ok", "paused", "error"),
        entries={"fresh": "working"},
        edges=(Edge("working", "ok", on=Ok, trigger="done", why="both fetched"),),
    )
    assert d.machine_mermaid(twice).count("state Working {") == 1
    assert d.machine_mermaid(twice).count("as Working_TestFetch_Getting") == 1


# ---------------------------------------------------------------- declaring


def _one_state(name: str, *steps: Step, version: int = 1) -> MachineTable:
    return MachineTable(
        name=name,
        steps={"working": steps or (RunsMachine(FETCH),)},
        terminals=("ok", "paused", "error"),
        entries={"fresh": "working"},
        edges=(Edge("working", "ok", on=Ok, trigger="done", why="the work is done"),),
        version=version,
    )


def test_a_machine_that_contains_itself_is_refused_naming_the_cycle() -> None:
    first = _one_state("test_loop")
    with pytest.raises(MachineDefinitionError) as refused:
        _one_state("test_loop", RunsMachine(first), version=2)
    assert str(refused.value) == (
        "The test_loop machine: it contains itself: test_loop (working) -> test_loop; a "
        "machine cannot run a machine of its own name as a child, however deep."
    )


def test_a_cycle_through_other_machines_is_refused_naming_each_of_them() -> None:
    first = _one_state("test_outer")
    middle = _one_state("test_middle", RunsMachine(_one_state("test_inner", RunsMachine(first))))
    with pytest.raises(
        MachineDefinitionError,
        match=re.escape(
            "it contains itself: test_outer (working) -> test_middle (working) -> "
            "test_inner (working) -> test_outer;"
        ),
    ):
        _one_state("test_outer", RunsMachine(middle), version=2)


def test_a_machine_may_run_one_child_from_several_places() -> None:
    # The same child twice, at two depths, is no cycle.
    both = _one_state("test_both", RunsMachine(FETCH), RunsMachine(RESEARCH))
    assert {c.name for c in both.children["working"]} == {"test_fetch", "test_research"}
    assert TEAM.children == {"researching": (RESEARCH,)}
