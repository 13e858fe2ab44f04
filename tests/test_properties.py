"""Invariants over random model behaviour: every run ends, once, on a path of the table."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    Failed,
    HumanInTheLoop,
    Interrupted,
    Message,
    MessageExpansion,
    Ok,
    Paused,
    ToolCall,
    ToolOutput,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, call_tools, fail, say
from tests.support import add, boom, submit


@tool
def ask() -> ToolOutput:
    """Interrupts."""
    return ToolOutput("?", interrupt={"q": 1})


@tool
def show() -> object:
    """Expands."""
    return MessageExpansion.expand("fb", [Message.user("shown")])


@tool
def gated() -> str:
    """Needs approval."""
    return "gated ran"


REPLIES = st.sampled_from(
    [
        lambda: say("text"),
        lambda: call_tool("add", a=1, b=2),
        lambda: call_tool("boom"),
        lambda: call_tool("nope"),
        lambda: call_tool("submit", answer="bad"),
        lambda: call_tool("submit", answer="ok"),
        lambda: call_tool("ask"),
        lambda: call_tool("show"),
        lambda: call_tool("gated"),
        lambda: call_tools(("add", {"a": 1, "b": 1}), ("gated", {})),
        lambda: Message.assistant(None, [ToolCall("bad", "add", {}, invalid_arguments="{")]),
        lambda: say("cut", status="length"),
        lambda: fail("rate_limited", "slow"),
        lambda: fail("bad_request", "no"),
    ]
)

TERMINAL_OF = {Ok: "ok", Paused: "paused", Interrupted: "interrupted", Failed: "error"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(REPLIES, min_size=0, max_size=12),
    max_runs=st.integers(1, 6),
    until=st.sampled_from([None, "until_tool", "until_tool_success"]),
    hitl=st.booleans(),
    pauses=st.lists(st.booleans(), max_size=8),
)
def test_every_run_ends_once_on_a_path_of_the_table(
    script: list[Any], max_runs: int, until: str | None, hitl: bool, pauses: list[bool]
) -> None:
    model = ScriptedModel([make() for make in script])
    middleware = [HumanInTheLoop({"gated": True})] if hitl else []
    agent = Agent(model, [add, boom, submit, ask, show, gated], middleware=middleware)
    answers = iter(pauses)
    options: dict[str, Any] = {"max_runs": max_runs, "should_pause": lambda: next(answers, False)}
    if until:
        options[until] = "submit"
    run = agent.start(AgentState.of("go"), **options)
    for _ in range(7 * max_runs + 8):
        if run.done:
            break
        run.step_sync()
    assert run.done, "a run must end within max_runs loops"
    states, triggers = run.trace.states, run.trace.triggers
    assert STANDARD.is_path(states, triggers)
    terminals = [s for s in states if s in STANDARD.terminals]
    assert terminals == [states[-1]] == [TERMINAL_OF[type(run.result)]]
    assert model.calls <= max_runs
    assert run.agent_state.status == {"error": "error"}.get(states[-1], states[-1])
    # Every tool message answers the calls of the assistant message before it, in order.
    messages = run.chain.messages
    for before, message in itertools.pairwise(messages):
        if message.role == "tool":
            assert [r.tool_call_id for r in message.tool_results] == [
                c.call_id for c in before.tool_calls
            ]
