"""Human approval of tool calls: interrupt before gated calls run, decide, resume."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..messages import Message, ToolCall, ToolResult
from ..options import options_of
from ..results import Continue, Interrupted, PipelineResult
from ..steps import add_tool_message, run_tool_calls
from .base import Middleware

if TYPE_CHECKING:
    from .._state import AgentState
    from ..agent import Agent

__all__ = [
    "ALL_DECISIONS",
    "HumanInTheLoop",
    "check_decisions",
    "check_pre_tool_hitl",
    "request_digest",
    "unanswered_calls",
]

ALL_DECISIONS: Final = ("approve", "edit", "reject")


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
    reject); False or an empty list never interrupts.
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

    def interrupt_data(self, calls: Sequence[ToolCall], chain_tools: Any = ()) -> dict[str, Any]:
        gated = self.gated(calls)
        display = {t.name: t.display_text for t in chain_tools if t.display_text}
        return {
            "type": "hitl",
            "action_requests": [
                {
                    "tool_call_id": c.call_id,
                    "tool_name": c.name,
                    "arguments": dict(c.arguments),
                    "display_text": display.get(c.name) or c.name.replace("_", " ").capitalize(),
                }
                for c in gated
            ],
            "review_configs": {c.name: dict(self.configs[c.name]) for c in gated},
            "hitl_tool_call_ids": [c.call_id for c in gated],
        }

    def approval_gate(
        self, result: PipelineResult, opts: Mapping[str, Any] | None = None
    ) -> PipelineResult:
        """Interrupt when a pending call needs approval; no tool of that batch runs."""
        if not isinstance(result, Continue):
            return result
        pending = unanswered_calls(result.chain.exchanged_messages)
        if not self.gated(pending):
            return result
        return Interrupted(result.chain, self.interrupt_data(pending, result.chain.tools))

    async def handle_resume(
        self, agent: Agent, state: AgentState, answer: Any
    ) -> AgentState | None:
        """Run the decided calls of an approval interrupt; None for any other interrupt.

        ``answer`` is one decision per gated call, in action-request order:
        ``{"type": "approve"}``, ``{"type": "edit", "arguments": {...}}`` or
        ``{"type": "reject"}``; a decision may carry ``"digest":`` the
        :func:`request_digest` of the request the reviewer saw, and is refused if
        the request is not that one any more. A saved interrupt allows no decision
        this middleware does not. Approved and edited calls (and ungated siblings)
        run here, outside the machine; a rejected call gets a result saying so.
        The state returned ends with one tool message holding every result, in
        call order.
        """
        data = state.interrupt_data or {}
        if "hitl_tool_call_ids" not in data:
            return None
        by_id = check_decisions(data, answer, self.configs)
        chain = agent.build_chain(state)
        calls = unanswered_calls(chain.messages)
        to_run: list[ToolCall] = []
        for call in calls:
            decision = by_id.get(call.call_id, {"type": "approve"})
            if decision["type"] == "edit":
                to_run.append(attrs.evolve(call, arguments=dict(decision["arguments"])))
            elif decision["type"] == "approve":
                to_run.append(call)
        ran = iter(await run_tool_calls(chain, to_run))
        results = [
            _rejected(call) if by_id.get(call.call_id, {}).get("type") == "reject" else next(ran)
            for call in calls
        ]
        message = add_tool_message(chain, results).last_message
        assert message is not None
        return attrs.evolve(state, messages=(*state.messages, message))


def _rejected(call: ToolCall) -> ToolResult:
    """Not an error: the model reads a human's no as information."""
    return ToolResult(
        call.call_id, call.name, f"Tool call '{call.name}' was rejected by a human reviewer."
    )


def request_digest(request: Mapping[str, Any]) -> str:
    """The fingerprint of one action request as a reviewer saw it (call id, tool, arguments).

    A decision that carries it as ``"digest"`` approves exactly that request: one
    whose call id, tool or arguments changed since it was shown is refused.
    """
    shown = [request.get("tool_call_id"), request.get("tool_name"), request.get("arguments")]
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"), default=repr)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _check_digest(index: int, decision: Mapping[str, Any], request: Mapping[str, Any]) -> None:
    """Refuse a decision whose digest is not the request's as it stands."""
    digest = decision.get("digest")
    if digest is not None and digest != request_digest(request):
        raise ValueError(
            f"Decision at index {index} was made on another action request than request "
            f"{index} as it stands (its call id, tool or arguments changed since it was "
            "shown); nothing was run. Show the run again and decide anew."
        )


def _allowed(
    tool_name: str, saved: Mapping[str, Any], own: Mapping[str, Mapping[str, Any]] | None
) -> list[str]:
    """The decisions allowed for ``tool_name``: the saved interrupt's, never more than the
    resuming middleware allows (a saved interrupt is data that may have been edited)."""
    config = saved.get(tool_name, {}) if isinstance(saved, Mapping) else {}
    allowed = config.get("allowed_decisions", ()) if isinstance(config, Mapping) else ()
    if own is None:
        return list(allowed)
    mine = own.get(tool_name, {"allowed_decisions": ["approve", "reject"]})
    return [d for d in allowed if d in mine.get("allowed_decisions", ())]


def check_decisions(
    data: Mapping[str, Any], decisions: Any, own: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Mapping[str, Any]]:
    """The decisions by tool call id; ValueError for any that does not fit."""
    ids = list(data["hitl_tool_call_ids"])
    requests = list(data.get("action_requests", ()))
    configs = data.get("review_configs", {})
    if not isinstance(decisions, list | tuple):
        raise ValueError(f"Decisions must be a list, got: {type(decisions).__name__}")
    if len(decisions) != len(ids):
        raise ValueError(
            f"Decision count ({len(decisions)}) does not match HITL tool count ({len(ids)})"
        )
    by_id: dict[str, Mapping[str, Any]] = {}
    for index, (decision, request) in enumerate(zip(decisions, requests, strict=True)):
        if not isinstance(decision, Mapping):
            raise ValueError(f"Decision at index {index} is not a map")
        kind = decision.get("type")
        if kind is None:
            raise ValueError(
                f"Decision at index {index} has no type; use 'approve', 'edit' or 'reject'"
            )
        tool_name = request["tool_name"]
        allowed = _allowed(tool_name, configs, own)
        if kind not in allowed:
            raise ValueError(
                f"Decision type '{kind}' not allowed for tool '{tool_name}'. Allowed: {allowed}"
            )
        if kind == "edit" and not isinstance(decision.get("arguments"), Mapping):
            raise ValueError(
                f"Edit decision at index {index} needs 'arguments': a map of the new arguments"
            )
        named = decision.get("tool_call_id")
        if named is not None and named != request["tool_call_id"]:
            raise ValueError(
                f"Decision at index {index} names tool call {named!r}, but action request "
                f"{index} is {request['tool_call_id']!r}; decisions go in action-request order"
            )
        _check_digest(index, decision, request)
        by_id[request["tool_call_id"]] = decision
    return by_id


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
