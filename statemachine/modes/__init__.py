"""Modes: how a chain is run. ``run_chain`` picks one and handles fallbacks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import attrs

from ..chain import LLMChain
from ..errors import ChainError
from ..results import Failed, Terminal
from .simple import SingleCall, Step, UntilSuccess, UntilToolUsed, WhileNeedsResponse

if TYPE_CHECKING:
    from agentfsm.providers.base import ChatModel

__all__ = [
    "MODES",
    "Mode",
    "ModeLike",
    "SingleCall",
    "Step",
    "UntilSuccess",
    "UntilToolUsed",
    "WhileNeedsResponse",
    "resolve_mode",
    "run_chain",
]


@runtime_checkable
class Mode(Protocol):
    """Anything with ``async run(chain, opts) -> Terminal`` is a mode."""

    async def run(self, chain: LLMChain, opts: Mapping[str, Any] | None = None) -> Terminal: ...


ModeLike: TypeAlias = Mode | str | None


def _standard() -> Mode:
    from .standard import StandardMode

    return StandardMode()


MODES: Mapping[str, Callable[[], Mode]] = {
    "step": Step,
    "while_needs_response": WhileNeedsResponse,
    "until_success": UntilSuccess,
    "until_tool_used": UntilToolUsed,
    "standard": _standard,
}


def resolve_mode(mode: ModeLike) -> Mode:
    """A mode object for ``mode``: None (one call), a built-in's name, or a Mode."""
    if mode is None:
        return SingleCall()
    if isinstance(mode, str):
        try:
            return MODES[mode]()
        except KeyError:
            raise ValueError(
                f"Unknown mode {mode!r}. Built-in modes: {sorted(MODES)}; or pass an object "
                "with an async run(chain, opts) method."
            ) from None
    if not callable(getattr(mode, "run", None)):
        raise ValueError(f"A mode needs an async run(chain, opts) method; got {mode!r}")
    return mode


async def run_chain(
    chain: LLMChain,
    mode: ModeLike = None,
    *,
    with_fallbacks: Sequence[ChatModel] | None = None,
    before_fallback: Callable[[LLMChain], LLMChain] | None = None,
    **opts: Any,
) -> Terminal:
    """Run ``chain`` under ``mode``.

    A chain without messages is refused. ``exchanged_messages`` is cleared first,
    so it holds this run's messages only. With ``with_fallbacks``, the chain's
    model then each fallback runs the whole mode on the chain as it was, after
    ``before_fallback`` (applied on the first attempt too); a failure the model
    marks retryable moves on, any other result is returned. ``on_error`` fires
    once for a failed result.
    """
    runner = resolve_mode(mode)
    if not chain.messages:
        result: Terminal = Failed(
            chain,
            ChainError(
                "no_messages",
                "The chain has no messages to send. Add a user message first "
                "(chain.add_message(Message.user(...))).",
            ),
        )
    else:
        chain = chain.clear_exchanged_messages()
        if with_fallbacks is None:
            result = await runner.run(chain, opts)
        else:
            result = await _with_fallbacks(chain, runner, opts, with_fallbacks, before_fallback)
    if isinstance(result, Failed):
        try:
            result.chain.fire("on_error", result.chain, result.error)
        except ChainError as error:
            return Failed(result.chain, error)
    return result


async def _with_fallbacks(
    chain: LLMChain,
    runner: Mode,
    opts: Mapping[str, Any],
    fallbacks: Sequence[ChatModel],
    before_fallback: Callable[[LLMChain], LLMChain] | None,
) -> Terminal:
    attempts: list[dict[str, str]] = []
    for model in (chain.llm, *fallbacks):
        attempt = attrs.evolve(chain, llm=model)
        if before_fallback is not None:
            attempt = before_fallback(attempt)
        try:
            result = await runner.run(attempt, opts)
        except ChainError as error:
            result = Failed(attempt, error)
        except Exception as exc:
            result = Failed(attempt, ChainError("mode_error", f"{type(exc).__name__}: {exc}"))
        if not isinstance(result, Failed):
            return result
        attempts.append({"model": model.name, "error": result.error.type})
        if not (result.error.retryable or result.error.type == "mode_error"):
            return result
    return Failed(
        chain,
        ChainError(
            "all_fallbacks_failed",
            "Failed all attempts to generate response",
            details={"attempts": attempts},
        ),
    )
