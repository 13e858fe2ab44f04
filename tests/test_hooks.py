"""Run hooks: what a hook hears, in which order, for which runs, and when one raises."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Agent, AgentState, Run, Transition, hooks, start_run
from agentfsm._hooks import add_global_hook, current_global_hooks, global_hooks
from agentfsm._modes.standard import StandardMode
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.store import Checkpointer, SQLiteStore
from agentfsm.testing import assert_path
from tests.support import LOOP, add, chain_of


def scripted_run(*, hooks: tuple[Any, ...] = ()) -> Run:
    """Two tool round trips, then an answer: 21 transitions into ``ok``."""
    model = ScriptedModel([call_tool("add", a=1, b=2), call_tool("add", a=3, b=4), say("7")])
    return StandardMode().start(chain_of(model, add), hooks=hooks)


class Recorder:
    """Hears everything, and writes down what it heard as ``(name, event, detail)``."""

    def __init__(self, name: str = "r", heard: list[tuple[str, str, Any]] | None = None) -> None:
        self.name = name
        self.heard: list[tuple[str, str, Any]] = [] if heard is None else heard

    def run_started(self, run: Run) -> None:
        self.heard.append((self.name, "run_started", run))

    def transition(self, run: Run, transition: Transition) -> None:
        self.heard.append((self.name, "transition", transition))

    def run_ended(self, run: Run) -> None:
        self.heard.append((self.name, "run_ended", run.result))


class OnlyTransitions:
    def __init__(self) -> None:
        self.triggers: list[str] = []

    def transition(self, run: Run, transition: Transition) -> None:
        self.triggers.append(transition.trigger)


class Raises:
    def __init__(self, trigger: str) -> None:
        self.trigger = trigger

    def transition(self, run: Run, transition: Transition) -> None:
        if transition.trigger == self.trigger:
            raise RuntimeError(f"hook failed on {transition.trigger}")


def test_a_hook_hears_the_start_every_transition_and_the_end_in_order() -> None:
    recorder = Recorder()
    run = scripted_run(hooks=(recorder,))
    assert recorder.heard == [("r", "run_started", run)]
    result = run.run_sync()
    assert_path(run, f"({LOOP}){{3}} ok")
    transitions = [d for _, e, d in recorder.heard if e == "transition"]
    assert len(transitions) == len(run.trace) == 21
    assert all(a is b for a, b in zip(transitions, run.trace.transitions, strict=True))
    assert [e for _, e, _ in recorder.heard] == ["run_started"] + ["transition"] * 21 + [
        "run_ended"
    ]
    assert recorder.heard[-1] == ("r", "run_ended", result)


def test_a_hook_may_have_any_one_of_the_methods() -> None:
    transitions_only = OnlyTransitions()
    run = scripted_run(hooks=(transitions_only,))
    run.run_sync()
    assert transitions_only.triggers == [t.trigger for t in run.trace]

    class EndOnly:
        ended: Run | None = None

        def run_ended(self, run: Run) -> None:
            self.ended = run

    end_only = EndOnly()
    run = scripted_run(hooks=(end_only,))
    run.run_sync()
    assert end_only.ended is run


def test_an_object_with_no_hook_method_is_refused() -> None:
    run = scripted_run()
    with pytest.raises(TypeError, match="not a run hook"):
        run.add_hook(object())  # type: ignore[arg-type]


def test_a_hook_added_after_the_start_hears_the_rest_but_not_the_start() -> None:
    run = scripted_run()
    run.step_sync()
    recorder = Recorder()
    run.add_hook(recorder)
    run.run_sync()
    events = [e for _, e, _ in recorder.heard]
    assert events == ["transition"] * 20 + ["run_ended"]


def test_hooks_hear_each_event_in_order_global_then_given_then_added() -> None:
    heard: list[tuple[str, str, Any]] = []
    with global_hooks(Recorder("global", heard)):
        run = scripted_run(hooks=(Recorder("given", heard),))
    run.add_hook(Recorder("added", heard))
    run.add_hook(Recorder("first", heard), first=True)
    assert [h.name for h in run.hooks] == ["first", "global", "given", "added"]  # type: ignore[union-attr]
    assert [(n, e) for n, e, _ in heard] == [("global", "run_started"), ("given", "run_started")]
    heard.clear()
    run.step_sync()
    assert [n for n, _, _ in heard] == ["first", "global", "given", "added"]
    heard.clear()
    run.run_sync()
    order = ["first", "global", "given", "added"]
    assert [(n, e) for n, e, _ in heard[-8:]] == [(n, "transition") for n in order] + [
        (n, "run_ended") for n in order
    ]


def test_a_checkpointer_hears_each_transition_before_the_other_hooks(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    saved: list[str] = []

    class Saved:
        def transition(self, run: Run, transition: Transition) -> None:
            saved.append(store.read("r").status)

    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    with global_hooks(Saved()):
        run = start_run(agent, AgentState.of("go"), store, run_id="r")
    assert [type(h) for h in run.hooks] == [Checkpointer, Saved]
    run.run_sync()
    # the transition into ok is saved by the time the next hook hears it
    assert saved[-1] == "ok"
    assert saved[:-1] == ["running"] * (len(run.trace) - 1)


def test_a_global_hook_applies_to_runs_started_inside_its_scope_only() -> None:
    inside, outside = OnlyTransitions(), OnlyTransitions()
    with global_hooks(inside):
        assert inside in current_global_hooks()
        started_inside = scripted_run()
    started_after = scripted_run()
    started_inside.run_sync()
    started_after.run_sync()
    assert inside.triggers == [t.trigger for t in started_inside.trace]
    assert inside not in current_global_hooks()

    remove = add_global_hook(outside)
    counted = scripted_run()
    remove()
    remove()  # a second call does nothing
    scripted_run().run_sync()
    counted.run_sync()
    assert outside.triggers == [t.trigger for t in counted.trace]
    assert current_global_hooks() == ()


def test_global_hooks_added_and_removed_from_many_threads_all_leave() -> None:
    before = current_global_hooks()
    barrier = threading.Barrier(8)

    def churn() -> None:
        barrier.wait()
        for _ in range(200):
            remove = add_global_hook(OnlyTransitions())
            remove()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert current_global_hooks() == before


def test_a_raising_hook_stops_the_event_there_and_propagates_out_of_the_step() -> None:
    after = OnlyTransitions()
    run = scripted_run(hooks=(Raises("executed"), after))
    with pytest.raises(RuntimeError, match="hook failed on executed"):
        run.run_sync()
    # the transition is recorded, the run stands past it; the hook after did not hear it
    assert run.trace.transitions[-1].trigger == "executed"
    assert run.state == "propagating"
    assert after.triggers == [t.trigger for t in run.trace.transitions[:-1]]
    # the run goes on when stepped again (every round trip's executed raises)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            run.run_sync()
    assert run.run_sync().__class__.__name__ == "Ok"
    assert len(after.triggers) == len(run.trace) - 3


def test_a_raising_run_started_hook_fails_the_construction() -> None:
    class Refuses:
        def run_started(self, run: Run) -> None:
            raise ValueError("no runs today")

    with pytest.raises(ValueError, match="no runs today"), global_hooks(Refuses()):
        scripted_run()


def test_the_module_documents_its_protocols() -> None:
    assert set(hooks.__all__) >= {"RunHook", "add_global_hook", "global_hooks"}
    full: hooks.RunHook = Recorder()  # a hook with every method is a RunHook
    assert full.run_started is not None


def test_a_run_view_follows_a_run_driven_by_anyone() -> None:
    from agentfsm.diagrams._console import RunView

    run = scripted_run()
    view = RunView("v")
    view.begin(run.state)
    run.add_hook(view)
    run.step_sync()
    assert view.transitions == run.trace.transitions and view.current == "calling"
    run.run_sync()
    assert view.transitions == run.trace.transitions and view.current is None


def test_an_agent_run_takes_hooks_at_its_start_and_at_its_resume() -> None:
    from agentfsm import HumanInTheLoop, tool

    @tool
    def write(text: str) -> str:
        """Write."""
        return "written"

    heard: list[str] = []

    class Ends:
        def run_ended(self, run: Run) -> None:
            heard.append(run.state)

    model = ScriptedModel([call_tool("write", text="x"), say("done")])
    agent = Agent(model, [write], middleware=[HumanInTheLoop({"write": True})])
    run = agent.start(AgentState.of("go"), hooks=[Ends()])
    run.run_sync()
    assert heard == ["interrupted"]
    resumed = agent.resume_sync(
        run.agent_state, [{"type": "approve"}], hooks=[Ends()], unbound=True
    )
    assert resumed.status == "ok" and heard == ["interrupted", "ok"]
