"""The standard mode's machine: one table of states and transitions.

The table is the single source of truth: the shared ``transitions.Machine`` is
built from it (once), runs move along it, and the diagrams are drawn from it,
so every trace is a path of the published diagram.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from transitions import Machine, Transition
from transitions.core import listify

__all__ = ["STANDARD", "Edge", "MachineTable"]


@attrs.frozen
class Edge:
    """One transition: ``trigger`` moves a run from ``source`` to ``dest``, because ``why``."""

    trigger: str
    source: str
    dest: str
    why: str


class _Transition(Transition):
    """A transition that goes straight to the state change when nothing hooks into it.

    The table has no conditions or callbacks: the work lives in the states'
    steps. Any callback added to the machine, a transition or the two states
    takes the full path.
    """

    def execute(self, event_data: Any) -> bool:
        machine = event_data.machine
        source = machine.states[self.source]
        dest = machine.states[self.dest]
        if (
            self.prepare
            or self.conditions
            or self.before
            or self.after
            or machine.before_state_change
            or machine.after_state_change
            or source.on_exit
            or dest.on_enter
            or dest.final
        ):
            return bool(super().execute(event_data))
        machine.set_state(dest, event_data.model)
        event_data.update(dest)
        return True


class _SharedMachine(Machine):
    """A machine shared by many runs: nothing is bound onto them.

    Runs fire events through the machine itself, so the per-run convenience
    methods ``transitions`` would attach (``is_<state>``, one method per
    trigger) are left out: they cost time and memory per run and would clash
    with a model's own names.
    """

    transition_cls = _Transition

    def add_model(self, model: Any, initial: Any = None) -> None:
        """Register runs at ``initial``; no trigger or state method is bound onto them."""
        initial = initial if initial is not None else self.initial
        if initial is None:
            raise ValueError("A run needs an initial state: the table's entries name them.")
        for run in listify(model):
            if run not in self.models:
                self.set_state(initial, model=run)
                self.models.append(run)


@attrs.frozen
class MachineTable:
    """States, entries and edges of a machine, with the ``transitions.Machine`` built from them."""

    name: str
    working: tuple[str, ...]
    terminals: tuple[str, ...]
    #: Where a run starts, by the situation its chain is in.
    entries: Mapping[str, str]
    edges: tuple[Edge, ...]

    @property
    def states(self) -> tuple[str, ...]:
        return (*self.working, *self.terminals)

    @functools.cached_property
    def machine(self) -> Machine:
        """The one ``transitions.Machine`` of this table; runs are added to it as models."""
        return _SharedMachine(
            model=None,
            states=list(self.states),
            transitions=[
                {"trigger": e.trigger, "source": e.source, "dest": e.dest} for e in self.edges
            ],
            initial=None,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )

    @functools.cached_property
    def successors(self) -> Mapping[str, Mapping[str, str]]:
        """``{source: {trigger: dest}}``."""
        out: dict[str, dict[str, str]] = {s: {} for s in self.states}
        for e in self.edges:
            out[e.source][e.trigger] = e.dest
        return out

    def edge(self, source: str, trigger: str) -> Edge | None:
        for e in self.edges:
            if e.source == source and e.trigger == trigger:
                return e
        return None

    def is_path(self, states: Sequence[str], triggers: Iterable[str] | None = None) -> bool:
        """Whether ``states`` starts at an entry and follows edges of the table."""
        if not states or states[0] not in self.entries.values():
            return False
        pairs = list(itertools.pairwise(states))
        if triggers is None:
            return all(b in self.successors[a].values() for a, b in pairs)
        return all(
            self.successors[a].get(t) == b for (a, b), t in zip(pairs, triggers, strict=True)
        )


def _each_working(trigger: str, dest: str, why: str, working: Sequence[str]) -> list[Edge]:
    return [Edge(trigger, s, dest, why) for s in working]


_WORKING = (
    "expanding",
    "calling",
    "interrupt_check",
    "executing",
    "propagating",
    "until_check",
    "deciding",
)

STANDARD = MachineTable(
    name="standard",
    working=_WORKING,
    terminals=("ok", "paused", "interrupted", "error"),
    entries={
        "fresh": "expanding",
        "pending tool calls": "interrupt_check",
        "tool results": "propagating",
    },
    edges=(
        Edge(
            "expanded",
            "expanding",
            "calling",
            "last turn's tool-result expansions are in the conversation",
        ),
        Edge("called", "calling", "interrupt_check", "the model replied in full"),
        Edge(
            "failed",
            "calling",
            "error",
            "the model call failed, the reply was cut off or filtered, "
            "or the failure budget is spent",
        ),
        Edge("paused", "calling", "paused", "should_pause() asked to stop after the reply"),
        Edge("clear", "interrupt_check", "executing", "no pending call needs approval"),
        Edge(
            "interrupted",
            "interrupt_check",
            "interrupted",
            "the model asked for a tool that needs approval",
        ),
        Edge("executed", "executing", "propagating", "every pending call has its result"),
        Edge("propagated", "propagating", "until_check", "this turn's state updates are merged"),
        Edge("interrupted", "propagating", "interrupted", "a tool asked to interrupt the run"),
        Edge("satisfied", "until_check", "ok", "a target tool was called"),
        Edge("unsatisfied", "until_check", "deciding", "no target tool result (or no target)"),
        Edge("loop", "deciding", "expanding", "the chain needs a response, within max_runs"),
        Edge("done", "deciding", "ok", "the model answered without asking for tools"),
        Edge(
            "failed",
            "deciding",
            "error",
            "max_runs reached, or the model stopped without calling the target tool",
        ),
        *_each_working(
            "paused",
            "paused",
            "a step paused with a cause",
            [s for s in _WORKING if s != "calling"],
        ),
        *_each_working(
            "failed",
            "error",
            "a callback or an added step failed",
            [s for s in _WORKING if s not in ("calling", "deciding")],
        ),
    ),
)
