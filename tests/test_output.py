"""Typed final output: Agent(output_type=T), the standard_output machine, corrections."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Literal, TypedDict

import attrs
import pytest

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    LLMChain,
    MachineDefinitionError,
    Message,
    OutputError,
    start_run,
    tool,
)
from agentfsm._modes.standard import STANDARD_OUTPUT
from agentfsm._output import FINAL_RESULT, OutputTool, check_output
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import Continue
from agentfsm.store import SQLiteStore, load_run
from tests.support import LOOP, add


@attrs.frozen
class City:
    name: str
    population: int
    tags: list[str] = attrs.Factory(list)


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Movie(TypedDict):
    title: str
    year: int


class Mood(enum.Enum):
    HAPPY = "happy"
    SAD = "sad"


# ---------------------------------------------------------------- the value


def test_a_final_result_call_is_the_runs_typed_output() -> None:
    agent = Agent(
        ScriptedModel([call_tool("final_result", name="Paris", population=2_100_000)]),
        output_type=City,
    )
    run = agent.start(AgentState.of("the biggest city in France?"))
    run.run_sync()
    assert run.output == City(name="Paris", population=2_100_000)
    assert run.agent_state.output == run.output and run.agent_state.status == "ok"
    assert run.table is STANDARD_OUTPUT
    assert [t.source for t in run.trace][-2:] == ["deciding", "validating_output"]
    assert [(t.trigger, t.dest) for t in run.trace][-2:] == [
        ("done", "validating_output"),
        ("valid", "ok"),
    ]
    # the model saw the tool with the type's schema
    assert isinstance(agent.model, ScriptedModel)
    [offered] = agent.model.requests[0].tools
    assert offered.name == FINAL_RESULT
    assert offered.parameters == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "population": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "population"],
        "additionalProperties": False,
    }


def test_a_json_text_answer_is_the_output_too() -> None:
    agent = Agent(ScriptedModel([say('```json\n{"x": 1.5, "y": -2}\n```')]), output_type=Point)
    state = agent.execute_sync(AgentState.of("a point"))
    assert state.status == "ok" and state.output == Point(x=1.5, y=-2)


@pytest.mark.parametrize(
    ("output_type", "answer", "value"),
    [
        (int, {"result": 42}, 42),
        (str, {"result": "hi"}, "hi"),
        (bool, {"result": True}, True),
        (list[int], {"result": [1, 2]}, [1, 2]),
        (dict[str, int], {"a": 1}, {"a": 1}),
        (Movie, {"title": "Alien", "year": 1979}, {"title": "Alien", "year": 1979}),
        (Mood, {"result": "sad"}, Mood.SAD),
        (Literal["yes", "no"], {"result": "no"}, "no"),
        (int | None, {"result": None}, None),
        (list[City], {"result": [{"name": "Rome", "population": 3}]}, [City("Rome", 3)]),
    ],
)
def test_each_kind_of_type_is_asked_for_and_structured(
    output_type: object, answer: dict[str, object], value: object
) -> None:
    agent = Agent(ScriptedModel([call_tool("final_result", **answer)]), output_type=output_type)
    state = agent.execute_sync(AgentState.of("answer"))
    assert state.status == "ok", state.error
    assert state.output == value


def test_plain_text_is_a_str_output() -> None:
    agent = Agent(ScriptedModel([say("Paris")]), output_type=str)
    assert agent.execute_sync(AgentState.of("capital of France?")).output == "Paris"


def test_a_bare_json_value_is_taken_for_a_boxed_type() -> None:
    agent = Agent(ScriptedModel([say("[1, 2, 3]")]), output_type=list[int])
    assert agent.execute_sync(AgentState.of("numbers")).output == [1, 2, 3]


# ---------------------------------------------------------------- corrections


def test_a_bad_final_result_call_is_sent_back_and_corrected() -> None:
    model = ScriptedModel(
        [
            call_tool("final_result", name="Paris", population="lots", call_id="c1"),
            call_tool("final_result", name="Paris", population=2_100_000, call_id="c2"),
        ]
    )
    run = Agent(model, output_type=City).start(AgentState.of("France's biggest city?"))
    run.run_sync()
    assert run.output == City(name="Paris", population=2_100_000)
    triggers = [(t.source, t.trigger) for t in run.trace]
    assert ("validating_output", "invalid") in triggers
    assert triggers[-1] == ("validating_output", "valid")
    # the model was told what was wrong, as the result of its call
    told = model.requests[1].messages[-1]
    assert told.role == "tool"
    [result] = told.tool_results
    assert result.is_error and result.tool_call_id == "c1"
    assert "output.population" in str(result.content) and "integer" in str(result.content)


def test_a_bad_text_answer_gets_a_correction_message() -> None:
    model = ScriptedModel([say("about two million"), say('{"name": "Paris", "population": 2}')])
    state = Agent(model, output_type=City).execute_sync(AgentState.of("France?"))
    assert state.status == "ok" and state.output == City("Paris", 2)
    correction = model.requests[1].messages[-1]
    assert correction.role == "user"
    assert correction.metadata == {"output_correction": True}
    assert "not JSON" in correction.text


def test_past_the_retries_the_run_fails_saying_what_was_wrong() -> None:
    model = ScriptedModel([call_tool("final_result", name="Paris")] * 3)
    agent = Agent(model, output_type=City, output_retries=2)
    run = agent.start(AgentState.of("France?"))
    run.run_sync()
    state = run.agent_state
    assert state.status == "error" and state.output is None and run.output is None
    assert isinstance(run.result.error, OutputError)  # type: ignore[union-attr]
    assert state.error is not None and state.error.type == "invalid_output"
    assert state.error.details["attempts"] == 3
    assert any("population" in p for p in state.error.details["problems"])
    assert run.trace.transitions[-1].source == "validating_output"
    assert (run.trace.transitions[-1].trigger, run.state) == ("failed", "error")
    assert model.calls == 3

    # no retries: the first bad answer ends the run
    once = Agent(ScriptedModel([say("no")]), output_type=City, output_retries=0)
    assert once.execute_sync(AgentState.of("France?")).error.details["attempts"] == 1  # type: ignore[union-attr]


def test_corrections_are_counted_from_the_hosts_last_message() -> None:
    tool = OutputTool.of(City, retries=1)
    bad = Message.assistant("nope")
    told = attrs.evolve(Message.user("fix it"), metadata={"output_correction": True})
    chain = LLMChain(ScriptedModel([]), tools=[tool]).add_messages(
        [Message.user("q"), bad, told, bad]
    )
    result = check_output(Continue(chain))
    assert type(result).__name__ == "Failed"
    fresh = chain.add_messages([Message.user("new question"), bad])
    assert isinstance(check_output(Continue(fresh)), Continue)


# ---------------------------------------------------------------- runs without one


def test_an_agent_without_an_output_type_runs_the_standard_machine_as_before() -> None:
    def script() -> ScriptedModel:
        return ScriptedModel([call_tool("add", a=1, b=2), say("3")])

    plain = Agent(script(), [add])
    assert plain.mode.table is STANDARD and plain.output_type is None
    assert [t.name for t in plain.tools] == ["add"]
    run = plain.start(AgentState.of("1+2"))
    run.run_sync()
    assert run.table is STANDARD
    assert " ".join(t.source for t in run.trace) + f" {run.state}" == f"{LOOP} {LOOP} ok"
    assert run.output is None and run.agent_state.output is None
    # the same run with an output type takes the same path, then checks the answer
    typed = Agent(script(), [add], output_type=int)
    typed_run = typed.start(AgentState.of("1+2"))
    typed_run.run_sync()
    assert typed_run.output == 3
    plain_path = [(t.source, t.trigger, t.dest) for t in run.trace]
    typed_path = [(t.source, t.trigger, t.dest) for t in typed_run.trace]
    assert typed_path[: len(plain_path) - 1] == plain_path[:-1]
    assert typed_path[len(plain_path) - 1 :] == [
        ("deciding", "done", "validating_output"),
        ("validating_output", "valid", "ok"),
    ]


def test_the_standard_machine_is_unchanged() -> None:
    assert "validating_output" not in STANDARD.states
    done = [e for e in STANDARD.edges if e.source == "deciding" and e.trigger == "done"]
    assert [e.dest for e in done] == ["ok"]
    committed = (Path(__file__).parent.parent / "diagrams" / "machine.mmd").read_text()
    assert "ValidatingOutput" not in committed


# ---------------------------------------------------------------- refusals


def test_output_options_are_checked_when_the_agent_is_made() -> None:
    model = ScriptedModel([])
    with pytest.raises(TypeError, match="output_type"):
        Agent(model, output_type=object)
    with pytest.raises(ValueError, match="output_retries"):
        Agent(model, output_type=int, output_retries=-1)

    @tool
    def final_result(x: int) -> int:
        """A tool of the host's that takes the name."""
        return x

    with pytest.raises(ValueError, match="rename the tool"):
        Agent(model, [final_result], output_type=int)
    with pytest.raises(ValueError, match="validating_output"):
        Agent(model, output_type=int, machine=STANDARD.replace("deciding", [], name="x_plain"))


def test_the_output_machine_is_a_machine() -> None:
    with pytest.raises(MachineDefinitionError):
        STANDARD_OUTPUT.insert("validating_output", [check_output], after="deciding", name="dup")


# ---------------------------------------------------------------- saved runs


def test_a_saved_runs_output_is_kept_in_its_state(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    agent = Agent(
        ScriptedModel([call_tool("final_result", name="Oslo", population=700_000)]),
        output_type=City,
    )
    run = start_run(agent, AgentState.of("Norway?"), store, run_id="r1")
    run.run_sync()
    assert run.output == City("Oslo", 700_000)
    saved = load_run(SQLiteStore(tmp_path / "runs.db"), "r1", tools=agent.tools)
    assert saved.agent_state is not None and saved.agent_state.status == "ok"
    # a state loaded back holds the output's plain JSON form
    assert saved.agent_state.output == {"name": "Oslo", "population": 700000}
    assert saved.trace.machine == "standard_output"
