"""Traces: the transitions a run took, each with the chain it carried."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._messages import Usage
from ._results import Continue

if TYPE_CHECKING:
    from ._chain import LLMChain
    from ._results import PipelineResult

__all__ = ["Trace", "Transition", "total_usage"]


class Transition:
    """One move of a run: ``source --trigger--> dest``.

    ``chain`` is the chain the move carried (a snapshot: chains are immutable,
    and consecutive ones share their messages), ``elapsed`` the seconds the
    source state's work took, ``detail`` what it did (which model answered,
    which tools ran...). Two transitions are equal when they take the same edge.
    Given ``before`` (the chain the step was given), ``describe`` (the state's
    :data:`~agentfsm.MachineTable.details` function, if it has one) and ``worked``
    (what the step returned; None for a ``Continue`` with this move's ``chain``)
    instead of ``detail``, the detail is built from them when first read: a run
    records its steps' details that way, so one nobody reads costs nothing, and the
    record holds no closure and no result the chain already says. ``usage`` is the tokens
    of the model call the step made (its detail's ``"usage"``), kept apart so that
    summing a run's tokens builds no detail.

    A run records seven of these per model call, so a record is a few plain
    slots written once (a frozen attrs class costs several times as much to
    build); the fields are read-only properties (the store's packer, which writes
    every one of them, reads the slots).
    """

    __slots__ = (
        "_before",
        "_chain",
        "_children",
        "_describe",
        "_dest",
        "_detail",
        "_elapsed",
        "_source",
        "_trigger",
        "_usage",
        "_worked",
    )

    def __init__(
        self,
        source: str,
        trigger: str,
        dest: str,
        chain: LLMChain,
        elapsed: float = 0.0,
        detail: Mapping[str, Any] | None = None,
        *,
        describe: Callable[[LLMChain, PipelineResult], Mapping[str, Any] | None] | None = None,
        before: LLMChain | None = None,
        worked: PipelineResult | None = None,
        usage: Mapping[str, int] | None = None,
    ) -> None:
        self._source = source
        self._trigger = trigger
        self._dest = dest
        self._chain = chain
        self._elapsed = elapsed
        self._detail = detail
        self._describe = describe
        self._before = before
        self._worked = worked
        if usage is None and detail is not None:
            counts = detail.get("usage")
            usage = counts if isinstance(counts, Mapping) else None
        self._usage = usage
        self._children: tuple[Trace, ...] = ()

    @property
    def source(self) -> str:
        return self._source

    @property
    def trigger(self) -> str:
        return self._trigger

    @property
    def dest(self) -> str:
        return self._dest

    @property
    def chain(self) -> LLMChain:
        return self._chain

    @property
    def elapsed(self) -> float:
        return self._elapsed

    @property
    def detail(self) -> Mapping[str, Any] | None:
        before = self._before
        if before is not None:  # built now, from what the step was given and returned
            describe, usage = self._describe, self._usage
            described = None
            if describe is not None:
                worked = self._worked
                if worked is None:  # a Continue with this move's chain, not kept
                    worked = Continue(chain=self._chain)
                described = describe(before, worked)
            self._detail = described if usage is None else {**(described or {}), "usage": usage}
            self._describe = self._before = self._worked = None
        return self._detail

    @property
    def usage(self) -> Mapping[str, int] | None:
        """The tokens of the model call this step made, if it made one."""
        return self._usage

    @property
    def children(self) -> tuple[Trace, ...]:
        """The traces of the child machines this step ran (a child machine's run, a
        subagent's), in the order they started; most steps run none. Their tokens are
        not in :attr:`usage` (the step's own call's) but count in :func:`total_usage`."""
        return self._children

    def with_children(self, children: Sequence[Trace]) -> Transition:
        """This move with ``children`` as the child runs it made (set once, when they end)."""
        self._children = tuple(children)
        return self

    def __eq__(self, other: object) -> bool:
        if type(other) is not Transition:
            return NotImplemented
        return (self._source, self._trigger, self._dest) == (
            other._source,
            other._trigger,
            other._dest,
        )

    def __hash__(self) -> int:
        return hash((self._source, self._trigger, self._dest))

    def __repr__(self) -> str:
        return (
            f"Transition(source={self._source!r}, trigger={self._trigger!r}, "
            f"dest={self._dest!r}, elapsed={self._elapsed!r}, detail={self.detail!r})"
        )


@attrs.define
class Trace:
    """The path of one run: where it entered and every transition since."""

    entry: str
    transitions: list[Transition] = attrs.field(factory=list)
    machine: str = "standard"
    #: The machine's version and fingerprint (``MachineTable.version``, ``.fingerprint``);
    #: None in a trace recorded before machines had them.
    machine_version: int | None = None
    machine_fingerprint: str | None = None
    #: Where the run rested on the previous segment's machine when it was moved here
    #: (a migration: this segment enters at the state that one maps to); None otherwise.
    migrated_from: str | None = None

    def __iter__(self) -> Iterator[Transition]:
        return iter(self.transitions)

    def __len__(self) -> int:
        return len(self.transitions)

    @property
    def states(self) -> list[str]:
        """The states visited, entry first."""
        return [self.entry, *(t.dest for t in self.transitions)]

    @property
    def triggers(self) -> list[str]:
        return [t.trigger for t in self.transitions]

    @property
    def path(self) -> str:
        """The states visited, as one space-separated string."""
        return " ".join(self.states)

    @property
    def edges(self) -> list[tuple[str, str, str]]:
        """``(source, trigger, dest)`` of every transition, in order."""
        return [(t.source, t.trigger, t.dest) for t in self.transitions]

    @property
    def terminal(self) -> str | None:
        return self.transitions[-1].dest if self.transitions else None

    @property
    def usage(self) -> Usage:
        """The tokens of the run's model calls, its child runs' included (each call's are
        in its step's detail)."""
        return total_usage(self.transitions)

    def where(self, state: str) -> list[Transition]:
        """The transitions that left ``state``."""
        return [t for t in self.transitions if t.source == state]


def total_usage(transitions: Iterable[Transition]) -> Usage:
    """The usage the transitions' details record, summed, with their child runs' usage."""
    total = Usage()
    for transition in transitions:
        counts = transition._usage
        if counts is not None:
            total += Usage.from_dict(counts)
        for child in transition._children:
            total += total_usage(child.transitions)
    return total
