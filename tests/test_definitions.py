"""Each check of a machine's definition, with a table that breaks it and the whole message.

A table that is not a machine is refused when it is declared, by a message naming the
machine and the state or edge at fault. One case per check: switching a check off, or
changing what it says, fails its case.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from agentfsm import (
    Edge,
    Failed,
    LLMChain,
    MachineDefinitionError,
    MachineTable,
    Message,
    Ok,
    Options,
    Paused,
)
from agentfsm.providers import ScriptedModel
from agentfsm.steps import Continue, PipelineResult

_names = itertools.count()


def step(result: PipelineResult, opts: Any = None) -> PipelineResult:
    return result


def finish(result: PipelineResult, opts: Any = None) -> PipelineResult:
    return Ok(result.chain) if isinstance(result, Continue) else result


def _done(source: str = "work", dest: str = "done", **changes: Any) -> Edge:
    fields = {"on": Ok, "trigger": "finish", "why": "the work is done", **changes}
    return Edge(source, dest, **fields)


def table(**changes: Any) -> MachineTable:
    """A machine of one working state, with ``changes`` to its fields; a fresh name."""
    fields: dict[str, Any] = {
        "name": f"definition_{next(_names)}",
        "steps": {"work": (step,)},
        "terminals": ("done", "paused", "error"),
        "entries": {"fresh": "work"},
        "edges": (_done(),),
        **changes,
    }
    return MachineTable(**fields)


@attrs.frozen
class Broken:
    """A table that is not a machine: what breaks it, and the message (after the name)."""

    name: str
    changes: Callable[[], dict[str, Any]]
    message: str


def _two_states(**changes: Any) -> dict[str, Any]:
    return {"steps": {"work": (step,), "more": (step,)}, **changes}


BROKEN = [
    Broken(
        "no working state",
        lambda: {"steps": {}},
        "it has no working state; declare each one with its steps",
    ),
    Broken(
        "no terminal",
        lambda: {"terminals": (), "edges": ()},
        "it has no terminal; a run must be able to end",
    ),
    Broken("no entry", lambda: {"entries": {}}, "it has no entry; name the state a run starts in"),
    Broken(
        "a state name not snake_case",
        lambda: {
            "steps": {"Work": (step,)},
            "entries": {"fresh": "Work"},
            "edges": (_done("Work"),),
        },
        "state 'Work' is not snake_case ([a-z][a-z0-9_]*)",
    ),
    Broken(
        "a terminal name not snake_case",
        lambda: {"terminals": ("done", "paused", "error", "Gone")},
        "state 'Gone' is not snake_case ([a-z][a-z0-9_]*)",
    ),
    Broken(
        "a state both working and terminal",
        lambda: {"terminals": ("done", "paused", "error", "work")},
        "state 'work' is declared twice; a state is working or terminal, once",
    ),
    Broken(
        "a step that is not callable",
        lambda: {"steps": {"work": (step, "finish")}},
        "state 'work' has 'finish' among its steps, which is not callable",
    ),
    Broken(
        "details of a state that does not work",
        lambda: {"details": {"done": lambda chain, result: None}},
        "details['done'] must be a callable for a working state",
    ),
    Broken(
        "details that are not callable",
        lambda: {"details": {"work": "what it did"}},
        "details['work'] must be a callable for a working state",
    ),
    Broken(
        "options that are not Options",
        lambda: {"options": dict},
        "its options are <class 'dict'>, not Options or a subclass of it",
    ),
    Broken(
        "an entry into a terminal",
        lambda: {"entries": {"fresh": "work", "late": "done"}},
        "entry 'late' leads to 'done', which is not a working state",
    ),
    Broken(
        "an edge that is not an Edge",
        lambda: {"edges": (_done(), ("work", "done"))},
        "('work', 'done') among the edges is not an Edge",
    ),
    Broken(
        "an edge out of a terminal",
        lambda: {"edges": (_done(), _done("done", "error", on=Failed, trigger="again"))},
        "terminal 'done' has an edge out (edge done --again--> error); a terminal ends the run",
    ),
    Broken(
        "an edge from nowhere",
        lambda: {"edges": (_done(), _done("elsewhere"))},
        "edge elsewhere --finish--> done leaves 'elsewhere', which is not a state of this machine",
    ),
    Broken(
        "an edge to nowhere",
        lambda: {"edges": (_done(dest="elsewhere"),)},
        "edge work --finish--> elsewhere enters 'elsewhere', which is not a state of this machine",
    ),
    Broken(
        "a trigger not snake_case",
        lambda: {"edges": (_done(trigger="Finish"),)},
        "edge work --Finish--> done: the trigger is not snake_case ([a-z][a-z0-9_]*)",
    ),
    Broken(
        "an edge on something not a result",
        lambda: {"edges": (_done(on=str),)},
        "edge work --finish--> done fires on <class 'str'>, which is not a pipeline result type "
        "(Continue, Ok, Paused, Interrupted, Failed)",
    ),
    Broken(
        "an edge with no why",
        lambda: {"edges": (_done(why="  "),)},
        "edge work --finish--> done needs a one-line why",
    ),
    Broken(
        "an edge with a why of two lines",
        lambda: {"edges": (_done(why="the work\nis done"),)},
        "edge work --finish--> done needs a one-line why",
    ),
    Broken(
        "an edge whose why is not text",
        lambda: {"edges": (_done(why=None),)},
        "edge work --finish--> done needs a one-line why",
    ),
    Broken(
        "a run ending on Continue",
        lambda: {"edges": (_done(on=Continue),)},
        "edge work --finish--> done ends the run on Continue; a run ends on Ok, Paused, "
        "Interrupted or Failed",
    ),
    Broken(
        "a trigger twice from one state",
        lambda: {"edges": (_done(), _done(dest="error", on=Failed))},
        "state 'work' has the trigger 'finish' twice (to 'done' and to 'error')",
    ),
    Broken(
        "two edges on one result type",
        lambda: {"edges": (_done(), _done(dest="error", trigger="finish_badly"))},
        "state 'work' has two edges on Ok ('finish' and 'finish_badly'); one result type fires "
        "one edge",
    ),
    Broken(
        "a state with no way out",
        lambda: _two_states(
            edges=(_done(), Edge("work", "more", on=Continue, trigger="on", why="more to do")),
            default_edges=False,
        ),
        "state 'more' has no way out: no edge leaves it",
    ),
    Broken(
        "an unreachable state",
        lambda: _two_states(edges=(_done(), _done("more"))),
        "state 'more' is unreachable: no entry or edge leads to it",
    ),
    Broken(
        "an unreachable terminal",
        lambda: {"terminals": ("done", "paused", "error", "never")},
        "state 'never' is unreachable: no entry or edge leads to it",
    ),
    Broken(
        "a state with no path to a terminal",
        lambda: _two_states(
            terminals=("done",),
            edges=(
                _done(),
                Edge("work", "more", on=Continue, trigger="on", why="more to do"),
                Edge("more", "more", on=Continue, trigger="again", why="still more to do"),
            ),
            default_edges=False,
        ),
        "state 'more' has no path to a terminal: a run there never ends",
    ),
    Broken(
        "no pause edge, the table declining the defaults",
        lambda: {
            "terminals": ("done", "error"),
            "edges": (_done(), _done(dest="error", on=Failed, trigger="fail")),
            "default_edges": False,
        },
        "state 'work' has no edge on Paused; a run takes it from any state when a pause is "
        "requested (the table declares its own: default_edges=False)",
    ),
    Broken(
        "no fail edge, the table declining the defaults",
        lambda: {
            "terminals": ("done", "paused"),
            "edges": (_done(), _done(dest="paused", on=Paused, trigger="pause")),
            "default_edges": False,
        },
        "state 'work' has no edge on Failed; a run takes it from any state when a step raises "
        "(the table declares its own: default_edges=False)",
    ),
    Broken(
        "no paused terminal for the default pause edge",
        lambda: {"terminals": ("done", "error")},
        "state 'work' has no edge on Paused; a run takes it from any state when a pause is "
        "requested (a default edge goes to the 'paused' terminal, which this table lacks)",
    ),
    Broken(
        "no error terminal for the default fail edge",
        lambda: {"terminals": ("done", "paused")},
        "state 'work' has no edge on Failed; a run takes it from any state when a step raises "
        "(a default edge goes to the 'error' terminal, which this table lacks)",
    ),
    Broken(
        "the default fail edge's trigger taken",
        lambda: {
            "terminals": ("paused", "error"),
            "edges": (_done(dest="error", trigger="failed"),),
        },
        "state 'work' has no edge on Failed; a run takes it from any state when a step raises "
        "(the default edge's trigger 'failed' is taken by another of its edges)",
    ),
]


@pytest.mark.parametrize("broken", BROKEN, ids=[b.name for b in BROKEN])
def test_a_broken_table_is_refused_naming_what_is_wrong(broken: Broken) -> None:
    changes = broken.changes()
    name = f"broken_{next(_names)}"
    with pytest.raises(MachineDefinitionError) as raised:
        table(name=name, **changes)
    assert str(raised.value) == f"The {name} machine: {broken.message}."


def test_the_table_the_cases_break_is_a_machine() -> None:
    machine = table()
    assert machine.working == ("work",)
    assert [(e.source, e.trigger, e.dest) for e in machine.edges] == [
        ("work", "finish", "done"),
        ("work", "paused", "paused"),
        ("work", "failed", "error"),
    ]


@pytest.mark.parametrize("name", ["Standard", "my-machine", "2nd", "", "machine name"])
def test_a_machine_name_not_snake_case_is_refused(name: str) -> None:
    with pytest.raises(MachineDefinitionError) as raised:
        table(name=name)
    assert str(raised.value) == (
        "A machine's name is snake_case ([a-z][a-z0-9_]*): it names the machine in saved runs "
        f"and diagrams; got {name!r}."
    )


def test_a_machine_name_that_is_not_text_is_refused() -> None:
    with pytest.raises(MachineDefinitionError, match=re.escape("got 7.")):
        table(name=7)


def test_steps_given_as_one_step_are_refused() -> None:
    with pytest.raises(MachineDefinitionError) as raised:
        table(steps={"work": step})
    assert (
        str(raised.value) == f"The steps of state 'work' are a sequence of steps: write ({step!r},)"
    )
    with pytest.raises(MachineDefinitionError, match="The steps of state 'work' are a sequence"):
        table(steps={"work": "step"})


def test_an_edge_from_no_state_is_refused() -> None:
    with pytest.raises(MachineDefinitionError) as raised:
        Edge((), "done", on=Ok, trigger="finish", why="the work is done")
    assert str(raised.value) == "An edge leaves at least one state; its source is empty"


def test_a_second_machine_of_a_taken_name_is_refused_unless_it_is_the_same() -> None:
    first = table(name="definition_twice")
    again = table(name="definition_twice")  # the same shape: a reload
    assert again.edges == first.edges
    with pytest.raises(MachineDefinitionError) as raised:
        table(name="definition_twice", edges=(_done(trigger="complete"),))
    assert str(raised.value) == (
        "Another machine named 'definition_twice' is already declared as version 1, with other "
        "states or edges; give this one a name of its own, or the next version (saved runs find "
        "their machine by name and version)."
    )


def test_options_of_a_subclass_are_accepted() -> None:
    @attrs.frozen(kw_only=True)
    class Mine(Options):
        drafts: int = 2

    assert table(options=Mine).options is Mine


# ---------------------------------------------------------------- extra steps


def test_extra_steps_for_an_unknown_state_are_refused() -> None:
    machine = table()
    with pytest.raises(ValueError) as raised:
        machine.work({"wrok": [step]})
    assert str(raised.value) == "extra_steps names unknown state(s) ['wrok']; states: ['work']"


@pytest.mark.parametrize("extra", [3, "finish", None])
def test_an_extra_step_that_is_not_callable_is_refused(extra: Any) -> None:
    machine = table()
    with pytest.raises(ValueError) as raised:
        machine.work({"work": [finish, extra]})
    assert str(raised.value) == f"extra_steps['work']: {extra!r} is not a step"


def test_extra_steps_run_after_the_states_own() -> None:
    seen: list[str] = []

    def mine(result: PipelineResult, opts: Any = None) -> PipelineResult:
        seen.append("mine")
        return finish(result, opts)

    def own(result: PipelineResult, opts: Any = None) -> PipelineResult:
        seen.append("own")
        return result

    machine = table(steps={"work": (own,)})
    chain = LLMChain(ScriptedModel([])).add_message(Message.user("go"))
    result = machine.work({"work": [mine]})["work"](Continue(chain), Options())
    assert seen == ["own", "mine"] and isinstance(result, Ok)
    assert machine.work()["work"] is own  # a state of one step: the step is its work
    assert machine.work() is machine.work({})  # no extra steps: the table's own work


def test_an_agent_refuses_an_extra_step_that_is_not_callable_before_anything_runs() -> None:
    from agentfsm import Agent, AgentState
    from agentfsm.providers import say

    model = ScriptedModel([say("x")])
    with pytest.raises(ValueError) as raised:
        Agent(model).start(AgentState.of("go"), extra_steps={"calling": [finish, 3]})
    assert str(raised.value) == "extra_steps['calling']: 3 is not a step"
    with pytest.raises(ValueError, match=r"extra_steps names unknown state\(s\) \['caling'\]"):
        Agent(model).start(AgentState.of("go"), extra_steps={"caling": [finish]})
    assert model.calls == 0
