"""What a checkpoint store is: three calls over JSON text, and the records they pass.

A store keeps strings only; :mod:`agentfsm.store.checkpointer` packs runs into
them and :class:`~agentfsm.store.sqlite.SQLiteStore` is the embedded store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal, Protocol, runtime_checkable

import attrs

from .._errors import (
    ResumeError,
    RunExistsError,
    RunFinishedError,
    RunInUseError,
    RunNotFoundError,
    StoreError,
)
from .._owner import new_owner
from .._results import Failed, Interrupted, Ok, Paused

__all__ = [
    "RUN_STATUS",
    "ResumeError",
    "RunExistsError",
    "RunFinishedError",
    "RunInUseError",
    "RunDigest",
    "RunInfo",
    "RunNotFoundError",
    "RunStatus",
    "Store",
    "Deletes",
    "Leases",
    "StoreError",
    "StoreWrite",
    "StoredRun",
    "new_owner",
]

RunStatus = Literal["running", "ok", "paused", "interrupted", "error"]

#: The status a run is saved with, by the type of the result it ended in.
RUN_STATUS: Final[Mapping[type, RunStatus]] = {
    Ok: "ok",
    Paused: "paused",
    Interrupted: "interrupted",
    Failed: "error",
}


@attrs.define
class StoreWrite:
    """One checkpoint: what is new since the last one, applied all or nothing.

    Rows are JSON text, so a store only keeps strings. Rows may be written again
    after a failed write; a store replaces a row it already has. A record is made
    anew for each write and only read by the store (a plain attrs class: a frozen
    one would write each field through ``object.__setattr__``, twice per model call).
    """

    segment: int
    state: str
    status: RunStatus
    #: Transitions of the whole run, every segment counted.
    steps: int
    #: The segment's header (entry, first chain, options), on its first write.
    header: str | None = None
    #: New rows of the run's message and context tables: ``(index, JSON)``.
    messages: Sequence[tuple[int, str]] = ()
    contexts: Sequence[tuple[int, str]] = ()
    #: New transitions of this segment: ``(seq, JSON)``.
    transitions: Sequence[tuple[int, str]] = ()
    result: str | None = None
    agent_state: str | None = None
    #: One line for listings: the pause reason, the error, the interrupt...
    summary: str | None = None
    #: Who writes: a running run's writer holds a lease on it, renewed by its writes,
    #: given up by the write that ends it. A write by another owner in the meantime
    #: is refused with :class:`RunInUseError`.
    owner: str | None = None
    #: The first write of a new run: refused with :class:`RunExistsError` if the id
    #: is taken, unless ``replace`` (the old run's rows are deleted first).
    create: bool = False
    replace: bool = False
    #: The writer's first write: it claims the run. A later write of a writer whose
    #: run went further in another process meanwhile is refused (no splicing).
    claim: bool = False
    #: The run's log head as the writer read it (:attr:`StoredRun.head`): a write
    #: that does not extend that head is refused before anything else happens.
    head: str | None = None


@attrs.frozen
class RunInfo:
    """A run as a listing shows it."""

    run_id: str
    status: RunStatus
    state: str
    steps: int
    segments: int
    summary: str | None
    created: float
    updated: float


@attrs.frozen
class RunDigest:
    """A run as a search reads it from its checkpoints, without loading it."""

    #: The machine its newest segment names (None when no checkpoint says).
    machine: str | None
    #: The tools its messages call.
    tools: frozenset[str]
    #: The run's id and every message's text (tool results too), lower-cased.
    text: str


@attrs.frozen
class StoredRun:
    """A run's rows as the store keeps them (JSON text), before decoding."""

    run_id: str
    status: RunStatus
    state: str
    headers: tuple[str, ...]
    transitions: tuple[tuple[str, ...], ...]
    messages: tuple[str, ...]
    contexts: tuple[str, ...]
    result: str | None
    agent_state: str | None
    #: The newest checkpoint this read saw (opaque; None when the store keeps none):
    #: a write carrying it as :attr:`StoreWrite.head` extends exactly this read.
    head: str | None = None


@runtime_checkable
class Store(Protocol):
    """Where checkpoints go: three calls over JSON text.

    A store that keeps leases (as :class:`~agentfsm.store.sqlite.SQLiteStore` does)
    is also :class:`Leases`: a resume then claims the run before anything runs, and
    its holder checks the lease at every boundary. A write carrying
    :attr:`StoreWrite.head` must be refused unless the run's head is still that one.
    """

    def write(self, run_id: str, write: StoreWrite) -> None:
        """Apply ``write`` atomically, or raise and change nothing."""
        ...

    def read(self, run_id: str) -> StoredRun:
        """Every row of the run; :class:`RunNotFoundError` if there is none."""
        ...

    def runs(self) -> list[RunInfo]:
        """Every run, the most recently updated first."""
        ...


@runtime_checkable
class Leases(Protocol):
    """A store that keeps leases: one place at a time runs a run.

    A running run's writer holds its lease; a write renews it and the write that ends
    the run gives it up (:attr:`StoreWrite.owner`). A store without leases runs a run
    wherever it is resumed. A ``lease`` of 0 seconds keeps none.
    """

    #: Seconds a running run stays claimed after its holder last renewed it.
    lease: float

    def claim(self, run_id: str, owner: str, head: str | None) -> None:
        """Take the run's lease for ``owner`` before anything runs, as one compare-and-set:
        refused when the run ended (:class:`RunFinishedError`), went on since ``head`` was
        read, or another live process holds it (:class:`RunInUseError`)."""
        ...

    def renew(self, run_id: str, owner: str) -> bool:
        """Extend ``owner``'s lease by :attr:`lease` seconds from now; False when ``owner``
        no longer holds it (the run ended, or another process took it)."""
        ...

    def release(self, run_id: str, owner: str, *, running: bool = False) -> None:
        """Give back ``owner``'s claim on a run it has not written since (nothing ran);
        with ``running``, also one it left running that nothing runs (a fork's, a
        migration's)."""
        ...


@runtime_checkable
class Deletes(Protocol):
    """A store that can forget a run: a fork left half written is deleted."""

    def delete(self, run_id: str) -> None:
        """Forget the run and everything saved of it."""
        ...
