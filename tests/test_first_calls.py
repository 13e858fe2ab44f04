"""The first calls a newcomer types: a plain prompt, a list of messages, and a clear error
for anything else, before any model call."""

from __future__ import annotations

import pytest

from agentfsm import Agent, AgentState, Message, tool
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.testing import assert_path


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_a_plain_prompt_is_a_new_conversation() -> None:
    model = ScriptedModel([call_tool("add", a=1, b=2), say("3")])
    state = Agent(model, [add]).execute_sync("What is 1+2?")
    assert state.status == "ok" and state.messages[0] == Message.user("What is 1+2?")
    assert [m.role for m in state.messages] == ["user", "assistant", "tool", "assistant"]
    assert model.requests[0].messages == (Message.user("What is 1+2?"),)


async def test_a_list_of_messages_is_the_conversation_so_far() -> None:
    model = ScriptedModel([say("Paris")])
    so_far = [Message.user("Hi"), Message.assistant("Hello!"), Message.user("Capital of France?")]
    run = Agent(model).start(so_far)
    await run.run()
    assert_path(
        run, "expanding calling interrupt_check executing propagating until_check deciding ok"
    )
    assert model.requests[0].messages == tuple(so_far)


@pytest.mark.parametrize("given", [123, None, [Message.user("a"), "b"], {"prompt": "x"}])
def test_anything_else_is_one_line_naming_what_is_taken(given: object) -> None:
    model = ScriptedModel([say("never")])
    with pytest.raises(TypeError) as info:
        Agent(model).execute_sync(given)  # type: ignore[arg-type]
    message = str(info.value)
    assert message == (
        "An agent runs on an AgentState, a prompt (str) or a list of Messages; "
        f"got {type(given).__name__}"
    )
    assert "\n" not in message and model.calls == 0


def test_agent_state_of_takes_text_only() -> None:
    with pytest.raises(
        TypeError, match=r"^AgentState.of takes the user's prompt as text, got int$"
    ):
        AgentState.of(123)  # type: ignore[arg-type]


async def test_the_failure_budget_is_an_agent_option_and_its_number_is_in_the_error() -> None:
    @tool
    def boom() -> str:
        """Fail."""
        raise RuntimeError("no")

    model = ScriptedModel(lambda messages: call_tool("boom"))
    state = await Agent(model, [boom], max_retry_count=2).execute("Try it")
    assert state.status == "error" and state.error is not None
    assert (state.error.type, state.error.message) == (
        "exceeded_failure_count",
        "Exceeded max failure count (2 tool turns with an error in a row; max_retry_count "
        "is 2: raise it, Agent(max_retry_count=...), to allow more)",
    )
    assert model.calls == 2
    with pytest.raises(ValueError, match="max_retry_count must be at least 1, got 0"):
        Agent(model, [boom], max_retry_count=0)


def test_help_on_agent_names_the_machine_instead_of_printing_it() -> None:
    import pydoc

    from agentfsm import STANDARD

    assert repr(STANDARD) == "<MachineTable standard v1: 7 working states, 25 edges>"
    text = pydoc.render_doc(Agent)
    assert "machine: 'MachineTable' = <MachineTable standard v1" in text
    assert len(text) < 20_000


def test_the_quickstart_example_prints_what_a_person_reads() -> None:
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == [
        "     user: What is 2 + 40?",
        "assistant: call add(a=2, b=40)",
        "     tool: add -> 42",
        "assistant: 2 + 40 = 42",
    ]
