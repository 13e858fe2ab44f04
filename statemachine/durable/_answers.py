"""Which interrupts a durable run waits on for decisions, and whether decisions answer one.

A run waits on an approval request of its own (``hitl_tool_call_ids``) and on one
its subagent forwards (interrupt type ``"subagent"``, nested as deep as subagents
nest, an approval request innermost). The reviewer answers the innermost request;
the checks are the HITL and subagent modules' own, never copies of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._agent import Agent
from .._approval import Approval
from .._subagents import SUBAGENT
from .._subagents import check_answer as _check_subagent_answer

__all__ = ["check_answer", "forwarded", "innermost", "waits_on"]


def _descent(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """The request under ``data``'s subagents and their names, outermost first."""
    names: list[str] = []
    while data.get("type") == SUBAGENT and isinstance(data.get("request"), Mapping):
        names.append(str(data.get("subagent")))
        data = data["request"]
    return data, names


def waits_on(data: Mapping[str, Any] | None) -> bool:
    """Whether a run interrupted with ``data`` waits for decisions: an approval request,
    its own or a subagent's (one subagent waiting, however deep)."""
    if not data:
        return False
    request, _ = _descent(data)
    return "hitl_tool_call_ids" in request


def forwarded(data: Mapping[str, Any] | None) -> bool:
    """Whether ``data`` is a subagent's request (its own request is not)."""
    return data is not None and data.get("type") == SUBAGENT


def innermost(data: Mapping[str, Any]) -> dict[str, Any]:
    """The request a reviewer answers: ``data`` itself for the run's own approval, else
    the innermost subagent's, with ``"child_path"`` naming the subagents it waits in."""
    request, names = _descent(data)
    if not names:
        return dict(data)
    return {**request, "child_path": [*names, *request.get("child_path", ())]}


def check_answer(
    data: Mapping[str, Any],
    decisions: Sequence[Mapping[str, Any]],
    agent: Agent | None,
    *,
    unbound: bool = False,
) -> list[dict[str, Any]]:
    """ValueError unless ``decisions`` answer the request ``data`` waits on.

    Count, types, call ids and digests are checked against the innermost request as
    the HITL path checks them; with the run's ``agent`` at hand, a subagent's request
    is also checked as a resume checks it (its saved state is the one it came from,
    its own middleware allows the decisions). The decisions come back bound to their
    requests (each with its digest): what the run is sent.
    """
    request, names = _descent(data)
    bound = Approval.of(request).check(decisions, unbound=unbound).to_data()
    if names and agent is not None:
        _check_subagent_answer(agent, data, bound)
    return bound
