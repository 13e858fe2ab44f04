"""What the user passes in: a wrong option is named before anything runs; slow callbacks."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import pytest

from agentfsm import Agent, AgentState, HumanInTheLoop, LLMChain, Message, Options, off_loop
from agentfsm.providers import ScriptedModel, call_tool, say
from tests.support import add

MODEL = ScriptedModel([say("x")])

BAD_AGENTS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"model": None}, TypeError, "model must be a ChatModel"),
    ({"model": "gpt-4o"}, TypeError, "model must be a ChatModel"),
    ({"tools": [print]}, TypeError, "tools[0] must be a Tool, got <built-in function print>"),
    ({"tools": add}, TypeError, "tools must be a list of tools, got the single tool 'add'"),
    ({"tools": [add, add]}, ValueError, "Tool names must be unique"),
    ({"max_runs": "x"}, ValueError, "max_runs must be a positive integer, got: 'x'"),
    ({"max_runs": 0}, ValueError, "max_runs must be a positive integer, got: 0"),
    ({"middleware": HumanInTheLoop({})}, TypeError, "middleware must be a list"),
    ({"system_prompt": 42}, TypeError, "system_prompt must be str (or None), got 42"),
    ({"callbacks": [{"on_lm_error": print}]}, ValueError, "unknown callback name(s)"),
    ({"callbacks": [{"on_llm_error": "log"}]}, TypeError, "['on_llm_error'] must be callable"),
    ({"callbacks": {"on_llm_error": print}}, TypeError, "callbacks must be a list"),
]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"), BAD_AGENTS, ids=[m for _, _, m in BAD_AGENTS]
)
def test_a_bad_agent_argument_is_named_at_construction(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    arguments: dict[str, Any] = {"model": MODEL, **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        Agent(**arguments)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"should_pause": "yes"}, "should_pause must be callable (or None), got 'yes'"),
        ({"should_pause": True}, "should_pause must be callable"),
        ({"max_runs": "3"}, "max_runs must be a positive integer"),
    ],
)
def test_a_bad_run_option_is_named_before_the_model_is_called(
    options: dict[str, Any], message: str
) -> None:
    model = ScriptedModel([say("x")])
    agent = Agent(model, [add])
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        agent.start(AgentState.of("go"), **options)
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        agent.execute_sync(AgentState.of("go"), **options)
    assert model.calls == 0


def test_the_modes_own_options_refuse_a_should_pause_that_is_not_callable() -> None:
    model = ScriptedModel([say("x")])
    chain = LLMChain(model).add_message(Message.user("go"))
    with pytest.raises(TypeError, match=r"should_pause must be callable \(or None\), got 'yes'"):
        chain.run_sync("standard", should_pause="yes")
    assert model.calls == 0


# ---------------------------------------------------------------- slow callbacks


def _agent(callbacks: list[Any], n: int) -> Agent:
    script = [call_tool("add", a=i, b=1) for i in range(n)] + [say("done")]
    return Agent(ScriptedModel(script), [add], callbacks=callbacks)


async def test_slow_callbacks_off_the_loop_do_not_stall_other_runs() -> None:
    seen: list[str] = []
    release = threading.Event()

    def slow(chain: LLMChain, message: Message) -> None:
        release.wait(10)  # a network call that takes as long as the runs, say
        seen.append(message.role)

    handlers = off_loop({"on_llm_new_message": slow})
    slow_run = _agent([handlers], 4).start(AgentState.of("go"))
    other = _agent([], 4).start(AgentState.of("go"))
    await asyncio.gather(slow_run.run(), other.run())
    # Both runs ended while the handler was still blocked on its first event: on the
    # loop, the first run could not have gone past its first reply.
    assert slow_run.done and other.done and seen == []
    release.set()
    await asyncio.to_thread(handlers.flush)
    assert seen == ["assistant"] * 5  # every event, in order
    handlers.close()


def test_a_stalled_off_loop_handler_holds_at_most_max_pending_events() -> None:
    release = threading.Event()
    handled: list[int] = []

    def stuck(chain: LLMChain, message: Message) -> None:
        release.wait(5)
        handled.append(1)

    handlers = off_loop({"on_llm_new_message": stuck}, max_pending=2)
    state = _agent([handlers], 6).execute_sync(AgentState.of("go"))
    assert state.status == "ok"
    release.set()
    handlers.close()
    assert handlers.dropped == 7 - len(handled) and 2 <= len(handled) <= 3


def test_an_off_loop_handler_that_raises_is_kept_not_fatal() -> None:
    def broken(chain: LLMChain, message: Message) -> None:
        raise RuntimeError("log server down")

    handlers = off_loop({"on_llm_new_message": broken})
    assert _agent([handlers], 1).execute_sync(AgentState.of("go")).status == "ok"
    handlers.close()
    assert [(name, str(exc)) for name, exc in handlers.errors] == [
        ("on_llm_new_message", "log server down")
    ] * 2


# ---------------------------------------------------------------- typed options


def test_each_option_has_one_default_its_class() -> None:
    from agentfsm import LangChainOptions, Options, StandardOptions

    assert Options().max_runs == 25
    assert LangChainOptions().max_runs == 25
    assert StandardOptions().max_runs == 50
    assert Agent(MODEL).options().max_runs == 50
    assert Agent(MODEL, max_runs=7).options().max_runs == 7
    assert Agent(MODEL, max_runs=7).options(max_runs=3).max_runs == 3


def test_options_are_checked_once_and_refused_by_name() -> None:
    from agentfsm import Options, StandardOptions

    with pytest.raises(ValueError, match=re.escape("Unknown option(s) ['drafts']. Options: [")):
        StandardOptions.of({"drafts": 3})
    with pytest.raises(ValueError, match="max_runs must be a positive integer, got: 0"):
        Options.of({"max_runs": 0})
    with pytest.raises(ValueError, match="token_budget must be a positive integer or None"):
        Options(token_budget=-1)
    with pytest.raises(ValueError, match="Invalid until_tool option: expected string or list"):
        StandardOptions.of(until_tool=3)
    checked = StandardOptions.of(until_tool="submit", max_runs=4)
    assert checked.tool_names == ("submit",) and checked.until_tool == ("submit",)
    assert StandardOptions.of(checked) is checked  # options of the class pass as they are
    assert checked.saved() == {
        "until_tool": ["submit"],
        "require_tool_success": False,
        "max_runs": 4,
    }


def test_a_machines_own_options_read_as_a_mapping_and_as_attributes() -> None:
    from agentfsm import Options, Run

    seen: list[Any] = []

    def read(result: Any, opts: Any) -> Any:
        seen.append(
            (opts["drafts"], opts.get("missing", "none"), opts.max_runs, dict(opts)["drafts"])
        )
        return result

    from tests.test_user_machines import EDITOR  # a user's machine with a 'drafts' option

    chain = LLMChain(ScriptedModel([say("draft")])).add_message(Message.user("go"))
    run = Run(EDITOR, chain, "drafting", {"drafts": 1}, extra_steps={"drafting": [read]})
    assert isinstance(run.opts, Options) and run.opts.extra == {"drafts": 1}
    run.step_sync()
    assert seen == [(1, "none", 25, 1)]


def test_token_budget_and_pause_reason_live_in_the_run() -> None:
    agent = Agent(ScriptedModel([say("x")]), [add], token_budget=90)
    run = agent.start(AgentState.of("go"))
    assert run.opts.token_budget == run.token_budget == 90
    assert agent.start(AgentState.of("go"), token_budget=5).token_budget == 5

    run = Agent(ScriptedModel([say("x")])).start(
        AgentState.of("go"), should_pause=lambda: "draining"
    )
    run.run_sync()
    assert run.pause_reason == "draining"
    assert run.agent_state.pause_reason == "draining"
    assert run.chain.custom_context["pause_reason"] == "draining"  # the seed's shape, kept


def test_an_option_a_letter_off_a_declared_one_is_refused_even_by_an_open_class() -> None:
    """``max_run`` is a typo of ``max_runs``, never a machine's own option kept in extra."""
    with pytest.raises(ValueError) as info:
        Options.of(max_run=3)
    assert str(info.value).endswith("(did you mean 'max_runs' for 'max_run'?)")
    assert Options.of(drafts=3).extra == {"drafts": 3}  # a name of its own is kept


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"until_tool": "add", "until_tool_success": "add"}, "Cannot pass both until_tool"),
        ({"until_tool": 3}, "Invalid until_tool option: expected string or list, got: 3"),
        ({"until_tool_success": ["nope"]}, re.escape("until_tool_success: tool(s) ['nope']")),
    ],
)
def test_every_spelling_of_the_until_tool_target_is_refused_alike(
    given: dict[str, Any], said: str
) -> None:
    """Agent.start and the mode's own tool_names share one check of the target."""
    from agentfsm._modes.langchain import UntilToolUsed

    agent = Agent(ScriptedModel([]), tools=[add])
    with pytest.raises(ValueError, match=said):
        agent.start("hi", **given)
    if "until_tool" in given and "until_tool_success" not in given:
        with pytest.raises(ValueError, match="Invalid until_tool option"):
            UntilToolUsed(given["until_tool"]).start(LLMChain(ScriptedModel([])))
    assert agent.options(until_tool_success="add").require_tool_success
    assert agent.options(until_tool=("add",)).until_tool == ("add",)
