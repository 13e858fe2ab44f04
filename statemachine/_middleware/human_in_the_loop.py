"""Human approval of tool calls: the gate that asks, and takes the answer, in the machine.

The gate runs at the machine's approval state (``interrupt_check`` in the standard
machine). With no answer it interrupts the run before any call of the batch runs,
asking an :class:`~agentfsm.approval.Approval`. A resume enters the machine again at
that state with the decisions as its input (``custom_context["answer"]``); the gate
checks them against the approval it would ask now, applies them (an edit rewrites the
call, a reject marks the call for its rejection result) and lets the batch go on to
``executing``, which runs what was approved like any other call.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._approval import (
    ALL_DECISIONS,
    ANSWER,
    DECIDED,
    Approval,
    DecisionError,
    Decisions,
    request_digest,
    without_answer,
)
from .._chain import LLMChain
from .._effects import effects_of
from .._messages import Message, ToolCall
from .._options import options_of
from .._results import Continue, Interrupted, PipelineResult
from .base import Middleware

if TYPE_CHECKING:
    from .._machine import MachineTable
    from .._tools import Tool

__all__ = [
    "ALL_DECISIONS",
    "ANSWER",
    "DECIDED",
    "HumanInTheLoop",
    "check_decisions",
    "check_gates",
    "check_pre_tool_hitl",
    "request_digest",
    "unanswered_calls",
]


def _normalize(config: bool | Sequence[str] | Mapping[str, Any]) -> dict[str, Any] | None:
    """A tool's review config, or None when the tool never interrupts."""
    if config is True:
        return {"allowed_decisions": list(ALL_DECISIONS)}
    if config is False or config is None:
        return None
    if isinstance(config, Mapping):
        allowed = list(config.get("allowed_decisions", ALL_DECISIONS))
        bad = [d for d in allowed if d not in ALL_DECISIONS]
        if bad:
            raise ValueError(f"Unknown decision type(s) {bad}. Known: {list(ALL_DECISIONS)}")
        return {**config, "allowed_decisions": allowed} if allowed else None
    if isinstance(config, list | tuple):
        return _normalize({"allowed_decisions": list(config)})
    raise ValueError(
        "interrupt_on values are True, False, a list of decisions or "
        f"{{'allowed_decisions': [...]}}; got {config!r}"
    )


@attrs.frozen
class HumanInTheLoop(Middleware):
    """Interrupt before calls of the tools in ``interrupt_on`` run; resume with decisions.

    ``interrupt_on={"write_file": True, "delete": {"allowed_decisions": ["approve",
    "reject"]}, "read": False}``: True allows every decision (approve, edit,
    reject); False or an empty list never interrupts. An agent refuses a name
    that is none of its tools.
    """

    interrupt_on: Mapping[str, Any]
    configs: Mapping[str, Mapping[str, Any]] = attrs.field(init=False)

    @configs.default
    def _configs(self) -> Mapping[str, Mapping[str, Any]]:
        out = {}
        for name, config in self.interrupt_on.items():
            normalized = _normalize(config)
            if normalized is not None:
                out[name] = normalized
        return out

    def gated(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The calls that need a decision, in call order."""
        return [c for c in calls if c.name in self.configs]

    def approval(self, calls: Sequence[ToolCall], chain_tools: Any = ()) -> Approval:
        """The approval asked for the gated ones of ``calls``."""
        display = {t.name: t.display_text for t in chain_tools if t.display_text}
        return Approval.asking(self.gated(calls), self.configs, display)

    def interrupt_data(self, calls: Sequence[ToolCall], chain_tools: Any = ()) -> dict[str, Any]:
        return self.approval(calls, chain_tools).to_data()

    def approval_gate(
        self, result: PipelineResult, opts: Mapping[str, Any] | None = None
    ) -> PipelineResult:
        """Interrupt when a pending call needs a decision it has not had; with the run's
        answer, apply its decisions and let the batch run."""
        if not isinstance(result, Continue):
            return result
        chain = result.chain
        pending = unanswered_calls(chain.exchanged_messages)
        decided = chain.custom_context.get(DECIDED) or {}
        undecided = [c for c in self.gated(pending) if c.call_id not in decided]
        if not undecided:
            return result
        approval = self.approval(undecided, chain.tools)
        answer = chain.custom_context.get(ANSWER)
        if answer is None:
            return Interrupted(chain=chain, data=approval.to_data())
        try:
            decisions = approval.check(answer, allowed=self.configs)
        except DecisionError:
            # An answer to another question (the run changed since it was asked, or the
            # saved answer was edited) never grants anything: ask again.
            return Interrupted(chain=without_answer(chain), data=approval.to_data())
        return Continue(chain=apply_decisions(chain, decisions))


def apply_decisions(chain: LLMChain, decisions: Decisions) -> LLMChain:
    """``chain`` with ``decisions`` applied to its pending reply: edited calls rewritten in
    it, every decided call marked for ``executing``, the answer taken."""
    reply = chain.last_message
    assert reply is not None and reply.is_tool_call, "the gate runs on a pending reply"
    calls, _ = decisions.apply(reply.tool_calls)
    if calls != reply.tool_calls:
        chain = chain.replace_last_message(attrs.evolve(reply, tool_calls=calls))
    decided = {
        **(chain.custom_context.get(DECIDED) or {}),
        **{d.tool_call_id: d.type for d in decisions.decisions},
    }
    chain = without_answer(chain)
    return attrs.evolve(chain, custom_context={**chain.custom_context, DECIDED: decided})


def check_decisions(
    data: Mapping[str, Any], decisions: Any, own: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Mapping[str, Any]]:
    """Deprecated: ``Approval.of(data).check(decisions)``; the decisions by tool call id."""
    warnings.warn(
        "check_decisions is deprecated; use agentfsm.Approval.of(data).check(decisions)",
        DeprecationWarning,
        stacklevel=2,
    )
    checked = Approval.of(data).check(decisions, unbound=True, allowed=own)
    return {d.tool_call_id or "": d.to_data() for d in checked.decisions}


def unanswered_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """The calls of the last assistant message asking for tools that have no result yet."""
    answered: set[str] = set()
    for message in reversed(messages):
        if message.role == "tool":
            answered.update(r.tool_call_id for r in message.tool_results)
        elif message.is_tool_call:
            return [c for c in message.tool_calls if c.call_id not in answered]
    return []


def check_pre_tool_hitl(
    result: PipelineResult, opts: Mapping[str, Any] | None = None
) -> PipelineResult:
    """The first :class:`HumanInTheLoop` middleware's :meth:`~HumanInTheLoop.approval_gate`.

    The standard machine asks every middleware's gate
    (:func:`agentfsm.modes.standard.check_approvals`); this step asks one.
    """
    for hitl in options_of(opts).middleware:
        if isinstance(hitl, HumanInTheLoop):
            return hitl.approval_gate(result, opts)
    return result


def check_gates(middleware: Sequence[Any], tools: Sequence[Tool], machine: MachineTable) -> None:
    """Refuse an approval gate that would never be asked (ValueError, when the agent or
    the run is built): one naming a tool the run lacks, or any on a machine with no state
    whose steps declare the ``approval`` effect."""
    gates = [m for m in middleware if isinstance(m, HumanInTheLoop)]
    if not gates:
        return
    names = [t.name for t in tools]
    for gate in gates:
        for name in gate.interrupt_on:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"{type(gate).__name__} gates the tool {name!r}, which the agent does not "
                    f"have (its tools: {names}){hint}"
                )
    asks = any(
        "approval" in (effects_of(step) or ()) for steps in machine.steps.values() for step in steps
    )
    if not asks:
        raise ValueError(
            f"{type(gates[0]).__name__} asks for approval at the machine's approval state, and "
            f"the {machine.name} machine has none (no state's step declares the 'approval' "
            "effect): its gated calls would run unasked. Add a state with check_approvals, "
            "or derive the machine from STANDARD"
        )
