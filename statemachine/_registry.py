"""How a chain is run by name: the mode registry, ``run_chain`` and fallbacks.

The chain looks modes up here and never imports them: modes register
themselves (``import agentfsm`` registers the built-ins), so the arrows point
one way, from the modes down to the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import attrs

from ._errors import ChainError
from ._results import Failed, Terminal

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel

    from ._chain import LLMChain

__all__ = [
    "MODES",
    "Mode",
    "ModeLike",
    "fire_on_error",
    "register_mode",
    "resolve_mode",
    "run_chain",
]


@runtime_checkable
class Mode(Protocol):
    """Anything with ``async run(chain, opts) -> Terminal`` is a mode."""

    async def run(self, chain: LLMChain, opts: Mapping[str, Any] | None = None) -> Terminal: ...


ModeLike: TypeAlias = Mode | str | None

_MODES: dict[str, Callable[[], Mode]] = {}
#: The registered modes by name; ``None`` (one model call, no tools) is registered as "".
MODES: Mapping[str, Callable[[], Mode]] = _MODES


def register_mode(name: str, factory: Callable[[], Mode]) -> None:
    """Make ``chain.run(name)`` build its mode with ``factory()``."""
    _MODES[name] = factory


def resolve_mode(mode: ModeLike) -> Mode:
    """A mode object for ``mode``: None (one call), a registered name, or a Mode."""
    if mode is None:
        mode = ""
    if isinstance(mode, str):
        try:
            return _MODES[mode]()
        except KeyError:
            names = sorted(n for n in _MODES if n)
            raise ValueError(
                f"Unknown mode {mode!r}. Registered modes: {names}; or pass an object "
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
    return fire_on_error(result) if isinstance(result, Failed) else result


def fire_on_error(result: Failed) -> Failed:
    """``result`` once ``on_error`` heard it; a raising handler's error takes its place."""
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
