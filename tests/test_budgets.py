"""The token budget over many model calls: every call's tokens count, once, in order.

A budget that only ever sees two calls cannot tell a sum from the last two terms,
so each test here runs three or more.
"""

from __future__ import annotations

from typing import Any

import attrs

from agentfsm import Agent, AgentState, Message, tool
from agentfsm.providers import ScriptedModel, call_tool, say
from tests.support import LOOP

RAN: list[int] = []


@tool
def note(n: int) -> str:
    """Write a note down."""
    RAN.append(n)
    return f"noted {n}"


def _costing(reply: Message, input_tokens: int = 30, output_tokens: int = 10) -> Message:
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return attrs.evolve(reply, metadata={**reply.metadata, "usage": usage})


def _notes(count: int, then: Message | None = None) -> ScriptedModel:
    """``count`` replies asking for ``note(i)``, each costing 40 tokens, then ``then``."""
    script = [_costing(call_tool("note", n=i)) for i in range(count)]
    return ScriptedModel([*script, *([then] if then is not None else [])])


async def _run(model: ScriptedModel, **options: Any) -> Any:
    RAN.clear()
    run = Agent(model, [note]).start(AgentState.of("go"), **options)
    await run.run()
    return run


async def test_the_budget_sums_every_call_not_the_last_ones() -> None:
    """40 tokens a call, 130 allowed: the fourth call (160 in all) ends the run."""
    run = await _run(_notes(5, _costing(say("done"))), token_budget=130)
    assert run.trace.path == f"{LOOP} {LOOP} {LOOP} expanding calling error"
    assert RAN == [0, 1, 2]  # the fourth reply's call never ran
    assert run.chain.llm.calls == 4
    state = run.agent_state
    assert state.error is not None and state.error.type == "exceeded_token_budget"
    assert state.error.message == (
        "The run used 160 tokens, more than its token_budget of 130; the last reply is kept, "
        "its tool calls were not run. Raise token_budget to go on."
    )
    assert state.error.details == {
        "usage": {"input_tokens": 120, "output_tokens": 40},
        "token_budget": 130,
    }
    assert state.error.retryable is False
    last = state.messages[-1]
    assert last.role == "assistant" and [c.name for c in last.tool_calls] == ["note"]
    assert [m.role for m in state.messages].count("tool") == 3


async def test_a_budget_met_exactly_goes_on_and_a_final_answer_past_it_is_kept() -> None:
    """120 of 120 is within the budget; the answer that takes the run past it ends it ok."""
    run = await _run(_notes(3, _costing(say("done"))), token_budget=120)
    assert run.trace.path == f"{LOOP} {LOOP} {LOOP} {LOOP} ok"
    assert RAN == [0, 1, 2]
    assert run.agent_state.status == "ok" and run.agent_state.messages[-1].text == "done"
    assert run.trace.usage.total_tokens == 160


async def test_each_call_records_its_own_usage_in_its_step() -> None:
    run = await _run(_notes(3, _costing(say("done"), 7, 3)), token_budget=1000)
    usages = [t.detail["usage"] for t in run.trace.where("calling")]
    assert usages == [{"input_tokens": 30, "output_tokens": 10}] * 3 + [
        {"input_tokens": 7, "output_tokens": 3}
    ]
    assert run.trace.usage.input_tokens == 97 and run.trace.usage.output_tokens == 33


async def test_calls_that_report_no_usage_cost_nothing() -> None:
    """Replies without usage in between do not reset or skew the sum."""
    script = [
        _costing(call_tool("note", n=0)),
        call_tool("note", n=1),  # no usage reported
        _costing(call_tool("note", n=2)),
        call_tool("note", n=3),
        _costing(call_tool("note", n=4)),
        say("done"),
    ]
    run = await _run(ScriptedModel(script), token_budget=100)
    assert RAN == [0, 1, 2, 3]  # the third costed reply (120 tokens) is past 100
    assert run.agent_state.error is not None
    assert run.agent_state.error.details["usage"] == {"input_tokens": 90, "output_tokens": 30}


async def test_an_unbounded_run_counts_but_never_fails() -> None:
    run = await _run(_notes(4, _costing(say("done"))))
    assert run.token_budget is None
    assert run.agent_state.status == "ok" and RAN == [0, 1, 2, 3]
    assert run.trace.usage.total_tokens == 200


async def test_a_reply_failed_for_another_reason_keeps_its_own_error() -> None:
    """A cut-off reply past the budget is a truncated reply: the budget does not mask it."""
    script = [
        _costing(call_tool("note", n=0)),
        _costing(call_tool("note", n=1)),
        _costing(attrs.evolve(call_tool("note", n=2), status="length")),
    ]
    run = await _run(ScriptedModel(script), token_budget=50)
    assert run.agent_state.error is not None
    assert run.agent_state.error.type == "exceeded_token_budget"  # the second call: 80 > 50
    run = await _run(ScriptedModel(script[1:]), token_budget=60)
    assert RAN == [1]
    assert run.agent_state.error is not None
    assert run.agent_state.error.type == "response_truncated"  # 80 > 60, but cut off first
