"""Pipeline results: ``Continue`` keeps processing, everything else is terminal.

Each result is a small frozen value with ``__match_args__``, so host code reads::

    match result:
        case Ok(chain, tool_result): ...
        case Paused(chain, reason): ...
        case Interrupted(chain, data): ...
        case Failed(chain, error): ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from ._errors import ChainError
from ._messages import ToolResult

if TYPE_CHECKING:
    from ._chain import LLMChain

__all__ = ["Continue", "Failed", "Interrupted", "Ok", "Paused", "PipelineResult", "Terminal"]


@attrs.frozen
class Continue:
    """Keep processing ``chain``."""

    chain: LLMChain


@attrs.frozen
class Ok:
    """The run is done; ``tool_result`` is the target tool's result of an until-tool run."""

    chain: LLMChain
    tool_result: ToolResult | None = None


@attrs.frozen
class Paused:
    """A clean checkpoint to resume later; ``reason`` says why, when a step knew."""

    chain: LLMChain
    reason: Any = None


@attrs.frozen
class Interrupted:
    """A tool or a middleware needs someone outside the run (a human, usually).

    ``state`` is the working state that asked: an answer enters the machine there
    (:meth:`agentfsm.Agent.resume`). The run sets it when it ends.
    """

    chain: LLMChain
    data: Mapping[str, Any]
    state: str | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class Failed:
    """The run cannot go on; ``error`` says why."""

    chain: LLMChain
    error: ChainError


Terminal: TypeAlias = Ok | Paused | Interrupted | Failed
PipelineResult: TypeAlias = Continue | Terminal
