"""The cattrs converter of the engine's plain values.

Messages and their parts, tool calls and results, agent states and errors are
data: one converter writes and reads them all. Chains, results and traces hold
live objects and are written around it (:mod:`._packing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cattrs.preconf.json import make_converter

from .._errors import ChainError

__all__ = ["converter", "error_in", "error_out"]


def error_out(error: ChainError) -> dict[str, Any]:
    """An error as data; ``retryable`` only when it is not its type's default."""
    out: dict[str, Any] = {"type": error.type, "message": error.message}
    if error.retryable != ChainError(error.type, "").retryable:
        out["retryable"] = error.retryable
    if error.details:
        out["details"] = converter.unstructure(dict(error.details))
    return out


def error_in(data: Any, _: Any) -> ChainError:
    """An error :func:`error_out` wrote (a cattrs structure hook)."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a ChainError is an object, got: {type(data).__name__}")
    retryable = data.get("retryable")
    details = data.get("details")
    return ChainError(
        str(data["type"]),
        str(data["message"]),
        retryable=None if retryable is None else bool(retryable),
        details=dict(details) if isinstance(details, Mapping) else None,
    )


#: The converter of the plain values; chains and traces are written around it.
converter: Final = make_converter(omit_if_default=True)
converter.register_unstructure_hook(ChainError, error_out)
converter.register_structure_hook(ChainError, error_in)
