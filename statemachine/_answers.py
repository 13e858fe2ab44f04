"""Answers to a run's interrupt, checked before they enter the machine.

A resume starts a new segment at the state that asked, with the answer as its input
(``custom_context["answer"]``): an approval's decisions go to the approval state, whose
gate applies them; the answers to tools' own interrupts go to ``propagating``
(:func:`agentfsm.steps.take_tool_answers`), where each becomes its tool's result. Everything here is
checked first, so an answer that does not fit raises and nothing runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._approval import Approval, DecisionError, Decisions
from ._errors import InvariantError
from ._messages import ToolResult
from ._middleware.human_in_the_loop import HumanInTheLoop, unanswered_calls
from ._state import AgentState
from ._tools import Tool, ToolOutput

__all__ = ["Answer", "check_approval", "check_tool_answers"]

NO_INTERRUPT = (
    "No interrupt data found in state. Cannot process decisions without interrupt context."
)


@attrs.frozen
class Answer:
    """An answer checked against the interrupt it answers."""

    #: The working state it enters (None: where the conversation's entry is).
    state: str | None
    #: What that state takes, as data (a checkpoint saves it with the segment's chain).
    value: Any
    #: Calls decided already (``{call_id: "approve"}``): a waiting subagent's call, which
    #: passed its gate when it first ran, is not asked about again.
    decided: Mapping[str, str] | None = None


def _gate(middleware: Sequence[Any], calls: Sequence[Any]) -> HumanInTheLoop | None:
    for gate in middleware:
        if isinstance(gate, HumanInTheLoop) and gate.gated(calls):
            return gate
    return None


def check_approval(
    state: AgentState,
    tools: Sequence[Tool],
    middleware: Sequence[Any],
    answer: Any,
    *,
    unbound: bool = False,
) -> Decisions:
    """``answer``, checked as the decisions on the approval ``state`` waits on.

    The approval must be the one the gate asks of the conversation as it stands (every
    request a pending call as it is, every gated pending call asked): a state whose
    interrupt was edited, or belongs to another conversation, is refused
    (:class:`~agentfsm.errors.InvariantError`). Then each decision must fit its request
    (:meth:`Approval.check`).
    """
    shown = Approval.of(state.interrupt_data)
    pending = unanswered_calls(state.messages)
    # A request that is no pending call as it stands is a state that contradicts its
    # conversation (InvariantError, naming the request), not a decision that does not fit.
    calls = {c.call_id: c for c in pending}
    for index, request in enumerate(shown.requests):
        call = calls.get(request.tool_call_id)
        if call is None or (call.name, dict(call.arguments)) != (
            request.tool_name,
            dict(request.arguments),
        ):
            raise InvariantError(
                f"Action request {index} ({request.tool_name!r}, call {request.tool_call_id!r}) "
                "is not a pending call of the conversation as it stands: the state was edited "
                "or belongs to another conversation. Nothing was run; execute the state again "
                "to ask for approval anew."
            )
    gate = _gate(middleware, pending)
    if gate is None:
        raise DecisionError(
            "The run waits on an approval, but no HumanInTheLoop middleware of this agent "
            f"gates its calls {[r.tool_name for r in shown.requests]}; resume it with the "
            "agent that ran it"
        )
    asked = gate.approval(pending, tools)
    if [r.to_data() for r in asked.requests] != [r.to_data() for r in shown.requests]:
        unasked = [r.tool_name for r in asked.requests if r not in shown.requests]
        raise InvariantError(
            f"Pending call(s) of {unasked} need approval but the interrupt asks for none, or "
            "its requests are not the ones the gate asks of the conversation as it stands. "
            "Nothing was run; execute the state again to ask for approval anew."
        )
    return shown.check(answer, unbound=unbound, allowed=gate.configs)


def _interrupts(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if data.get("type") == "multiple_interrupts":
        found = data.get("interrupts")
        if not isinstance(found, list | tuple) or not all(isinstance(i, Mapping) for i in found):
            raise DecisionError("The interrupt's 'interrupts' is not a list of interrupts")
        return list(found)
    return [data]


def _result_data(call: ToolResult, given: Any, index: int) -> dict[str, Any]:
    """One tool interrupt's answer as the result's data (what a checkpoint keeps)."""
    if isinstance(given, str):
        return {"content": given}
    if isinstance(given, ToolOutput) and given.interrupt is None and isinstance(given.content, str):
        out: dict[str, Any] = {"content": given.content, "is_error": given.is_error}
        if given.state_updates:
            out["state_updates"] = dict(given.state_updates)
        return out
    raise DecisionError(
        f"Answer {index} is for the {call.name} tool's interrupt and becomes its result: "
        f"give text (or a ToolOutput with text content), not {type(given).__name__}"
    )


def check_tool_answers(state: AgentState, answer: Any) -> list[dict[str, Any]]:
    """``answer`` to the tools' own interrupts ``state`` waits on, as results' data:
    one answer for one interrupt, a list of one each, in order, for several."""
    data = state.interrupt_data or {}
    interrupts = _interrupts(data)
    last = state.messages[-1] if state.messages else None
    waiting = {
        r.tool_call_id: r
        for r in (last.tool_results if last is not None and last.role == "tool" else ())
        if r.is_interrupt
    }
    answers = [answer] if len(interrupts) == 1 else answer
    if not isinstance(answers, list | tuple) or len(answers) != len(interrupts):
        raise DecisionError(
            f"{len(interrupts)} tools wait on an answer: answer with a list of one answer "
            "each, in the order of the interrupt's 'interrupts'"
        )
    out: list[dict[str, Any]] = []
    for index, (interrupt, given) in enumerate(zip(interrupts, answers, strict=True)):
        call = waiting.get(str(interrupt.get("tool_call_id")))
        if call is None:
            raise DecisionError(
                f"Interrupt {index} names tool call {interrupt.get('tool_call_id')!r}, which no "
                "interrupting result of the last tool message has: the state was edited or "
                "belongs to another conversation. Nothing was run."
            )
        out.append({"tool_call_id": call.tool_call_id, **_result_data(call, given, index)})
    return out
