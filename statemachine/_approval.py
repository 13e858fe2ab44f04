"""The typed approval interrupt: what a reviewer is asked, and the decisions they give.

A run whose pending tool calls need a human's decision ends ``Interrupted`` at its
approval state with an :class:`Approval`: one :class:`ActionRequest` per gated call,
in call order, and each tool's review config. On the wire and in a store it is the
Sagents-shaped dict (:meth:`Approval.to_data`, read back losslessly by
:meth:`Approval.of`)::

    {"type": "hitl",
     "action_requests": [{"tool_call_id", "tool_name", "arguments", "display_text"}, ...],
     "review_configs": {tool_name: {"allowed_decisions": [...]}},
     "hitl_tool_call_ids": [...]}

The answer is one :class:`Decision` per request, in request order: ``approve``, ``edit``
(with the new arguments) or ``reject``. Each decision is bound to the request the
reviewer saw by its :attr:`ActionRequest.digest`; :meth:`Approval.check` refuses a
decision whose request changed since, and one that carries no digest unless the caller
opts out explicitly (``unbound=True``: "decide whatever the request holds now").
The decisions a reviewer makes from the request itself (:meth:`ActionRequest.approve`,
:meth:`~ActionRequest.edit`, :meth:`~ActionRequest.reject`, :meth:`Approval.approve_all`)
are bound.

The answer enters the machine: the run goes on at the state that asked, whose gate
applies the decisions (an edit rewrites the call, a reject gives the call its
rejection result) and ``executing`` runs what was approved, as any other transition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from ._errors import AgentfsmError
from ._messages import ToolCall, ToolResult

if TYPE_CHECKING:
    from ._chain import LLMChain

__all__ = [
    "ALL_DECISIONS",
    "ANSWER",
    "DECIDED",
    "ActionRequest",
    "Approval",
    "Decision",
    "DecisionError",
    "Decisions",
    "rejected",
    "request_digest",
    "without_answer",
]

DecisionType = Literal["approve", "edit", "reject"]
#: Every decision a reviewer can make.
ALL_DECISIONS: Final[tuple[DecisionType, ...]] = ("approve", "edit", "reject")
#: The interrupt ``type`` of an approval.
APPROVAL_TYPE: Final = "hitl"


#: The ``custom_context`` key an answer enters the machine under, until the state that
#: asked takes it.
ANSWER: Final = "answer"
#: The ``custom_context`` key of the decisions a gate applied (``{call_id: type}``), which
#: ``executing`` honours (a rejected call gets its rejection result) and then clears.
DECIDED: Final = "decided"


class DecisionError(AgentfsmError, ValueError):
    """Decisions that do not answer the approval as it stands; nothing was run."""


def request_digest(request: Mapping[str, Any]) -> str:
    """The fingerprint of one action request as a reviewer saw it (call id, tool, arguments).

    A decision that carries it as ``"digest"`` approves exactly that request: one whose
    call id, tool or arguments changed since it was shown is refused.
    """
    import hashlib  # here: a digest is taken when a run is decided, not when agentfsm loads

    shown = [request.get("tool_call_id"), request.get("tool_name"), request.get("arguments")]
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"), default=repr)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@attrs.frozen
class Decision:
    """One reviewer's decision on one request: ``approve``, ``edit`` or ``reject``."""

    type: DecisionType
    #: The new arguments of an ``edit``.
    arguments: Mapping[str, Any] | None = None
    #: The :attr:`ActionRequest.digest` of the request decided; None: unbound.
    digest: str | None = None
    #: The call the decision is for, when the reviewer named it.
    tool_call_id: str | None = None

    @classmethod
    def of(cls, data: Any, index: int = 0) -> Decision:
        """A decision from its wire form (``{"type": "approve", ...}``), checked."""
        if isinstance(data, Decision):
            return data
        if not isinstance(data, Mapping):
            raise DecisionError(f"Decision at index {index} is not a map")
        kind = data.get("type")
        if kind is None:
            raise DecisionError(
                f"Decision at index {index} has no type; use 'approve', 'edit' or 'reject'"
            )
        if kind not in ALL_DECISIONS:
            raise DecisionError(
                f"Decision at index {index} has type {str(kind)[:40]!r}; "
                f"use one of {list(ALL_DECISIONS)}"
            )
        arguments = data.get("arguments")
        if kind == "edit" and not isinstance(arguments, Mapping):
            raise DecisionError(
                f"Edit decision at index {index} needs 'arguments': a map of the new arguments"
            )
        digest, call_id = data.get("digest"), data.get("tool_call_id")
        for name, value in (("digest", digest), ("tool_call_id", call_id)):
            if value is not None and not isinstance(value, str):
                raise DecisionError(f"Decision at index {index} has a {name} that is not text")
        return cls(
            type=kind,
            arguments=dict(arguments) if kind == "edit" and arguments is not None else None,
            digest=digest,
            tool_call_id=call_id,
        )

    def to_data(self) -> dict[str, Any]:
        """The wire form: the keys that are set."""
        data: dict[str, Any] = {"type": self.type}
        if self.arguments is not None:
            data["arguments"] = dict(self.arguments)
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.digest is not None:
            data["digest"] = self.digest
        return data


@attrs.frozen
class ActionRequest:
    """One gated call as the reviewer sees it."""

    tool_call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    display_text: str = ""

    @classmethod
    def of(cls, data: Any) -> ActionRequest:
        """The request in its wire form (an ``action_requests`` item, as a subagent's or a
        durable run's wait shows it), checked: DecisionError if it is not one."""
        return data if isinstance(data, ActionRequest) else _request(data)

    @property
    def digest(self) -> str:
        """What a decision on this request carries (:func:`request_digest`)."""
        return request_digest(self.to_data())

    def to_data(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "arguments": dict(self.arguments),
            "display_text": self.display_text,
        }

    def approve(self) -> Decision:
        """Run the call as it was asked."""
        return Decision(type="approve", digest=self.digest, tool_call_id=self.tool_call_id)

    def edit(self, arguments: Mapping[str, Any]) -> Decision:
        """Run the call with ``arguments`` instead."""
        return Decision(
            type="edit",
            arguments=dict(arguments),
            digest=self.digest,
            tool_call_id=self.tool_call_id,
        )

    def reject(self) -> Decision:
        """Run nothing; the model reads that a human said no."""
        return Decision(type="reject", digest=self.digest, tool_call_id=self.tool_call_id)


def _configs(value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping) or not all(
        isinstance(name, str)
        and isinstance(config, Mapping)
        and isinstance(config.get("allowed_decisions", []), list | tuple)
        for name, config in value.items()
    ):
        raise DecisionError(f"An approval's review_configs {value!r:.120} are not tool configs")
    return {name: dict(config) for name, config in value.items()}


def _request(value: Any) -> ActionRequest:
    if not (
        isinstance(value, Mapping)
        and isinstance(value.get("tool_call_id"), str)
        and isinstance(value.get("tool_name"), str)
        and isinstance(value.get("arguments"), Mapping)
        and isinstance(value.get("display_text", ""), str)
    ):
        raise DecisionError(f"An approval's action request {value!r:.120} is not one")
    return ActionRequest(
        tool_call_id=value["tool_call_id"],
        tool_name=value["tool_name"],
        arguments=dict(value["arguments"]),
        display_text=value.get("display_text", ""),
    )


@attrs.frozen
class Approval:
    """The calls a run waits on a reviewer for, and what each tool's reviewer may decide."""

    requests: tuple[ActionRequest, ...]
    #: ``{tool_name: {"allowed_decisions": [...], ...}}`` for the tools of the requests.
    configs: Mapping[str, Mapping[str, Any]]

    @classmethod
    def asking(
        cls,
        calls: Iterable[ToolCall],
        configs: Mapping[str, Mapping[str, Any]],
        display: Mapping[str, str] | None = None,
    ) -> Approval:
        """The approval of ``calls`` (the gated ones, in call order) under ``configs``."""
        display = display or {}
        requests = tuple(
            ActionRequest(
                tool_call_id=c.call_id,
                tool_name=c.name,
                arguments=dict(c.arguments),
                display_text=display.get(c.name) or c.name.replace("_", " ").capitalize(),
            )
            for c in calls
        )
        return cls(
            requests=requests,
            configs={r.tool_name: dict(configs[r.tool_name]) for r in requests},
        )

    @staticmethod
    def is_approval(data: Any) -> bool:
        """Whether interrupt ``data`` is an approval's (else a tool's or a subagent's)."""
        return isinstance(data, Mapping) and "hitl_tool_call_ids" in data

    @classmethod
    def of(cls, data: Any) -> Approval:
        """The approval of interrupt ``data`` (its wire form), checked: DecisionError if the
        data is not one (a saved interrupt is data, and may have been edited)."""
        if isinstance(data, Approval):
            return data
        if not cls.is_approval(data):
            raise DecisionError(
                "No approval interrupt found in state; cannot process decisions without it"
            )
        raw = data.get("action_requests")
        if not isinstance(raw, list | tuple):
            raise DecisionError("An approval's action_requests is not a list")
        approval = cls(
            requests=tuple(_request(r) for r in raw),
            configs=_configs(data.get("review_configs", {})),
        )
        ids = data.get("hitl_tool_call_ids")
        if not isinstance(ids, list | tuple) or list(ids) != [
            r.tool_call_id for r in approval.requests
        ]:
            raise DecisionError(
                f"The interrupt's tool call ids {ids!r:.120} are not its action requests'"
            )
        return approval

    def to_data(self) -> dict[str, Any]:
        """The Sagents-shaped interrupt data (the wire and store format)."""
        return {
            "type": APPROVAL_TYPE,
            "action_requests": [r.to_data() for r in self.requests],
            "review_configs": {name: dict(c) for name, c in self.configs.items()},
            "hitl_tool_call_ids": [r.tool_call_id for r in self.requests],
        }

    def allowed(self, tool_name: str) -> list[str]:
        config = self.configs.get(tool_name, {})
        return [d for d in config.get("allowed_decisions", ()) if d in ALL_DECISIONS]

    def approve_all(self) -> list[Decision]:
        """One bound ``approve`` per request."""
        return [r.approve() for r in self.requests]

    def check(
        self,
        decisions: Any,
        *,
        unbound: bool = False,
        allowed: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Decisions:
        """The decisions, checked against this approval (DecisionError for any that does not fit).

        One decision per request, in request order; each allowed for its tool (by this
        approval's configs, and never more than ``allowed``, the configs of the gate that
        takes it: a saved interrupt is data); an ``edit`` has arguments; a named call id
        is its request's; and a decision is bound to its request by its digest, unless
        ``unbound`` (then an unbound decision decides whatever the request holds now).
        """
        if not isinstance(decisions, list | tuple):
            raise DecisionError(f"Decisions must be a list, got: {type(decisions).__name__}")
        if len(decisions) != len(self.requests):
            raise DecisionError(
                f"Decision count ({len(decisions)}) does not match HITL tool count "
                f"({len(self.requests)})"
            )
        checked: list[Decision] = []
        for index, (given, request) in enumerate(zip(decisions, self.requests, strict=True)):
            decision = Decision.of(given, index)
            mine = self.allowed(request.tool_name)
            if allowed is not None:
                gate = allowed.get(request.tool_name, {"allowed_decisions": ["approve", "reject"]})
                mine = [d for d in mine if d in gate.get("allowed_decisions", ())]
            if decision.type not in mine:
                raise DecisionError(
                    f"Decision type '{decision.type}' not allowed for tool "
                    f"'{request.tool_name}'. Allowed: {mine}"
                )
            if decision.tool_call_id is not None and decision.tool_call_id != request.tool_call_id:
                raise DecisionError(
                    f"Decision at index {index} names tool call {decision.tool_call_id!r}, but "
                    f"action request {index} is {request.tool_call_id!r}; decisions go in "
                    "action-request order"
                )
            digest = request.digest
            if decision.digest is None:
                if not unbound:
                    raise DecisionError(
                        f"Decision at index {index} carries no digest of the request it "
                        f"decides; decide from the request (approval.requests[{index}]"
                        ".approve()), copy its digest, or pass unbound=True to decide "
                        "whatever the request holds now"
                    )
                decision = attrs.evolve(decision, digest=digest)
            elif decision.digest != digest:
                raise DecisionError(
                    f"Decision at index {index} was made on another action request than "
                    f"request {index} as it stands (its call id, tool or arguments changed "
                    "since it was shown); nothing was run. Show the run again and decide anew."
                )
            checked.append(attrs.evolve(decision, tool_call_id=request.tool_call_id))
        return Decisions(approval=self, decisions=tuple(checked))


def without_answer(chain: LLMChain) -> LLMChain:
    """``chain`` with the answer it carried into the machine taken out."""
    context = {k: v for k, v in chain.custom_context.items() if k != ANSWER}
    return attrs.evolve(chain, custom_context=context)


def rejected(call: ToolCall) -> ToolResult:
    """A rejected call's result: not an error, the model reads a human's no as information."""
    return ToolResult(
        tool_call_id=call.call_id,
        name=call.name,
        content=f"Tool call '{call.name}' was rejected by a human reviewer.",
    )


@attrs.frozen
class Decisions:
    """An approval's decisions, checked and bound: one per request, in request order."""

    approval: Approval
    decisions: tuple[Decision, ...]

    def by_id(self) -> dict[str, Decision]:
        return {d.tool_call_id: d for d in self.decisions if d.tool_call_id is not None}

    def to_data(self) -> list[dict[str, Any]]:
        return [d.to_data() for d in self.decisions]

    def apply(self, calls: Sequence[ToolCall]) -> tuple[tuple[ToolCall, ...], tuple[str, ...]]:
        """``calls`` as decided (an edit's arguments in place), and the rejected call ids."""
        by_id = self.by_id()
        out: list[ToolCall] = []
        rejects: list[str] = []
        for call in calls:
            decision = by_id.get(call.call_id)
            if decision is not None and decision.type == "edit":
                call = attrs.evolve(call, arguments=dict(decision.arguments or {}))
            elif decision is not None and decision.type == "reject":
                rejects.append(call.call_id)
            out.append(call)
        return tuple(out), tuple(rejects)
