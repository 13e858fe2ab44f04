"""Human approval of tool calls: interrupt before gated calls run, decide, resume."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..messages import Message, ToolCall
from ..results import Continue, Interrupted, PipelineResult

__all__ = ["ALL_DECISIONS", "HumanInTheLoop", "check_pre_tool_hitl", "unanswered_calls"]

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
class HumanInTheLoop:
    """Interrupt before calls of the tools in ``interrupt_on`` run.

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
    """Interrupt when a pending call needs approval; no tool of that batch runs."""
    if not isinstance(result, Continue):
        return result
    hitl = next(
        (m for m in (opts or {}).get("middleware", ()) if isinstance(m, HumanInTheLoop)), None
    )
    if hitl is None:
        return result
    pending = unanswered_calls(result.chain.exchanged_messages)
    if not hitl.gated(pending):
        return result
    return Interrupted(result.chain, hitl.interrupt_data(pending, result.chain.tools))
