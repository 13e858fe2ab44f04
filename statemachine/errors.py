"""Errors: the typed failure a pipeline carries, and the exceptions users catch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RETRYABLE_TYPES", "ChainError", "IllegalTransitionError"]

#: Error types a fallback may retry on another model: the failure is the
#: provider's, not the conversation's.
RETRYABLE_TYPES = frozenset({"rate_limited", "overloaded", "server_error", "timeout", "connection"})


class ChainError(Exception):
    """A failure with a machine-readable ``type`` and a human ``message``.

    It is both the ``error`` of a :class:`~agentfsm.results.Failed` result
    and an exception raised where there is no pipeline to carry it (building a
    chain, expanding a tool result).
    """

    def __init__(
        self,
        type: str,
        message: str,
        *,
        retryable: bool | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.type = type
        self.message = message
        self.retryable = type in RETRYABLE_TYPES if retryable is None else retryable
        self.details: Mapping[str, Any] = dict(details or {})

    def __repr__(self) -> str:
        return f"ChainError(type={self.type!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChainError):
            return NotImplemented
        return (self.type, self.message) == (other.type, other.message)

    def __hash__(self) -> int:
        return hash((self.type, self.message))


class IllegalTransitionError(RuntimeError):
    """A state asked for a move the machine table does not have: a bug, never a stay."""
