"""The failure table row by row: the exact path each fault takes, and what the chain keeps.

``tests/test_reliability.py`` lists the cases of docs/failures.md (``CASES``) and checks
that each ends in its terminal; here each case's whole path through the standard machine,
its triggers, the conversation the run ends with and the model calls it made are pinned,
so a change of any row's behaviour (a fourth tool failure allowed, an over-budget reply's
tools run, an error raised from another state) fails a test.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentfsm import Agent, AgentState, HumanInTheLoop, LLMChain, Message
from agentfsm._modes.standard import StandardMode
from agentfsm.providers import ScriptedModel, call_tool, say
from tests.providers.fake_server import FakeServer
from tests.support import LOOP, add, texts
from tests.test_reliability import (
    CASES,
    GATED_RUNS,
    Case,
    boom,
    gated,
    hangs,
    hangs_sync,
    opaque,
    order,
    submit,
)

#: The triggers of one loop of the standard machine, from ``expanding`` back to it.
LOOP_TRIGGERS = ["expanded", "called", "clear", "executed", "propagated", "unsatisfied", "loop"]


@attrs.frozen
class Expected:
    """A case's run: its path, its triggers, the conversation and the model calls."""

    path: str
    triggers: list[str]
    #: ``(role, text)`` of every message (``tests.support.texts``); a tool result's text
    #: is matched by its start (``Case.tool_text``), ``...`` marks where.
    messages: list[tuple[str, str]]
    #: Model requests made (the scripted model's calls, or the loopback server's requests).
    calls: int
    #: What the ``executing`` steps recorded: ``(tools, errors)`` per visit.
    executed: list[tuple[list[str], int]] = attrs.field(factory=list)


def _recovered(tool: str) -> Expected:
    """A tool fault the model reads: one loop with the error result, then the answer."""
    return Expected(
        path=f"{LOOP} {LOOP} ok",
        triggers=[*LOOP_TRIGGERS, *LOOP_TRIGGERS[:-1], "done"],
        messages=[
            ("user", "go"),
            ("assistant", f"calls:{tool}"),
            ("tool", "..."),
            ("assistant", "recovered"),
        ],
        calls=2,
        executed=[([tool], 1), ([], 0)],
    )


def _model_failed(messages: list[tuple[str, str]] | None = None, calls: int = 1) -> Expected:
    """A model call that fails: the run ends in the calling state, nothing else runs."""
    return Expected(
        path="expanding calling error",
        triggers=["expanded", "failed"],
        messages=messages if messages is not None else [("user", "go")],
        calls=calls,
    )


EXPECTED: dict[str, Expected] = {
    "malformed tool-call JSON": _recovered("add"),
    "arguments that break the schema": _recovered("add"),
    "unknown tool": _recovered("nope"),
    "tool raising": _recovered("boom"),
    "tool hanging past its timeout": _recovered("hangs"),
    "nested tool arguments of the wrong type": _recovered("order"),
    "deeply nested tool-call JSON": _recovered("add"),
    "a sync tool hanging past its timeout": _recovered("hangs_sync"),
    "a tool returning a value with no JSON form": _recovered("opaque"),
    # The empty or cut-off reply is kept; its (absent) tools never run.
    "model returning an empty message": _model_failed([("user", "go"), ("assistant", "")]),
    "reply cut off at the token limit": _model_failed([("user", "go"), ("assistant", "half")]),
    "model error on every fallback": _model_failed(calls=2),
    "provider 401": _model_failed(),
    "provider 429": _model_failed(),
    "provider 500": _model_failed(),
    "provider timeout": _model_failed(),
    "a provider bug (any exception)": _model_failed(),
    "the model never calls the until tool": Expected(
        path=f"{LOOP} error",
        triggers=[*LOOP_TRIGGERS[:-1], "failed"],
        messages=[("user", "go"), ("assistant", "done")],
        calls=1,
        executed=[([], 0)],
    ),
    "the model loops past max_runs": Expected(
        path=f"{LOOP} {LOOP} error",
        triggers=[*LOOP_TRIGGERS, *LOOP_TRIGGERS[:-1], "failed"],
        messages=[("user", "go"), *[("assistant", "calls:add"), ("tool", "2")] * 2],
        calls=2,
        executed=[(["add"], 0), (["add"], 0)],
    ),
    # Three failed turns, then the failure budget ends the run before a fourth model call.
    "three tool failures in a row": Expected(
        path=f"{LOOP} {LOOP} {LOOP} expanding calling error",
        triggers=[*LOOP_TRIGGERS * 3, "expanded", "failed"],
        messages=[
            ("user", "go"),
            *[("assistant", "calls:boom"), ("tool", "ERROR: RuntimeError: kaput")] * 3,
        ],
        calls=3,
        executed=[(["boom"], 1)] * 3,
    ),
    "a provider error echoing the API key": _model_failed(),
    "an event-stream line that never ends": _model_failed(),
    "a reply larger than max_response_bytes": _model_failed(),
    "a stream that never ends": _model_failed(),
    "an HTML page where an event stream was expected": _model_failed(),
    # The second reply takes the run past its budget: it is kept, its call never runs.
    "the run passes its token budget": Expected(
        path=f"{LOOP} expanding calling error",
        triggers=[*LOOP_TRIGGERS, "expanded", "failed"],
        messages=[
            ("user", "go"),
            ("assistant", "calls:add"),
            ("tool", "3"),
            ("assistant", "calls:add"),
        ],
        calls=2,
        executed=[(["add"], 0)],
    ),
    "a call that needs approval": Expected(
        path="expanding calling interrupt_check interrupted",
        triggers=["expanded", "called", "interrupted"],
        messages=[("user", "go"), ("assistant", "calls:gated")],
        calls=1,
    ),
}


def test_every_case_of_the_table_has_its_path() -> None:
    assert sorted(EXPECTED) == sorted(c.name for c in CASES)


def _calls(model: Any, server: FakeServer) -> int:
    if isinstance(model, ScriptedModel):
        return model.calls
    models = getattr(model, "models", None)
    if models is not None:  # a FallbackModel: each model tried once
        return sum(m.calls for m in models)
    return len(server.requests)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_fault_takes_its_exact_path(case: Case) -> None:
    expected = EXPECTED[case.name]
    server = FakeServer()
    model = case.model(server)
    agent = Agent(
        model,
        [add, boom, submit, hangs, gated, hangs_sync, order, opaque],
        middleware=[HumanInTheLoop({"gated": True})],
    )
    gated_before = len(GATED_RUNS)
    run = agent.start(AgentState.of("go"), **case.options)
    try:
        await run.run()
    finally:
        server.close()
        if hasattr(model, "aclose"):
            await model.aclose()
    assert run.trace.path == expected.path
    assert run.trace.triggers == expected.triggers
    seen = texts(run.chain)
    assert [role for role, _ in seen] == [role for role, _ in expected.messages]
    for (_, text), (_, want) in zip(seen, expected.messages, strict=True):
        if want == "...":
            assert case.tool_text is not None and text.startswith(case.tool_text), text
        else:
            assert text == want
    assert _calls(model, server) == expected.calls
    executed = [
        (t.detail["tools"], t.detail["errors"]) if t.detail else ([], 0)
        for t in run.trace.where("executing")
    ]
    assert executed == expected.executed
    assert len(GATED_RUNS) == gated_before  # nothing gated ever runs unapproved
    state = run.agent_state
    assert state.status == case.terminal
    if case.error_type is not None:
        assert state.error is not None and state.error.type == case.error_type


async def test_the_failure_budget_counts_three_failed_turns_not_four() -> None:
    """The third failed turn in a row spends the budget; a success in between resets it."""
    script = [call_tool("boom"), call_tool("boom"), call_tool("add", a=1, b=1)]
    script += [call_tool("boom"), call_tool("boom"), say("fine")]
    model = ScriptedModel(script)
    run = Agent(model, [add, boom]).start(AgentState.of("go"))
    await run.run()
    assert run.agent_state.status == "ok" and model.calls == 6
    counts = [t.chain.current_failure_count for t in run.trace.where("executing")]
    assert counts == [1, 2, 0, 1, 2, 0]


async def test_a_text_reply_resets_the_failure_count() -> None:
    """A reply without tool calls means the model moved on: earlier failures are forgiven."""
    chain = LLMChain(ScriptedModel([say("ok then")]), tools=[boom]).add_message(Message.user("go"))
    chain = chain.add_message(Message.assistant("thinking"), current_failure_count=2)
    chain = chain.add_message(Message.user("go on"))
    run = StandardMode().start(chain)
    await run.run()
    assert run.trace.where("expanding")[0].chain.current_failure_count == 2
    assert run.trace.where("calling")[0].chain.current_failure_count == 0
    assert run.chain.current_failure_count == 0


async def test_a_tool_call_reply_keeps_the_failure_count() -> None:
    model = ScriptedModel([call_tool("boom"), say("done")])
    chain = LLMChain(model, tools=[boom]).add_message(Message.user("go"))
    chain = chain.add_message(Message.assistant("thinking"), current_failure_count=1)
    chain = chain.add_message(Message.user("go on"))
    run = StandardMode().start(chain)
    await run.run()
    first_call, second_call = run.trace.where("calling")
    assert first_call.chain.current_failure_count == 1  # a reply asking for tools keeps it
    assert run.trace.where("executing")[0].chain.current_failure_count == 2
    assert second_call.chain.current_failure_count == 0  # then the answer resets it
