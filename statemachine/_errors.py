"""Errors: the typed failure a pipeline carries, and the exceptions users catch.

Every exception agentfsm raises is an :class:`AgentfsmError`, so one ``except``
catches them all; a category (``MachineError``, ``StoreError``) catches its
group; each also keeps the standard base it had (in brackets), so an
``except ValueError`` written for it goes on working. All are exported by
``agentfsm``; the tree (checked by ``tests/test_errors.py``)::

    AgentfsmError
    ├── ChainError                       a failure with a ``type``: a Failed run's error
    │   ├── ProviderError                what a model's provider answered (status, stream, body)
    │   ├── OutputError                  a final answer that never fit its output type
    │   └── CassetteMismatchError        agentfsm.testing: a request a cassette did not record
    ├── IllegalTransitionError           (RuntimeError) a move the machine table lacks
    ├── MachineError                     a machine's definition or version
    │   ├── MachineDefinitionError       (ValueError) a table that is not a machine
    │   ├── UnknownMachineError          (LookupError) no machine declared of that name
    │   └── MachineChangedError          (ValueError) a saved run's machine changed since
    │       └── OtherMachineError        (ValueError) the run is of another machine (name)
    ├── StoreError                       (RuntimeError) saved runs and documents; raised
    │   │                                itself: the store's file or database cannot be used
    │   ├── RunNotFoundError             (LookupError) no run of that id
    │   ├── RunExistsError               (ValueError) a new run given an id in use
    │   ├── RunInUseError                (RuntimeError) another process holds the run
    │   │   └── RunFinishedError         (RuntimeError) the run ended: it is never written again
    │   ├── ResumeError                  (ValueError) the run cannot be resumed as asked
    │   │   └── DecisionConflictError    (ValueError) another decide answered the wait first
    │   ├── FormatError                  (ValueError) not a document this version reads
    │   └── UnknownToolError             (LookupError) a loaded chain names a tool not passed
    ├── approvals
    │   ├── DecisionError                (ValueError) decisions that do not answer the
    │   │                                approval as it stands (count, type, digest, ...)
    │   └── InvariantError               (ValueError) decisions that contradict the run
    ├── DurableError                     (RuntimeError) a durable engine (DBOS, Temporal) failed
    └── internal, never seen by a caller
        ├── SSELimitError                (ValueError) an event stream's line or event too
        │                                long: the transport makes it a ProviderError
        ├── UsageError                   the command line's mistakes: exit status 2
        ├── Unsupported                  (TypeError) a hint with no JSON form; ``@tool``
        │                                raises a TypeError naming the parameter
        └── Refused                      (KeyError) a trigger the machine refuses: the
                                         run raises IllegalTransitionError

``DecisionError`` lives with the approval, ``OutputError`` with typed output,
and ``CassetteMismatchError`` in ``agentfsm.testing``; the rest here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "RETRYABLE_TYPES",
    "AgentfsmError",
    "ChainError",
    "DecisionConflictError",
    "DurableError",
    "FormatError",
    "IllegalTransitionError",
    "InvariantError",
    "MachineDefinitionError",
    "MachineError",
    "MachineChangedError",
    "OtherMachineError",
    "ProviderError",
    "ResumeError",
    "RunExistsError",
    "RunFinishedError",
    "RunInUseError",
    "RunNotFoundError",
    "SSELimitError",
    "StoreError",
    "UnknownMachineError",
    "UnknownToolError",
]

#: Error types a fallback may retry on another model: the failure is the
#: provider's, not the conversation's.
RETRYABLE_TYPES = frozenset(
    {"rate_limited", "overloaded", "server_error", "timeout", "connection", "conflict"}
)


class AgentfsmError(Exception):
    """The base of every exception agentfsm raises: ``except AgentfsmError`` catches them all."""


class MachineError(AgentfsmError):
    """A machine's definition or version: ``except MachineError`` catches each of them."""


class MachineDefinitionError(MachineError, ValueError):
    """A table that is not a machine; the message names the state or edge at fault."""


class UnknownMachineError(MachineError, LookupError):
    """A name no declared machine has (a saved run made on a machine not declared here)."""


class MachineChangedError(MachineError, ValueError):
    """A saved run was made on another version of its machine, and no policy lets it go on.

    The message names what changed (states and edges added or removed) and the
    policies that would let it (:mod:`agentfsm.versions`).
    """


class OtherMachineError(MachineChangedError):
    """A saved run met a table of another machine (another name): it is not a version of
    the run's machine, so no policy (pinned, compatible, mapped) applies."""


class ChainError(AgentfsmError):
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


class ProviderError(ChainError):
    """What a model's provider answered when it was not a reply: its ``type`` says whether
    another attempt, or another model, may succeed (``retryable``)."""

    def __repr__(self) -> str:
        return f"ProviderError(type={self.type!r}, message={self.message!r})"


class IllegalTransitionError(AgentfsmError, RuntimeError):
    """A state asked for a move the machine table does not have: a bug, never a stay."""


# ------------------------------------------------------------------ the store


class StoreError(AgentfsmError, RuntimeError):
    """Saved runs and documents; raised itself when the store's file (or a durable
    database) cannot be used: damaged, truncated, or not a store at all."""


class FormatError(StoreError, ValueError):
    """A document this version cannot read: not an agentfsm document, malformed, or newer."""


class UnknownToolError(StoreError, LookupError):
    """A loaded chain names a tool the caller did not pass (``strict=False`` binds a stand-in)."""


class RunNotFoundError(StoreError, LookupError):
    """The store has no run of that id."""


class ResumeError(StoreError, ValueError):
    """The saved run cannot be resumed as asked (it ended, or needs decisions)."""


class DecisionConflictError(ResumeError):
    """Another process's decisions answered the run's wait first: these were not sent.

    ``decisions`` are the ones the run took (None when they could not be read back).
    """

    def __init__(
        self, message: str, *, run_id: str, decisions: Sequence[Mapping[str, Any]] | None
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.decisions = decisions


class RunExistsError(StoreError, ValueError):
    """A new run was given the id of a run the store has (and was not asked to replace it)."""


class RunInUseError(StoreError, RuntimeError):
    """Another process holds the run's lease: it is running or resuming it now."""


class RunFinishedError(RunInUseError):
    """The run ended (ok or in error) and a finished run is never written again: a
    resumer that loaded it before another process finished it is refused."""


class DurableError(AgentfsmError, RuntimeError):
    """A durable engine could not run a run as asked (its workflow failed or was cancelled)."""


# ------------------------------------------------------------------ approvals


class InvariantError(AgentfsmError, ValueError):
    """A state whose conversation contradicts its approval requests: nothing was run."""


# ------------------------------------------------------------------ providers


class SSELimitError(AgentfsmError, ValueError):
    """A line or an event grew past its bound (``what`` is ``line`` or ``event``)."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"an event-stream {what} is longer than {limit} bytes")
        self.what = what
        self.limit = limit
