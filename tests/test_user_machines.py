"""Machines users declare: refused when they are not machines, and full citizens when they are.

The example machine (``examples/compacting.py``: the standard loop with a
``compacting`` state) runs, draws and asserts its path here; a small machine
with states of its own shows what any declared machine gets.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    Edge,
    Failed,
    HumanInTheLoop,
    IllegalTransitionError,
    Interrupted,
    LLMChain,
    MachineDefinitionError,
    MachineTable,
    Message,
    Middleware,
    Ok,
    Paused,
    ResumeError,
    Run,
    Trace,
    UnknownMachineError,
    start_run,
    tool,
)
from agentfsm import _machine as m
from agentfsm._machine import machine_named
from agentfsm.diagrams import _writers as d
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import Continue, PipelineResult
from agentfsm.store import SQLiteStore, checkpoint, load_run
from agentfsm.testing import assert_path, edge_coverage, matches_path

ROOT = Path(__file__).resolve().parent.parent
LOOP = "expanding compacting calling interrupt_check executing propagating until_check deciding"


def _example() -> ModuleType:
    name = "agentfsm_example_compacting"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "compacting.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


example = _example()
COMPACTING: MachineTable = example.COMPACTING


# ---------------------------------------------------------------- the example machine


def test_the_example_machine_runs_summarizes_and_asserts_its_path() -> None:
    agent = example.agent()
    with edge_coverage(COMPACTING) as coverage:
        run = agent.start(AgentState.of("Which city is warmest?"))
        result = run.run_sync()
    assert isinstance(result, Ok)
    assert_path(run, f"({LOOP} ){{6}}ok")
    assert_path(run.trace, f"({LOOP} )+ok")  # the trace alone: its machine is found by name
    assert run.trace.machine == "compacting"
    folded = [t.detail for t in run.trace.where("compacting") if t.detail]
    assert folded == [{"summarized": 3}] * 3
    # The conversation the model last read: the system prompt, one summary, the latest turns.
    requests = [r for r in agent.model.requests if r.messages[0].text != example.SUMMARIZE]
    last = requests[-1].messages
    assert [msg.role for msg in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert last[1].text.startswith(example.SUMMARY_PREFIX)
    kept = [r.text for msg in last[2:] for r in msg.tool_results]
    assert kept == ["Lima: 16 C, clear", "Hanoi: 20 C, clear"]
    assert "Lisbon" in last[1].text  # the first result lives on in the summary
    summaries = [r for r in agent.model.requests if r.messages[0].text == example.SUMMARIZE]
    assert len(summaries) == 3
    assert run.agent_state.messages[-1].text == "Warmest today: Hanoi and Lisbon."
    taken = {(e.source, e.trigger, e.dest) for e in coverage.counts}
    assert ("expanding", "expanded", "compacting") in taken
    assert ("compacting", "compacted", "calling") in taken
    assert coverage.counts[COMPACTING.edge("deciding", "done")] == 1


def test_a_short_history_passes_compacting_untouched() -> None:
    agent = Agent(ScriptedModel([say("hi")]), machine=COMPACTING)
    run = agent.start(AgentState.of("hello"))
    run.run_sync()
    assert_path(run, f"{LOOP} ok")
    assert run.trace.where("compacting")[0].detail is None
    assert agent.model.calls == 1


def test_a_failed_summary_ends_the_run_through_its_edge() -> None:
    def reply(messages: Any) -> Any:
        if messages[0].text == example.SUMMARIZE:
            return example.ChainError("overloaded", "busy")
        return example.call_tool("weather", city="Oslo")

    agent = Agent(ScriptedModel(reply), [example.weather], machine=COMPACTING)
    result = agent.start(AgentState.of("go")).run_sync()
    assert isinstance(result, Failed) and result.error.type == "overloaded"


def test_the_example_diagrams_are_committed_and_current() -> None:
    for name, text in example.drawn(svg=False).items():
        committed = (ROOT / "examples" / "compacting" / name).read_text(encoding="utf-8")
        assert committed == text, (
            f"examples/compacting/{name} is stale; run the example with --diagrams"
        )
    assert (ROOT / "examples" / "compacting" / "machine.svg").is_file()
    mermaid = d.machine_mermaid(COMPACTING)
    assert "Expanding --> Compacting : expanded" in mermaid
    assert "Compacting --> Calling : compacted" in mermaid
    for p in d.paths(COMPACTING):
        assert COMPACTING.is_path(p.states, p.triggers), p.text


def test_the_example_checkpoints_and_resumes_on_its_machine(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    run = start_run(example.agent(), AgentState.of("go"), store, run_id="c1")
    while len(run.trace.where("compacting")) < 5:
        run.step_sync()
    run.request_pause("draining")
    run.run_sync()
    saved = load_run(store, "c1", strict=False)
    assert saved.status == "paused" and saved.trace.machine == "compacting"
    with pytest.raises(ResumeError, match="compacting machine"):
        Agent(ScriptedModel([say("x")]), [example.weather]).resume_run_sync("c1", store)
    state = example.agent().resume_run_sync("c1", store)
    assert state.status == "ok"
    traces = load_run(store, "c1", strict=False).traces
    assert [t.machine for t in traces] == ["compacting", "compacting"]
    for trace in traces:
        assert COMPACTING.is_path(trace.states, trace.triggers)


def test_the_example_machine_is_the_standard_one_with_a_state_inserted() -> None:
    """``insert`` gives what typing the standard table out again with one more state gave."""
    assert COMPACTING.working == (
        "expanding",
        "compacting",
        "calling",
        "interrupt_check",
        "executing",
        "propagating",
        "until_check",
        "deciding",
    )
    assert (COMPACTING.terminals, COMPACTING.entries) == (STANDARD.terminals, STANDARD.entries)
    assert {s: v for s, v in COMPACTING.steps.items() if s != "compacting"} == STANDARD.steps
    assert COMPACTING.details == {**STANDARD.details, "compacting": example._compacted}
    expanded = STANDARD.edge("expanding", "expanded")
    assert expanded is not None
    typed_out = {
        Edge("expanding", "compacting", on=Continue, trigger="expanded", why=expanded.why),
        Edge(
            "compacting",
            "calling",
            on=Continue,
            trigger="compacted",
            why="a long history is summarized; a short one goes on as it is",
        ),
        Edge("compacting", "error", on=Failed, trigger="failed", why="the summary call failed"),
        Edge("compacting", "paused", on=Paused, trigger="paused", why="a step paused with a cause"),
        *(e for e in STANDARD.edges if e is not expanded),
    }
    assert set(COMPACTING.edges) == typed_out and len(COMPACTING.edges) == len(typed_out)


# ---------------------------------------------------------------- a machine of its own


async def _draft(result: PipelineResult, opts: Mapping[str, Any] | None) -> PipelineResult:
    assert isinstance(result, Continue)
    await asyncio.sleep(0)
    chain = result.chain.add_message(Message.assistant(f"draft {len(result.chain.messages)}"))
    return Continue(chain)


def _review(result: PipelineResult, opts: Mapping[str, Any] | None) -> PipelineResult:
    assert isinstance(result, Continue)
    drafts = sum(msg.role == "assistant" for msg in result.chain.messages)
    if drafts >= (opts or {}).get("drafts", 2):
        return Ok(result.chain)
    return result


def _edges_out(state: str) -> list[Edge]:
    return [
        Edge(state, "stopped", on=Paused, trigger="paused", why="a pause was asked for"),
        Edge(state, "broken", on=Failed, trigger="failed", why="a step failed"),
    ]


def _table(name: str = "refused", **changes: Any) -> MachineTable:
    fields: dict[str, Any] = {
        "name": name,
        "steps": {"drafting": (_draft,), "reviewing": (_review,)},
        "terminals": ("accepted", "stopped", "broken"),
        "entries": {"new": "drafting"},
        "edges": (
            Edge("drafting", "reviewing", on=Continue, trigger="drafted", why="a draft is written"),
            Edge("reviewing", "accepted", on=Ok, trigger="accepted", why="enough drafts"),
            Edge(
                "reviewing", "drafting", on=Continue, trigger="again", why="another draft is needed"
            ),
            *_edges_out("drafting"),
            *_edges_out("reviewing"),
        ),
    }
    fields.update(changes)
    return MachineTable(**fields)


EDITOR = _table("editor")


def _chain() -> LLMChain:
    return LLMChain(ScriptedModel([])).add_message(Message.user("write"))


def test_a_machine_of_its_own_runs_steps_traces_and_draws() -> None:
    run = Run(EDITOR, _chain(), "drafting", {"drafts": 3})
    first = run.step_sync()
    assert (first.source, first.trigger, first.dest) == ("drafting", "drafted", "reviewing")
    result = run.run_sync()
    assert isinstance(result, Ok)
    assert_path(run, "(drafting reviewing)+ accepted")
    assert matches_path(
        run.trace, "drafting reviewing drafting reviewing drafting reviewing accepted"
    )
    assert run.trace.triggers[-1] == "accepted"
    assert "Drafting --> Reviewing : drafted" in d.machine_mermaid(EDITOR)
    assert d.machine_dot(EDITOR).startswith('digraph "editor" {')
    assert "Reviewing x3" in d.run_mermaid(run.trace, EDITOR)
    assert {p.terminal for p in d.paths(EDITOR)} == {"accepted", "stopped", "broken"}


def test_a_machine_of_its_own_checkpoints_and_is_restored_by_name(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", lease=0)  # the abandoned run stands for a dead one
    run = Run(EDITOR, _chain(), "drafting", {"drafts": 2})
    checkpoint(run, store, run_id="e1")
    run.step_sync()
    saved = load_run(store, "e1")
    table = machine_named(saved.trace.machine)
    assert table is EDITOR
    restored = Run(table, saved.chain, saved.state, {"drafts": 2})
    restored.trace = saved.trace
    checkpoint(restored, store, saved=saved)
    assert isinstance(restored.run_sync(), Ok)
    loaded = load_run(store, "e1").trace
    assert loaded.path == "drafting reviewing drafting reviewing accepted"
    # each step's chain reads back as the run carried it, across the resume too
    assert [list(t.chain.messages) for t in loaded] == [
        list(t.chain.messages) for t in restored.trace
    ]
    assert [t.chain.custom_context for t in loaded] == [
        t.chain.custom_context for t in restored.trace
    ]


def test_a_run_saved_on_a_machine_not_declared_here_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    run = start_run(example.agent(), AgentState.of("go"), store, run_id="gone")
    run.request_pause("draining")
    run.run_sync()
    monkeypatch.delitem(m._DECLARED, "compacting")
    with pytest.raises(UnknownMachineError, match="No machine named 'compacting'"):
        example.agent().resume_run_sync("gone", store)
    with pytest.raises(UnknownMachineError, match="declared:"):
        assert_path(Trace("drafting", machine="nowhere"), "drafting")


def test_steps_that_break_the_protocol_end_the_run_in_error() -> None:
    def nothing(result: PipelineResult, opts: Any) -> Any:
        return None

    run = Run(EDITOR, _chain(), "drafting", extra_steps={"drafting": [nothing]})
    result = run.run_sync()
    assert isinstance(result, Failed) and result.error.type == "step_error"
    assert "returned NoneType, not a pipeline result" in result.error.message
    assert_path(run, "drafting broken")


def test_a_result_with_no_edge_is_an_illegal_transition() -> None:
    def interrupt(result: PipelineResult, opts: Any) -> PipelineResult:
        return Interrupted(result.chain, {})

    run = Run(EDITOR, _chain(), "drafting", extra_steps={"drafting": [interrupt]})
    with pytest.raises(IllegalTransitionError, match="drafting"):
        run.step_sync()


def test_a_run_starts_in_a_working_state() -> None:
    with pytest.raises(ValueError, match="not 'accepted'"):
        Run(EDITOR, _chain(), "accepted")
    with pytest.raises(ValueError, match="unknown state"):
        Run(EDITOR, _chain(), "drafting", extra_steps={"nowhere": [_review]})


# ---------------------------------------------------------------- tables that are not machines


def _refused(match: str, **changes: Any) -> None:
    changes.setdefault("name", "refused")
    with pytest.raises(MachineDefinitionError, match=match):
        _table(**changes)


def test_an_unreachable_state_is_refused() -> None:
    steps = {"drafting": (_draft,), "reviewing": (_review,), "lost": (_review,)}
    edges = (
        *EDITOR.edges,
        Edge("lost", "accepted", on=Ok, trigger="gone", why="never"),
        *_edges_out("lost"),
    )
    _refused("state 'lost' is unreachable", steps=steps, edges=edges)


def test_a_state_with_no_way_out_is_refused() -> None:
    edges = [e for e in EDITOR.edges if e.source != "reviewing"]
    _refused("state 'reviewing' has no way out", edges=edges)


def test_a_working_state_with_no_path_to_a_terminal_is_refused() -> None:
    steps = {**EDITOR.steps, "looping": (_review,)}
    edges = (
        *EDITOR.edges,
        Edge("reviewing", "looping", on=Interrupted, trigger="detour", why="a detour"),
        Edge("looping", "looping", on=Continue, trigger="round", why="round and round"),
    )
    _refused("state 'looping' has no path to a terminal", steps=steps, edges=edges)


def test_a_duplicate_trigger_is_refused() -> None:
    twice = Edge("drafting", "accepted", on=Ok, trigger="drafted", why="a second meaning")
    _refused("state 'drafting' has the trigger 'drafted' twice", edges=(*EDITOR.edges, twice))
    same_result = Edge(
        "drafting", "accepted", on=Continue, trigger="also", why="a second edge on Continue"
    )
    _refused("ends the run on Continue", edges=(*EDITOR.edges, same_result))
    same_result = Edge(
        "drafting", "drafting", on=Continue, trigger="also", why="a second edge on Continue"
    )
    _refused("state 'drafting' has two edges on Continue", edges=(*EDITOR.edges, same_result))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"name": "Editor!"}, "snake_case"),
        ({"steps": {}}, "no working state"),
        ({"terminals": ()}, "no terminal"),
        ({"entries": {}}, "no entry"),
        ({"entries": {"new": "accepted"}}, "entry 'new' leads to 'accepted'"),
        (
            {"terminals": ("accepted", "stopped", "broken", "drafting")},
            "'drafting' is declared twice",
        ),
        ({"steps": {"drafting": (_draft, "x"), "reviewing": (_review,)}}, "not callable"),
        ({"details": {"accepted": len}}, "details"),
        ({"steps": {"drafting": _draft, "reviewing": (_review,)}}, "a sequence of steps"),
        ({"edges": (*EDITOR.edges, ("drafting", "x"))}, "is not an Edge"),
    ],
)
def test_tables_with_bad_parts_are_refused(changes: dict[str, Any], match: str) -> None:
    _refused(match, **changes)


@pytest.mark.parametrize(
    ("edge", "match"),
    [
        (
            Edge("accepted", "drafting", on=Continue, trigger="more", why="a terminal goes on"),
            "terminal 'accepted'",
        ),
        (
            Edge("drafting", "nowhere", on=Interrupted, trigger="jump", why="off the map"),
            "'nowhere'",
        ),
        (
            Edge("drafting", "broken", on=Interrupted, trigger="Bad Name", why="bad trigger"),
            "snake_case",
        ),
        (
            Edge("drafting", "broken", on=str, trigger="odd", why="not a result"),
            "not a pipeline result",
        ),
        (Edge("drafting", "broken", on=Interrupted, trigger="mute", why=""), "one-line why"),
    ],
)
def test_bad_edges_are_refused(edge: Edge, match: str) -> None:
    _refused(match, edges=(*EDITOR.edges, edge))


def test_every_working_state_can_pause_and_fail() -> None:
    edges = [e for e in EDITOR.edges if not (e.source == "reviewing" and e.on is Paused)]
    _refused("state 'reviewing' has no edge on Paused", edges=edges)


def test_a_name_belongs_to_one_machine() -> None:
    first = _table("editor_twin")
    again = _table("editor_twin")  # the same machine again (a module reloaded) replaces it
    assert machine_named("editor_twin") is again is not first
    with pytest.raises(MachineDefinitionError, match="Another machine named 'standard'"):
        _table("standard")
    assert machine_named("standard") is STANDARD
    with pytest.raises(UnknownMachineError):
        machine_named("no_such_machine")


def test_a_states_steps_run_in_order_sync_or_async_until_one_ends_it() -> None:
    seen: list[str] = []

    def note(name: str, end: bool = False) -> Any:
        def step(result: PipelineResult, opts: Any) -> PipelineResult:
            seen.append(name)
            return Ok(result.chain) if end else result

        return step

    async def later(result: PipelineResult, opts: Any) -> PipelineResult:
        seen.append("async")
        return result

    def hands_back_a_coroutine(result: PipelineResult, opts: Any) -> Any:
        return later(result, opts)

    steps = [note("a"), later, note("b"), hands_back_a_coroutine, note("c", end=True), note("d")]
    run = Run(EDITOR, _chain(), "reviewing", extra_steps={"reviewing": steps})
    assert isinstance(run.run_sync(), Ok)
    assert seen == ["a", "async", "b", "async", "c"]
    assert_path(run, "reviewing accepted")


def test_the_docs_machine_runs_as_written() -> None:
    page = (ROOT / "docs" / "machines.md").read_text(encoding="utf-8")
    heading = "## A machine that insists on a source"
    (code,) = re.findall(rf"{heading}\n.*?```python\n(.*?)```", page, re.S)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "answering checking answering checking ok"


def test_the_standard_triggers_come_from_its_edges() -> None:
    assert STANDARD.triggers["calling"] == {Continue: "called", Failed: "failed", Paused: "paused"}
    assert STANDARD.triggers["until_check"] == {
        Continue: "unsatisfied",
        Ok: "satisfied",
        Paused: "paused",
        Failed: "failed",
    }
    assert STANDARD.triggers["propagating"][Interrupted] == "interrupted"
    assert Interrupted not in STANDARD.triggers["deciding"]


# ---------------------------------------------------------------- approval gates


@tool
def launch(target: str) -> str:
    """Launch at a target."""
    return f"launched at {target}"


@tool
def abort(target: str) -> str:
    """Abort a launch (never called here)."""
    return f"aborted at {target}"


def _gated_agent(*middleware: Any) -> Agent:
    model = ScriptedModel([call_tool("launch", target="moon", call_id="l1"), say("done")])
    return Agent(model, [launch, abort], middleware=list(middleware))


class _TwoKeys:
    """A gate of its own, no HumanInTheLoop: launches wait for a second key."""

    def __init__(self) -> None:
        self.asked = 0

    def approval_gate(self, result: PipelineResult, opts: Any) -> PipelineResult:
        self.asked += 1
        calls = [c.name for c in result.chain.last_message.tool_calls]  # type: ignore[union-attr]
        if "launch" in calls:
            return Interrupted(result.chain, {"type": "two_keys", "calls": calls})
        return result


def test_any_middleware_can_gate_tool_calls() -> None:
    keys = _TwoKeys()
    hitl = HumanInTheLoop({"launch": True})
    run = _gated_agent(Middleware(), keys, hitl).start(AgentState.of("go"))
    result = run.run_sync()
    assert isinstance(result, Interrupted)
    assert result.data == {"type": "two_keys", "calls": ["launch"]}  # the first gate wins
    assert_path(run, "expanding calling interrupt_check interrupted")
    assert keys.asked == 1
    run = _gated_agent(hitl, keys).start(AgentState.of("go"))
    result = run.run_sync()
    assert isinstance(result, Interrupted) and result.data["type"] == "hitl"
    assert keys.asked == 1  # a gate that ended the batch asks no other


def test_a_gate_that_lets_the_calls_run_leaves_the_run_as_it_was() -> None:
    # The gate guards a tool of the agent's that this run never calls.
    run = _gated_agent(Middleware(), HumanInTheLoop({"abort": True})).start(AgentState.of("go"))
    assert isinstance(run.run_sync(), Ok)
    assert_path(
        run,
        "expanding calling interrupt_check executing (propagating until_check)"
        " deciding expanding calling interrupt_check executing propagating until_check"
        " deciding ok",
    )
