"""Traces: the transitions a run took, each with the chain it carried."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .messages import Usage

if TYPE_CHECKING:
    from .chain import LLMChain

__all__ = ["Trace", "Transition", "total_usage"]


@attrs.frozen
class Transition:
    """One move of a run: ``source --trigger--> dest``.

    ``chain`` is the chain the move carried (a snapshot: chains are immutable),
    ``elapsed`` the seconds the source state's work took, ``detail`` what it did
    (which model answered, which tools ran...).
    """

    source: str
    trigger: str
    dest: str
    chain: LLMChain = attrs.field(repr=False, eq=False)
    elapsed: float = attrs.field(default=0.0, eq=False)
    detail: Mapping[str, Any] | None = attrs.field(default=None, eq=False)


@attrs.define
class Trace:
    """The path of one run: where it entered and every transition since."""

    entry: str
    transitions: list[Transition] = attrs.field(factory=list)
    machine: str = "standard"

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
        """The tokens of the run's model calls, summed (each call's are in its step's detail)."""
        return total_usage(self.transitions)

    def where(self, state: str) -> list[Transition]:
        """The transitions that left ``state``."""
        return [t for t in self.transitions if t.source == state]


def total_usage(transitions: Iterable[Transition]) -> Usage:
    """The usage the transitions' details record, summed."""
    total = Usage()
    for transition in transitions:
        counts = (transition.detail or {}).get("usage")
        if isinstance(counts, Mapping):
            total += Usage.from_dict(counts)
    return total
