"""Resume as Sagents does it: through the middleware that owns the interrupt, then execute.

Also the agent's failure semantics of ``LLMChain.run``: ``on_error`` once per
failed run, and no model call for an empty conversation.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from agentfsm import (
    Agent,
    AgentState,
    ChainError,
    HumanInTheLoop,
    Message,
    Middleware,
    ResumeError,
    ToolResult,
    start_run,
    tool,
)
from agentfsm._agent import MAX_RUNS_MESSAGE
from agentfsm.providers import ScriptedModel, call_tool, fail, say
from agentfsm.store import SQLiteStore, load_run
from agentfsm.testing import assert_path
from tests.support import LOOP, add

EXAMPLE = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "ask_user.py"))
ask_user = EXAMPLE["ask_user"]


class AskUser(Middleware):
    """A middleware that answers ``ask_user`` interrupts its own way (the adapter for
    custom interrupts): the answer becomes the tool's result, reworded."""

    async def handle_resume(
        self, agent: Agent, state: AgentState, answer: Any
    ) -> AgentState | None:
        data = state.interrupt_data or {}
        if data.get("type") != "ask_user":
            return None  # another middleware's interrupt
        if not isinstance(answer, str) or not answer.strip():
            raise ValueError(f"An ask_user answer is the user's reply as text, got: {answer!r}")
        result = ToolResult(
            tool_call_id=data["tool_call_id"],
            name="ask_user",
            content=f"The user answered: {answer}",
        )
        return state.replace_tool_result(result)


executed: list[str] = []


@tool
def write_file(path: str) -> str:
    """Write a file."""
    executed.append(path)
    return f"wrote {path}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()


class Recorder:
    """Callbacks that note what fired, in order."""

    def __init__(self, raising: bool = False) -> None:
        self.fired: list[tuple[str, Any]] = []
        self.raising = raising

    def handlers(self) -> dict[str, Any]:
        def on_error(chain: Any, error: ChainError) -> None:
            self.fired.append(("on_error", error.type))
            if self.raising:
                raise RuntimeError("the error handler broke")

        def started(chain: Any, call: Any, tool: Any) -> None:
            self.fired.append(("on_tool_execution_started", call.name))

        return {"on_error": on_error, "on_tool_execution_started": started}


def gated(model: ScriptedModel, *extra: Any, callbacks: Any = ()) -> Agent:
    return Agent(
        model,
        [write_file],
        middleware=[HumanInTheLoop({"write_file": True}), *extra],
        callbacks=callbacks,
    )


async def interrupted(agent: Agent) -> AgentState:
    run = agent.start(AgentState.of("go"))
    await run.run()
    assert_path(run, "expanding calling interrupt_check interrupted")
    return run.agent_state


# ---------------------------------------------------------------- resume needs an owner


async def test_resume_without_the_owning_middleware_is_refused_and_runs_nothing() -> None:
    model = ScriptedModel([call_tool("write_file", path="a"), say("done")])
    state = await interrupted(gated(model))
    recorder = Recorder()
    bare = Agent(model, [write_file], callbacks=[recorder.handlers()])
    for resume in (bare.resume, bare.start_resume):
        with pytest.raises(ValueError) as info:
            await resume(state, [{"type": "approve"}], unbound=True)
        assert str(info.value).startswith(
            "The run waits on an approval, but no HumanInTheLoop middleware of this agent "
            "gates its calls ['write_file']"
        )
    assert executed == [] and model.calls == 1 and recorder.fired == []


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"until_tool": "nope"}, ValueError),
        ({"max_runs": 0}, ValueError),
        ({"extra_steps": {"nowhere": []}}, ValueError),
        ({"until": "write_file"}, TypeError),
    ],
)
async def test_resume_options_are_checked_before_any_tool_runs(
    options: dict[str, Any], error: type[Exception]
) -> None:
    model = ScriptedModel([call_tool("write_file", path="a"), say("done")])
    agent = gated(model)
    state = await interrupted(agent)
    with pytest.raises(error):
        await agent.resume(state, [{"type": "approve"}], **options, unbound=True)
    assert executed == [] and model.calls == 1


async def test_a_handle_resume_that_returns_something_else_is_a_type_error() -> None:
    class Wrong(Middleware):
        async def handle_resume(self, agent: Agent, state: AgentState, answer: Any) -> Any:
            return True

    agent = Agent(ScriptedModel([]), [add], middleware=[Wrong()])
    with pytest.raises(TypeError, match=r"Wrong\.handle_resume returned bool"):
        await agent.resume(AgentState.of("go").interrupt({"type": "x"}), "yes")


async def test_an_interrupt_no_tool_and_no_middleware_owns_is_refused_even_with_hitl() -> None:
    model = ScriptedModel([say("done")])
    agent = Agent(model, [write_file], middleware=[HumanInTheLoop({"write_file": True})])
    state = (await agent.execute(AgentState.of("go"))).interrupt({"type": "custom"})
    with pytest.raises(ValueError, match=r"No middleware handled .* \(type 'custom'\)"):
        await agent.resume(state, "because")
    assert model.calls == 1


async def test_the_base_class_hooks_do_nothing() -> None:
    model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    agent = Agent(model, [add], middleware=[Middleware()])
    run = agent.start(AgentState.of("go"))
    await run.run()
    assert_path(run, f"{LOOP} {LOOP} ok")
    assert run.agent_state.messages[-1].text == "3"
    interrupted_state = run.agent_state.interrupt({"type": "custom"})
    with pytest.raises(ValueError, match=r"resume \(\['Middleware'\]\)"):
        await agent.resume(interrupted_state, "anything")
    assert model.calls == 2


# ---------------------------------------------------------------- hooks run again on resume


async def test_before_model_runs_again_on_resume() -> None:
    calls: list[str] = []

    class Count(Middleware):
        def before_model(self, state: AgentState) -> AgentState:
            calls.append("before")
            return AgentState(
                state.messages, {**state.state, "before": state.state.get("before", 0) + 1}
            )

        def after_model(self, state: AgentState) -> AgentState:
            calls.append("after")
            return state

    model = ScriptedModel([call_tool("write_file", path="a"), say("written")])
    agent = gated(model, Count())
    state = await interrupted(agent)
    assert calls == ["before"]  # an interrupted run does not reach after_model
    run = await agent.start_resume(state, [{"type": "approve"}], unbound=True)
    assert calls == ["before", "before"] and executed == []
    await run.run()
    assert_path(run, f"interrupt_check executing propagating until_check deciding {LOOP} ok")
    assert executed == ["a"]
    assert calls == ["before", "before"]  # after_model runs when the state is read
    assert run.agent_state.state == {"before": 2} and calls[-1] == "after"
    assert model.calls == 2


async def test_a_before_model_error_on_resume_runs_nothing() -> None:
    class Refuse(Middleware):
        def __init__(self) -> None:
            self.armed = False

        def before_model(self, state: AgentState) -> AgentState:
            if self.armed:
                raise ChainError("refused", "not now")
            self.armed = True
            return state

    model = ScriptedModel([call_tool("write_file", path="a"), say("written")])
    agent = gated(model, Refuse())
    state = await agent.resume(await interrupted(agent), [{"type": "approve"}], unbound=True)
    assert (state.status, state.error and state.error.type) == ("error", "refused")
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert executed == [] and model.calls == 1


# ---------------------------------------------------------------- on_error


async def test_on_error_fires_once_when_an_agent_run_fails() -> None:
    recorder = Recorder()
    model = ScriptedModel([fail("bad_request", "no")])
    agent = Agent(model, [add], callbacks=[recorder.handlers()])
    run = agent.start(AgentState.of("go"))
    await run.run()
    assert_path(run, "expanding calling error")
    assert recorder.fired == [("on_error", "bad_request")]
    assert run.agent_state.error is not None and run.agent_state.error.type == "bad_request"
    assert recorder.fired == [("on_error", "bad_request")] and model.calls == 1


async def test_on_error_sees_the_runs_own_error_for_exceeded_max_runs() -> None:
    recorder = Recorder()
    model = ScriptedModel(lambda _: call_tool("add", a=1, b=1))
    agent = Agent(model, [add], callbacks=[recorder.handlers()], max_runs=2)
    run = agent.start(AgentState.of("go"))
    await run.run()
    assert_path(run, f"{LOOP} {LOOP} error")
    assert recorder.fired == [
        ("on_tool_execution_started", "add"),
        ("on_tool_execution_started", "add"),
        ("on_error", "exceeded_max_runs"),
    ]
    assert run.agent_state.error is not None
    assert run.agent_state.error.message == MAX_RUNS_MESSAGE and model.calls == 2


async def test_on_error_does_not_fire_for_runs_that_do_not_fail() -> None:
    recorder = Recorder()
    model = ScriptedModel([call_tool("write_file", path="a"), say("written")])
    agent = gated(model, callbacks=[recorder.handlers()])
    state = await agent.resume(await interrupted(agent), [{"type": "approve"}], unbound=True)
    assert state.status == "ok"
    assert recorder.fired == [("on_tool_execution_started", "write_file")]


async def test_a_resumed_run_that_fails_fires_on_error_once() -> None:
    recorder = Recorder()
    model = ScriptedModel([call_tool("write_file", path="a"), fail("server_error")])
    agent = gated(model, callbacks=[recorder.handlers()])
    run = await agent.start_resume(await interrupted(agent), [{"type": "approve"}], unbound=True)
    await run.run()
    assert_path(
        run, "interrupt_check executing propagating until_check deciding expanding calling error"
    )
    assert recorder.fired == [
        ("on_tool_execution_started", "write_file"),
        ("on_error", "server_error"),
    ]


async def test_a_hooks_error_is_the_states_and_fires_no_on_error() -> None:
    class Late(Middleware):
        def after_model(self, state: AgentState) -> AgentState:
            raise ChainError("late", "after the run")

    recorder = Recorder()
    model = ScriptedModel([say("hi")])
    run = Agent(model, [add], middleware=[Late()], callbacks=[recorder.handlers()]).start(
        AgentState.of("go")
    )
    await run.run()
    assert_path(run, f"{LOOP} ok")
    assert run.agent_state.error is not None and run.agent_state.error.type == "late"
    assert recorder.fired == [] and model.calls == 1


async def test_a_raising_on_error_handler_becomes_the_runs_error() -> None:
    recorder = Recorder(raising=True)
    model = ScriptedModel([fail("bad_request")])
    state = await Agent(model, [add], callbacks=[recorder.handlers()]).execute(AgentState.of("go"))
    assert state.error is not None and state.error.type == "callback_error"
    assert "on_error" in state.error.message
    assert recorder.fired == [("on_error", "bad_request")]


def test_the_store_keeps_the_error_a_raising_on_error_left(tmp_path: Path) -> None:
    recorder = Recorder(raising=True)
    agent = Agent(ScriptedModel([fail("bad_request")]), [add], callbacks=[recorder.handlers()])
    with SQLiteStore(tmp_path / "runs.db") as store:
        start_run(agent, AgentState.of("go"), store, run_id="f").run_sync()
        saved = load_run(store, "f", strict=False)
    assert saved.status == "error" and recorder.fired == [("on_error", "bad_request")]
    assert saved.agent_state is not None and saved.agent_state.error is not None
    assert saved.agent_state.error.type == "callback_error"


# ---------------------------------------------------------------- an empty conversation


async def test_an_empty_conversation_is_an_error_without_a_model_call() -> None:
    recorder = Recorder()
    model = ScriptedModel([say("never")])
    agent = Agent(model, [add], callbacks=[recorder.handlers()])
    state = await agent.execute(AgentState())
    assert state.status == "error" and state.error is not None
    assert state.error.type == "no_messages" and "AgentState.of(prompt)" in state.error.message
    assert model.calls == 0 and recorder.fired == [("on_error", "no_messages")]
    with pytest.raises(ChainError) as info:
        agent.start(AgentState())
    assert info.value.type == "no_messages" and model.calls == 0


async def test_a_system_prompt_alone_is_a_conversation() -> None:
    model = ScriptedModel([say("hello")])
    run = Agent(model, [add], system_prompt="Greet the user.").start(AgentState())
    await run.run()
    assert_path(run, f"{LOOP} ok")
    assert model.requests[0].messages == (Message.system("Greet the user."),)
    assert [m.text for m in run.agent_state.messages] == ["hello"]


# ---------------------------------------------------------------- a tool that asks the user


def asking() -> ScriptedModel:
    return ScriptedModel([call_tool("ask_user", question="Which database?"), say("Postgres it is")])


async def test_an_ask_user_interrupt_resumes_through_its_middleware() -> None:
    model = asking()
    agent = Agent(
        model, [ask_user, write_file], middleware=[HumanInTheLoop({"write_file": True}), AskUser()]
    )
    first = agent.start(AgentState.of("set up the project"))
    await first.run()
    assert_path(first, "expanding calling interrupt_check executing propagating interrupted")
    state = first.agent_state
    assert state.interrupt_data is not None
    assert state.interrupt_data["question"] == "Which database?"

    with pytest.raises(ValueError, match="answer is the user's reply as text"):
        await agent.resume(state, [{"type": "approve"}], unbound=True)
    assert model.calls == 1

    run = await agent.start_resume(state, "PostgreSQL")
    assert run.state == "propagating"
    await run.run()
    assert_path(run, f"propagating until_check deciding {LOOP} ok")
    (answer,) = model.requests[1].messages[-1].tool_results
    assert (answer.content, answer.is_interrupt) == ("The user answered: PostgreSQL", False)
    done = run.agent_state
    assert (done.status, done.interrupt_data, done.messages[-1].text) == (
        "ok",
        None,
        "Postgres it is",
    )
    assert model.calls == 2 and executed == []


def test_a_saved_ask_user_run_resumes_with_its_answer(tmp_path: Path) -> None:
    def agent() -> Agent:
        return Agent(asking(), [ask_user], middleware=[AskUser()])

    with SQLiteStore(tmp_path / "runs.db") as store:
        start_run(agent(), AgentState.of("go"), store, run_id="q").run_sync()
        with pytest.raises(ResumeError, match="resume it with an answer"):
            agent().resume_run_sync("q", store)
        model = ScriptedModel([say("Postgres it is")])  # another process, its own model
        resumer = Agent(model, [ask_user], middleware=[AskUser()])
        state = resumer.resume_run_sync("q", store, "PostgreSQL")
        saved = load_run(store, "q", strict=False)
    assert state.status == "ok" and state.messages[-1].text == "Postgres it is"
    assert [t.entry for t in saved.traces] == ["expanding", "propagating"]
    assert saved.traces[1].path == f"propagating until_check deciding {LOOP} ok"
    assert model.requests[0].messages[-1].tool_results[0].text == "The user answered: PostgreSQL"


def test_the_ask_user_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    asyncio.run(EXAMPLE["main"]())
    assert capsys.readouterr().out.splitlines() == [
        "the agent asks: 'Which database should the project use?' (at propagating)",
        "ok: 'Setting the project up with PostgreSQL.'",
    ]


async def test_a_tools_own_interrupt_is_answered_at_propagating_with_no_middleware() -> None:
    model = asking()
    agent = Agent(model, [ask_user])
    first = agent.start(AgentState.of("set up the project"))
    await first.run()
    assert first.agent_state.interrupted_at == "propagating"
    with pytest.raises(ValueError, match="becomes its result: give text"):
        await agent.resume(first.agent_state, [{"type": "approve"}], unbound=True)
    run = await agent.start_resume(first.agent_state, "PostgreSQL")
    await run.run()
    assert_path(run, f"propagating until_check deciding {LOOP} ok")
    (answer,) = model.requests[1].messages[-1].tool_results
    assert (answer.content, answer.is_interrupt) == ("PostgreSQL", False)
    assert (answer.tool_call_id, answer.name) == ("call_1", "ask_user")  # it answers its call
    assert "answer" not in run.chain.custom_context


def test_a_saved_tool_interrupt_is_answered_in_a_new_segment_at_propagating(
    tmp_path: Path,
) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        start_run(Agent(asking(), [ask_user]), AgentState.of("go"), store, run_id="q").run_sync()
        model = ScriptedModel([say("Postgres it is")])
        state = Agent(model, [ask_user]).resume_run_sync("q", store, "PostgreSQL")
        saved = load_run(store, "q", strict=False)
    assert state.status == "ok"
    assert [t.entry for t in saved.traces] == ["expanding", "propagating"]
    assert model.requests[0].messages[-1].tool_results[0].text == "PostgreSQL"


def test_replace_tool_result_needs_the_call() -> None:
    state = AgentState.of("go")
    with pytest.raises(ValueError, match="No tool result for call 'x'"):
        state.replace_tool_result(ToolResult("x", "ask_user", "answer"))


async def test_an_approved_question_interrupts_again_and_its_middleware_answers_it() -> None:
    """Sagents' secondary interrupt: an approved tool that asks goes to the asking middleware."""
    model = asking()
    agent = Agent(model, [ask_user], middleware=[HumanInTheLoop({"ask_user": True}), AskUser()])
    approval = await interrupted(agent)
    assert approval.interrupt_data is not None and approval.interrupt_data["type"] == "hitl"
    asked = await agent.start_resume(approval, [{"type": "approve"}], unbound=True)
    await asked.run()
    assert_path(asked, "interrupt_check executing propagating interrupted")
    question = asked.agent_state
    assert question.interrupt_data is not None and question.interrupt_data["type"] == "ask_user"
    answered = await agent.start_resume(question, "PostgreSQL")
    await answered.run()
    assert_path(answered, f"propagating until_check deciding {LOOP} ok")
    assert answered.agent_state.messages[-1].text == "Postgres it is" and model.calls == 2
