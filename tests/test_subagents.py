"""Machines inside machines: run_machine steps and SubAgent tools run child runs whose
traces nest under the parent's transition, whose usage sums into the parent's, and whose
terminal picks the parent's way on."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    ChainError,
    Edge,
    Failed,
    HumanInTheLoop,
    Interrupted,
    LLMChain,
    MachineTable,
    Message,
    Ok,
    Paused,
    ResumeError,
    Run,
    SubAgent,
    Trace,
    run_machine,
    start_run,
    tool,
)
from agentfsm._middleware import request_digest
from agentfsm._subagents import MAX_DEPTH
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say
from agentfsm.steps import Continue, PipelineResult, call_llm
from agentfsm.store import Checkpointer, SQLiteStore, load_run
from agentfsm.testing import assert_path


def _with_usage(reply: Message, tokens: int) -> Message:
    usage = {"input_tokens": tokens, "output_tokens": 0}
    return attrs.evolve(reply, metadata={**reply.metadata, "usage": usage})


# ---------------------------------------------------------------- a child machine by a step


def _note(text: str) -> Any:
    def step(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
        assert isinstance(result, Continue)
        return Continue(result.chain.add_message(Message.assistant(text)))

    step.__qualname__ = f"note_{text}"
    return step


def _decide(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """Ends the child as the parent's chain asks: ``custom_context["child_ends"]``."""
    assert isinstance(result, Continue)
    chain = result.chain
    match chain.custom_context.get("child_ends", "ok"):
        case "interrupted":
            return Interrupted(chain, {"type": "question", "question": "Which one?"})
        case "paused":
            return Paused(chain, "waiting for a file")
        case "failed":
            return Failed(chain, ChainError("bad_draft", "the draft does not parse"))
    return Ok(chain)


CHILD = MachineTable(
    name="drafting_child",
    steps={"drafting": (_note("draft"),), "checking": (_decide,)},
    terminals=("ok", "paused", "interrupted", "error"),
    entries={"fresh": "drafting"},
    edges=(
        Edge("drafting", "checking", on=Continue, trigger="drafted", why="a draft is written"),
        Edge("checking", "ok", on=Ok, trigger="passed", why="the draft passes"),
        Edge("checking", "interrupted", on=Interrupted, trigger="asked", why="a question"),
    ),
)


def _finish(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    return Ok(result.chain) if isinstance(result, Continue) else result


PARENT = MachineTable(
    name="delegating_parent",
    steps={
        "preparing": (_note("plan"),),
        "delegating": (run_machine(CHILD, name="drafter"),),
        "finishing": (_note("done"), _finish),
    },
    terminals=("ok", "paused", "interrupted", "error"),
    entries={"fresh": "preparing"},
    edges=(
        Edge("preparing", "delegating", on=Continue, trigger="prepared", why="a plan"),
        Edge("delegating", "finishing", on=Continue, trigger="delegated", why="the child ended ok"),
        Edge("delegating", "interrupted", on=Interrupted, trigger="asked", why="the child asks"),
        Edge("finishing", "ok", on=Ok, trigger="finished", why="all done"),
    ),
)


def _chain(ends: str = "ok") -> LLMChain:
    return LLMChain(
        ScriptedModel([]), messages=(Message.user("go"),), custom_context={"child_ends": ends}
    )


def test_the_table_names_its_child_machine() -> None:
    assert PARENT.children == {"delegating": (CHILD,)}


async def test_an_ok_child_continues_the_parent_and_nests_under_its_transition() -> None:
    run = Run(PARENT, _chain(), "preparing")
    result = await run.run()
    assert isinstance(result, Ok)
    assert_path(run, "preparing delegating finishing ok")
    delegated = run.trace.where("delegating")[0]
    (child,) = delegated.children
    assert child.machine == "drafting_child"
    assert_path(child, "drafting checking ok")
    assert [t.children for t in run.trace if t is not delegated] == [()] * 2
    assert [m.text for m in result.chain.messages] == ["go", "plan", "draft", "done"]


async def test_a_child_request_interrupts_the_parent_naming_the_child() -> None:
    run = Run(PARENT, _chain("interrupted"), "preparing")
    result = await run.run()
    assert isinstance(result, Interrupted)
    assert_path(run, "preparing delegating interrupted")
    assert result.data == {"type": "question", "question": "Which one?", "child_path": ["drafter"]}
    assert_path(run.trace.transitions[-1].children[0], "drafting checking interrupted")


async def test_a_paused_child_pauses_the_parent_with_its_reason() -> None:
    run = Run(PARENT, _chain("paused"), "preparing")
    assert isinstance(await run.run(), Paused)
    assert_path(run, "preparing delegating paused")
    assert run.pause_reason == "waiting for a file"


async def test_a_failed_child_fails_the_parent_with_an_error_naming_it() -> None:
    run = Run(PARENT, _chain("failed"), "preparing")
    result = await run.run()
    assert isinstance(result, Failed)
    assert_path(run, "preparing delegating error")
    error = result.error
    assert error.type == "bad_draft"
    assert "'drafter' (drafting_child) failed in 'checking'" in error.message
    assert error.details == {"child": "drafter", "child_state": "checking"}


async def test_a_standard_child_counts_its_tokens_and_calls_in_the_parent() -> None:
    model = ScriptedModel([_with_usage(say("child answer"), 30)])
    parent = STANDARD.insert(
        "consulting",
        (run_machine(STANDARD, name="consultant"),),
        after="until_check",
        name="consulting_standard",
    )
    run = Run(parent, LLMChain(model, messages=(Message.user("hi"),)), "expanding")
    model.script = [_with_usage(say("parent answer"), 10), _with_usage(say("child"), 30)]
    result = await run.run()
    assert isinstance(result, Ok)
    consulted = run.trace.where("consulting")[0]
    assert consulted.usage is None  # the step's own: it called no model
    assert run.trace.usage.input_tokens == 40  # the child's tokens count in the parent's
    assert result.chain.custom_context["mode_state"]["run_count"] == 2
    assert_path(
        consulted.children[0],
        "expanding calling interrupt_check executing propagating until_check deciding ok",
    )


async def test_a_child_that_ends_on_its_model_call_counts_that_call_in_the_parent() -> None:
    """The parent counts a child's model calls as the child's chain stands at its end,
    when the call is the child's last transition too (here its only one), and keeps the
    other keys of its ``mode_state``."""
    asking = MachineTable(
        name="asking_child",
        steps={"asking": (call_llm, _finish)},
        terminals=("ok", "paused", "error"),
        entries={"fresh": "asking"},
        edges=(Edge("asking", "ok", on=Ok, trigger="answered", why="one model call"),),
    )
    parent = MachineTable(
        name="asking_parent",
        steps={"delegating": (run_machine(asking, name="asker"),), "finishing": (_finish,)},
        terminals=("ok", "paused", "error"),
        entries={"fresh": "delegating"},
        edges=(
            Edge("delegating", "finishing", on=Continue, trigger="delegated", why="it answered"),
            Edge("finishing", "ok", on=Ok, trigger="finished", why="all done"),
        ),
    )
    model = ScriptedModel([say("the answer")])
    counters = {"mode_state": {"run_count": 0, "turn": "kept"}}  # a mode's own key besides
    chain = LLMChain(model, messages=(Message.user("go"),), custom_context=counters)
    run = Run(parent, chain, "delegating")
    result = await run.run()
    assert isinstance(result, Ok)
    assert_path(run, "delegating finishing ok")
    assert_path(run.trace.where("delegating")[0].children[0], "asking ok")
    assert [m.text for m in result.chain.messages] == ["go", "the answer"]
    assert result.chain.custom_context["mode_state"] == {"run_count": 1, "turn": "kept"}


def test_run_machine_refuses_what_is_not_a_machine() -> None:
    with pytest.raises(TypeError, match="runs a MachineTable"):
        run_machine("standard")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no working state 'ok'"):
        run_machine(CHILD, entry="ok")


# ---------------------------------------------------------------- subagents


@tool
def look_up(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


published: list[str] = []


@tool
def publish(text: str) -> str:
    """Publish a text."""
    published.append(text)
    return f"published {text!r}"


def _agents(delay: float = 0.0) -> tuple[Agent, Agent, Agent]:
    researcher = Agent(
        ScriptedModel([call_tool("look_up", topic="bees"), say("Bees dance.")], delay=delay),
        [look_up],
    )
    writer = Agent(
        ScriptedModel([call_tool("publish", text="Bees dance."), say("Published.")], delay=delay),
        [publish],
        middleware=[HumanInTheLoop({"publish": True})],
    )
    coordinator = Agent(
        ScriptedModel(
            [
                call_tools(
                    ("researcher", {"task": "Find out about bees"}),
                    ("writer", {"task": "Publish: Bees dance."}),
                ),
                say("Researched and published."),
            ]
        ),
        [
            SubAgent("researcher", "Finds things out", researcher),
            SubAgent("writer", "Publishes texts", writer),
        ],
    )
    return coordinator, researcher, writer


async def test_a_subagent_answers_its_task_and_nests_under_executing() -> None:
    researcher = Agent(
        ScriptedModel([call_tool("look_up", topic="bees"), say("Bees dance.")]), [look_up]
    )
    model = ScriptedModel([call_tool("researcher", task="Find out about bees"), say("Done.")])
    coordinator = Agent(model, [SubAgent("researcher", "Finds things out", researcher)])
    run = coordinator.start(AgentState.of("Tell me about bees"))
    await run.run()
    assert run.agent_state.status == "ok"
    assert model.requests[1].messages[-1].tool_results[0].text == "Bees dance."
    assert_path(
        run, "(expanding calling interrupt_check executing propagating until_check deciding)+ ok"
    )
    (child,) = run.trace.where("executing")[0].children
    assert_path(
        child,
        "expanding calling interrupt_check executing propagating until_check "
        "deciding expanding calling interrupt_check executing propagating until_check "
        "deciding ok",
    )
    assert child.transitions[0].chain.messages[0].text == "Find out about bees"


async def test_subagents_of_one_batch_run_at_once() -> None:
    running: list[str] = []
    peak = [0]

    def slow(name: str) -> Agent:
        async def answer(messages: Sequence[Message]) -> Message:
            running.append(name)
            peak[0] = max(peak[0], len(running))
            await asyncio.sleep(0.05)
            running.remove(name)
            return say(f"{name} done")

        return Agent(ScriptedModel(answer))

    model = ScriptedModel([call_tools(("a", {"task": "x"}), ("b", {"task": "y"})), say("ok")])
    parent = Agent(model, [SubAgent("a", "A", slow("a")), SubAgent("b", "B", slow("b"))])
    run = parent.start(AgentState.of("go"))
    await run.run()
    assert peak[0] == 2
    children = run.trace.where("executing")[0].children
    assert [c.transitions[0].chain.messages[0].text for c in children] == ["x", "y"]


async def test_a_subagents_approval_interrupts_the_parent_and_resumes_the_child() -> None:
    published.clear()
    coordinator, _, _ = _agents()
    run = coordinator.start(AgentState.of("Bees, please"))
    await run.run()
    state = run.agent_state
    assert state.status == "interrupted"
    data = state.interrupt_data
    assert data is not None
    assert data["type"] == "subagent" and data["subagent"] == "writer"
    assert [r["tool_name"] for r in data["action_requests"]] == ["publish"]
    assert_path(run, "expanding calling interrupt_check executing propagating interrupted")
    researcher, writer = run.trace.where("executing")[0].children
    assert_path(
        researcher,
        "(expanding calling interrupt_check executing propagating until_check deciding)+ ok",
    )
    assert_path(writer, "expanding calling interrupt_check interrupted")
    assert published == []

    resumed = await coordinator.start_resume(state, [{"type": "approve"}], unbound=True)
    await resumed.run()
    assert published == ["Bees dance."]
    assert resumed.agent_state.status == "ok"
    assert resumed.agent_state.messages[-1].text == "Researched and published."
    # the parent enters where it asked, the subagent call runs again at executing and
    # its child goes on where it waited: the approved call is the child's own executing
    assert_path(
        resumed,
        "interrupt_check executing propagating until_check deciding expanding calling "
        "interrupt_check executing propagating until_check deciding ok",
    )
    (child,) = resumed.trace.transitions[1].children
    assert_path(
        child,
        "interrupt_check executing propagating until_check deciding expanding calling "
        "interrupt_check executing propagating until_check deciding ok",
    )


async def test_a_decision_for_another_request_is_refused_and_runs_nothing() -> None:
    published.clear()
    coordinator, _, _ = _agents()
    state = await coordinator.execute(AgentState.of("Bees, please"))
    with pytest.raises(ValueError, match="another action request"):
        await coordinator.resume(state, [{"type": "approve", "digest": "sha256:0"}])
    assert published == []


async def test_a_subagent_that_never_ends_is_stopped_by_the_parents_budget() -> None:
    endless = Agent(ScriptedModel(lambda messages: call_tool("look_up", topic="more")), [look_up])
    model = ScriptedModel([call_tool("digger", task="dig"), say("gave up")])
    parent = Agent(model, [SubAgent("digger", "Digs", endless)], max_runs=4)
    run = parent.start(AgentState.of("go"))
    await run.run()
    (child,) = run.trace.where("executing")[0].children
    assert child.terminal == "error"
    assert len(child.where("calling")) == 3  # the parent's 4 less its own call
    state = run.agent_state
    assert len(model.requests) == 1  # the tree spent the parent's 4 model calls
    assert state.status == "error" and state.error is not None
    assert state.error.type == "exceeded_max_runs"
    result = state.messages[-1].tool_results[0]
    assert result.is_error and "digger subagent failed" in result.text
    assert_path(
        run, "expanding calling interrupt_check executing propagating until_check deciding error"
    )


async def test_a_subagents_tokens_count_in_the_parents_usage() -> None:
    child = Agent(ScriptedModel([_with_usage(say("child"), 25)]))
    model = ScriptedModel([_with_usage(call_tool("kid", task="t"), 10), _with_usage(say("p"), 5)])
    parent = Agent(model, [SubAgent("kid", "Kid", child)])
    state = await parent.execute(AgentState.of("go"))
    assert state.usage.input_tokens == 40


def test_a_subagent_that_runs_its_own_agent_is_refused() -> None:
    inner = Agent(ScriptedModel([]))
    outer = Agent(ScriptedModel([]), [SubAgent("inner", "Inner", inner)])
    with pytest.raises(ValueError, match="outer -> inner runs the agent it is given to"):
        inner.tools = [SubAgent("outer", "Outer", outer)]
    with pytest.raises(ValueError, match="self runs the agent"):
        outer.tools = [*outer.tools, SubAgent("self", "Me", outer)]


async def test_depth_is_bounded_at_run_time() -> None:
    def nested(depth: int) -> Agent:
        if depth == 0:
            return Agent(ScriptedModel([say("bottom")]))
        return Agent(
            ScriptedModel(
                lambda m: (
                    call_tool("down", task="t")
                    if m[-1].role == "user"
                    else say(m[-1].tool_results[0].text)
                )
            ),
            [SubAgent("down", "Down", nested(depth - 1))],
        )

    state = await nested(MAX_DEPTH + 1).execute(AgentState.of("go"))
    assert state.status == "ok"
    assert "would nest runs" in state.messages[-1].text


def test_subagent_refuses_what_is_not_an_agent() -> None:
    with pytest.raises(TypeError, match="not Agent"):
        SubAgent("x", "X", object())  # type: ignore[arg-type]


# ---------------------------------------------------------------- saved trees


async def test_a_trace_with_children_round_trips_through_json() -> None:
    from agentfsm.store import dumps, loads

    run = Run(PARENT, _chain(), "preparing")
    await run.run()
    loaded = loads(dumps(run.trace), Trace)
    (child,) = loaded.where("delegating")[0].children
    assert child.path == "drafting checking ok"
    assert child.machine_fingerprint == CHILD.fingerprint
    assert [m.text for m in child.transitions[-1].chain.messages] == ["go", "plan", "draft"]


async def test_a_saved_parent_resumes_its_waiting_subagent_from_the_store(tmp_path: Path) -> None:
    published.clear()
    coordinator, _, _ = _agents()
    store = SQLiteStore(tmp_path / "runs.db")
    run = start_run(coordinator, AgentState.of("Bees, please"), store)
    await run.run()
    run_id = Checkpointer.of(run).run_id
    saved = load_run(store, run_id, strict=False)
    assert saved.status == "interrupted"
    researcher, writer = saved.trace.where("executing")[0].children
    assert writer.path == "expanding calling interrupt_check interrupted"
    assert researcher.terminal == "ok"

    with pytest.raises(ValueError, match="another action request"):
        await coordinator.resume_run(run_id, store, [{"type": "approve", "digest": "sha256:0"}])
    assert published == []

    request = saved.result.data["action_requests"][0]  # type: ignore[union-attr]
    decision = {"type": "approve", "digest": request_digest(request)}
    state = await coordinator.resume_run(run_id, store, [decision])
    assert state.status == "ok" and published == ["Bees dance."]
    again = load_run(store, run_id, strict=False)
    assert len(again.traces) == 2
    assert again.traces[1].path.startswith("interrupt_check executing propagating")
    (resumed,) = again.traces[1].transitions[1].children  # the writer, at executing
    assert resumed.terminal == "ok"
    # the children are saved beside their parent: the writer's resume went on from its own
    # checkpoint, in a segment of its own that began with the decision
    writer_run = load_run(store, f"{run_id}/{saved.result.data['tool_call_id']}", strict=False)  # type: ignore[union-attr]
    assert [t.entry for t in writer_run.traces] == ["expanding", "interrupt_check"]
    assert writer_run.status == "ok"
    with pytest.raises(ResumeError):
        await coordinator.resume_run(run_id, store, [decision])


async def test_a_nested_subagent_request_resumes_the_innermost_run() -> None:
    published.clear()
    _, _, writer = _agents()
    editor = Agent(
        ScriptedModel([call_tool("writer", task="Publish: Bees dance."), say("Edited.")]),
        [SubAgent("writer", "Publishes", writer)],
    )
    chief = Agent(
        ScriptedModel([call_tool("editor", task="Get it out"), say("Out.")]),
        [SubAgent("editor", "Edits", editor)],
    )
    state = await chief.execute(AgentState.of("Bees"))
    assert state.status == "interrupted"
    data = state.interrupt_data or {}
    assert data["subagent"] == "editor" and data["request"]["subagent"] == "writer"
    assert [r["tool_name"] for r in data["action_requests"]] == ["publish"]
    state = await chief.resume(state, [{"type": "approve"}], unbound=True)
    assert state.status == "ok" and state.messages[-1].text == "Out."
    assert published == ["Bees dance."]


# ---------------------------------------------------------------- asserting a child's path


async def test_assert_path_addresses_the_children_of_a_state() -> None:
    run = Run(PARENT, _chain(), "preparing")
    await run.run()
    assert_path(
        run, "preparing delegating finishing ok", children={"delegating": "drafting (checking) ok"}
    )
    assert_path(
        run,
        "preparing delegating finishing ok",
        children={"delegating": ["drafting checking ok"], "preparing": []},
    )
    with pytest.raises(
        AssertionError,
        match=r"child 0 of 'delegating' \(drafting_child\): the run took another path",
    ):
        assert_path(
            run, "preparing delegating finishing ok", children={"delegating": "drafting ok"}
        )
    with pytest.raises(AssertionError, match=r"'delegating' ran 1 child run\(s\), not 2"):
        assert_path(
            run,
            "preparing delegating finishing ok",
            children={"delegating": ["drafting checking ok"] * 2},
        )
    with pytest.raises(ValueError, match="'nowhere' is not a state"):
        assert_path(run, "preparing delegating finishing ok", children={"nowhere": "ok"})


# ---------------------------------------------------------------- the example


def _research_team() -> ModuleType:
    name = "agentfsm_example_research_team"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "examples" / "research_team.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


LOOP = "expanding calling interrupt_check executing propagating until_check deciding"


async def test_the_research_team_example_runs_its_tree() -> None:
    team = _research_team()
    team.published.clear()
    (first, second), children, state = await team.run_team()
    assert state.status == "ok" and len(team.published) == 1
    assert_path(
        first,
        f"{LOOP} expanding calling interrupt_check executing propagating interrupted",
        children={
            "executing": [f"{LOOP} {LOOP} ok", "expanding calling interrupt_check interrupted"]
        },
    )
    assert_path(
        second,
        f"interrupt_check executing propagating until_check deciding {LOOP} ok",
        children={
            "executing": f"interrupt_check executing propagating until_check deciding {LOOP} ok"
        },
    )
    assert [len(traces) for traces in children.values()] == [1, 2]


def test_the_research_team_diagrams_are_committed_and_current() -> None:
    team = _research_team()
    folder = Path(__file__).resolve().parent.parent / "examples" / "research_team"
    for name, text in team.drawn(svg=False).items():
        committed = (folder / name).read_text(encoding="utf-8")
        assert committed == text, (
            f"examples/research_team/{name} is stale; run the example with --diagrams"
        )
    assert (folder / "machine.svg").is_file()


# ---------------------------------------------------------------- a tree of runs, any shape

#: A member of a tree: its turns ("look" calls a tool, an int calls that subagent), whether it
#: goes on asking for tools forever once they are done, and its subagents.
_Member = tuple[list[Any], bool, list[Any]]

_members = st.recursive(
    st.tuples(st.lists(st.just("look"), max_size=2), st.booleans(), st.just([])),
    lambda inner: st.lists(inner, min_size=1, max_size=2).flatmap(
        lambda kids: st.tuples(
            st.lists(st.sampled_from(["look", *range(len(kids))]), max_size=4),
            st.booleans(),
            st.just(kids),
        )
    ),
    max_leaves=5,
)


def _member(spec: _Member) -> Agent:
    turns, endless, kids = spec

    def reply(messages: Sequence[Message]) -> Message:
        done = sum(m.role == "tool" for m in messages)
        if done < len(turns):
            turn = turns[done]
            return (
                call_tool("look_up", topic="x")
                if turn == "look"
                else call_tool(f"kid{turn}", task="t")
            )
        return call_tool("look_up", topic="more") if endless else say("done")

    tools = [look_up, *(SubAgent(f"kid{i}", "A kid", _member(k)) for i, k in enumerate(kids))]
    return Agent(ScriptedModel(reply), tools)


def _calls(trace: Trace) -> int:
    own = len(trace.where("calling"))
    return own + sum(_calls(c) for t in trace for c in t.children)


def _one_terminal(trace: Trace) -> bool:
    terminals = set(STANDARD.terminals)
    return (
        [s in terminals for s in trace.states].count(True) == 1
        and (trace.terminal in terminals)
        and all(_one_terminal(c) for t in trace for c in t.children)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_members, max_runs=st.integers(min_value=1, max_value=12))
def test_a_tree_of_runs_ends_once_within_its_max_runs(spec: _Member, max_runs: int) -> None:
    run = _member(spec).start(AgentState.of("go"), max_runs=max_runs)
    result = run.run_sync()
    assert result is not None and _one_terminal(run.trace)
    assert _calls(run.trace) <= max_runs


async def test_two_waiting_subagents_take_one_answer_each() -> None:
    published.clear()

    def gated_writer(text: str) -> Agent:
        return Agent(
            ScriptedModel([call_tool("publish", text=text), say(f"{text} is out.")]),
            [publish],
            middleware=[HumanInTheLoop({"publish": True})],
        )

    model = ScriptedModel(
        [call_tools(("a", {"task": "one"}), ("b", {"task": "two"})), say("Both handled.")]
    )
    lead = Agent(
        model,
        [
            SubAgent("a", "Writes A", gated_writer("A")),
            SubAgent("b", "Writes B", gated_writer("B")),
        ],
    )
    state = await lead.execute(AgentState.of("go"))
    data = state.interrupt_data or {}
    assert data["type"] == "multiple_interrupts"
    assert [i["subagent"] for i in data["interrupts"]] == ["a", "b"]
    with pytest.raises(ValueError, match="2 subagents wait: answer with a list of one answer"):
        await lead.resume(state, [{"type": "approve"}], unbound=True)
    with pytest.raises(ValueError, match=r"Decision count \(0\) does not match"):
        await lead.resume(state, [[{"type": "approve"}], []], unbound=True)  # b's is checked first
    assert published == []
    state = await lead.resume(state, [[{"type": "approve"}], [{"type": "reject"}]], unbound=True)
    assert state.status == "ok" and published == ["A"]
    results = [r.text for r in model.requests[-1].messages[-1].tool_results]
    assert results == ["A is out.", "B is out."]


async def test_a_subagent_call_the_parent_gates_nests_under_the_resumed_run() -> None:
    researcher = Agent(ScriptedModel([say("Bees dance.")]))
    model = ScriptedModel([call_tool("researcher", task="bees"), say("Told you.")])
    lead = Agent(
        model,
        [SubAgent("researcher", "Finds facts", researcher)],
        middleware=[HumanInTheLoop({"researcher": True})],
    )
    state = await lead.execute(AgentState.of("go"))
    assert state.status == "interrupted" and state.interrupt_data is not None
    assert state.interrupt_data["type"] == "hitl"
    run = await lead.start_resume(state, [{"type": "approve"}], unbound=True)
    await run.run()
    assert run.agent_state.status == "ok"
    assert [t.source for t in run.trace.transitions[:2]] == ["interrupt_check", "executing"]
    (child,) = run.trace.transitions[1].children  # the approved call ran at executing
    assert_path(
        child, "expanding calling interrupt_check executing propagating until_check deciding ok"
    )
    assert model.requests[-1].messages[-1].tool_results[0].text == "Bees dance."


async def test_an_edited_subagent_request_is_refused_and_runs_nothing() -> None:
    published.clear()
    coordinator, _, _ = _agents()
    state = await coordinator.execute(AgentState.of("Bees, please"))
    data = dict(state.interrupt_data or {})
    shown = [{**data["action_requests"][0], "arguments": {"text": "Something else."}}]
    edited = attrs.evolve(state, interrupt_data={**data, "action_requests": shown})
    with pytest.raises(ValueError, match="not the one its request came from"):
        await coordinator.resume(edited, [{"type": "approve"}], unbound=True)
    assert published == []


async def test_a_subagent_spends_the_parents_token_budget() -> None:
    child_model = ScriptedModel(lambda m: _with_usage(call_tool("look_up", topic="x"), 40))
    child = Agent(child_model, [look_up])
    model = ScriptedModel(
        [_with_usage(call_tool("kid", task="t"), 30), _with_usage(call_tool("kid", task="t"), 5)]
    )
    parent = Agent(model, [SubAgent("kid", "Kid", child)], token_budget=100)
    state = await parent.execute(AgentState.of("go"))
    # The child starts with 70 tokens left: its second reply (80) is past them.
    assert len(child_model.requests) == 2
    assert state.status == "error" and state.error is not None
    assert state.error.type == "exceeded_token_budget"  # the parent's next reply is past 100
    assert state.usage.input_tokens == 30 + 80 + 5


async def test_a_child_machine_out_of_max_runs_keeps_its_name_in_the_agents_error() -> None:
    """The generic "Max number of automated turns" is for the agent's own budget; a child
    machine's budget running out says which child, and where, as the run's error does."""
    consulting = STANDARD.insert(
        "consulting",
        (run_machine(STANDARD, name="consultant", options={"max_runs": 1}),),
        after="until_check",
        name="consulting_standard",
    )
    model = ScriptedModel([say("parent answer"), call_tool("look_up", topic="x", call_id="c1")])
    run = Agent(model, [look_up], machine=consulting).start(AgentState.of("go"))
    result = await run.run()
    assert_path(
        run, "expanding calling interrupt_check executing propagating until_check consulting error"
    )
    assert_path(
        run.trace.where("consulting")[0].children[0],
        "expanding calling interrupt_check executing propagating until_check deciding error",
    )
    message = (
        "The child machine 'consultant' (standard) failed in 'deciding': "
        "Exceeded maximum number of runs (1/1)"
    )
    assert isinstance(result, Failed) and result.error.message == message
    state = run.agent_state
    assert state.status == "error" and state.error is not None
    assert state.error.type == "exceeded_max_runs"
    assert state.error.message == message
    assert state.error.details == {"child": "consultant", "child_state": "deciding"}
    assert state.error.retryable is False


async def test_the_agents_own_max_runs_keeps_the_generic_message() -> None:
    model = ScriptedModel(lambda messages: call_tool("look_up", topic="more"))
    state = await Agent(model, [look_up], max_runs=1).execute(AgentState.of("go"))
    assert state.status == "error" and state.error is not None
    assert state.error.type == "exceeded_max_runs"
    assert (
        state.error.message == "Max number of automated turns reached. You may continue if desired."
    )
    assert state.error.details == {}
