"""What each model takes and refuses, in one table.

Providers change their parameters model by model: newer Claude models refuse
``temperature`` and take only adaptive thinking, OpenAI's reasoning models want
``max_completion_tokens``. A request is built from the :class:`ModelRules` of its
model, read from :data:`MODEL_RULES`; a new model that behaves differently is
one more row there. Rows are searched in order and, field by field, the first
row that says something (not ``None``) wins, so a specific row goes above a
general one and needs to name only what differs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

__all__ = ["MODEL_RULES", "ModelRule", "ModelRules", "rules_for"]

ThinkingStyle = Literal["budget", "adaptive"]


@attrs.frozen
class ModelRules:
    """What one model takes.

    ``temperature``: sampling parameters are sent. ``thinking``: how thinking is
    turned on (Anthropic): a token ``budget`` (``{"type": "enabled"}``) or
    ``adaptive`` only (a budget given is sent as adaptive). ``effort``: the
    ``effort`` setting is sent. ``reasoning``: an OpenAI reasoning model
    (``max_completion_tokens``, ``reasoning_effort``). ``max_tokens``: the
    Anthropic default token limit when none is given.
    """

    temperature: bool = True
    thinking: ThinkingStyle = "budget"
    effort: bool = False
    reasoning: bool = False
    max_tokens: int = 16000


@attrs.frozen
class ModelRule:
    """One row: models of ``provider`` whose name matches ``pattern`` (searched in the
    name after any ``vendor/`` prefix); the fields left ``None`` say nothing."""

    provider: str
    pattern: str
    temperature: bool | None = None
    thinking: ThinkingStyle | None = None
    effort: bool | None = None
    reasoning: bool | None = None
    max_tokens: int | None = None


#: The rows, most specific first.
MODEL_RULES: Final[tuple[ModelRule, ...]] = (
    # Anthropic: adaptive thinking and effort only, no sampling parameters.
    ModelRule(
        provider="anthropic",
        pattern=r"claude-opus-4-[78]\b|claude-(?:[a-z]+-)?([5-9]|\d\d)\b|claude-(mythos|fable)",
        temperature=False,
        thinking="adaptive",
        effort=True,
    ),
    # Anthropic: effort, and thinking by budget or adaptive.
    ModelRule(
        provider="anthropic", pattern=r"claude-opus-4-[56]\b|claude-sonnet-4-6\b", effort=True
    ),
    # Anthropic: older models' own output limits.
    ModelRule(provider="anthropic", pattern=r"claude-3-(haiku|opus|sonnet)", max_tokens=4096),
    ModelRule(
        provider="anthropic",
        pattern=r"claude-3-5|claude-4-opus|claude-opus-4(-[01])?(-\d{8}|@|$)",
        max_tokens=8192,
    ),
    # OpenAI: reasoning models (o1, o3, o4-mini, gpt-5...; not gpt-5-chat).
    ModelRule(
        provider="openai",
        pattern=r"^(o\d|gpt-5(?!-chat))",
        temperature=False,
        reasoning=True,
        effort=True,
    ),
)


def rules_for(provider: str, model: str, table: Sequence[ModelRule] = MODEL_RULES) -> ModelRules:
    """The rules of ``model`` at ``provider``: each field from the first row that sets it."""
    return _resolve(provider, model.rsplit("/", 1)[-1], tuple(table))


@functools.cache
def _resolve(provider: str, model: str, table: tuple[ModelRule, ...]) -> ModelRules:
    found: dict[str, Any] = {}
    for row in table:
        if row.provider != provider or not re.search(row.pattern, model):
            continue
        for field in attrs.fields(ModelRules):
            value = getattr(row, field.name)
            if value is not None:
                found.setdefault(field.name, value)
    return ModelRules(**found)
