"""Static checks of a machine: properties of every run, proved from the table alone.

Steps say what they do with :func:`~agentfsm.effects.effects`
(``@effects("tools")``): ``model`` (calls the model), ``tools`` (runs tools),
``approval`` (asks whether the pending calls may run) and ``bound`` (ends a loop
that has gone on too long, as ``check_max_runs`` does); :mod:`agentfsm.effects`
declares the built-in steps. :func:`check_machine` searches every path of the
table, loops included, for:

* ``approval``: when some state asks for approval, no state runs tools that a
  model asked for without an approval since that model call (and since the run
  entered);
* ``bounded``: every cycle of the machine passes a state with a ``bound`` step;
* ``checkpointed``: no state calls the model after running tools in the same
  state's work, so each tool call is saved at a state boundary before the next
  model call (a run is checkpointed at every transition). Given the agent's
  ``tools``, a ``tools`` step also does what they declare: one that runs a
  :class:`~agentfsm.SubAgent` (its child runs tools, then calls the model, and
  its progress is saved with the parent's transition) breaks it too.

A property that fails comes with a counterexample: the states of a path that
breaks it. ``agentfsm check MODULE:ATTR`` prints them. :mod:`agentfsm.testing` exports
all of it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ._effects import EFFECTS, Effect, effects, effects_of, lent_effects, step_effects
from ._machine import Edge, MachineTable
from ._mermaid import Drawing, mermaid

__all__ = ["EFFECTS", "Effect", "MachineProblem", "check_machine", "effects", "effects_of"]


@attrs.frozen
class MachineProblem:
    """A property the machine breaks, with a path that breaks it."""

    #: ``approval``, ``bounded`` or ``checkpointed``.
    rule: str
    message: str
    #: The states of the counterexample, from an entry.
    path: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}\n  counterexample: {' -> '.join(self.path)}"

    def mermaid(self, table: MachineTable) -> str:
        """The machine as a Mermaid state diagram, the counterexample's edges numbered."""
        # import time: only a drawing needs it
        from ._paths import state_label

        steps: dict[tuple[str, str], list[int]] = {}
        for i, (a, b) in enumerate(zip(self.path, self.path[1:], strict=False), start=1):
            steps.setdefault((a, b), []).append(i)
        drawn: set[tuple[str, str]] = set()

        def edge_label(e: Edge) -> str:
            # The steps are said once, on the first edge between the two states.
            numbers = steps.get((e.source, e.dest)) if (e.source, e.dest) not in drawn else None
            if not numbers:
                return e.trigger
            drawn.add((e.source, e.dest))
            return e.trigger + " ◀ " + ", ".join(f"#{n}" for n in numbers)

        drawing = Drawing(
            states=table.states,
            terminals=table.terminals,
            entries=table.entries,
            edges=table.edges,
            id=state_label,
            edge_label=edge_label,
            state_class=lambda state: "broken" if state == self.path[-1] else None,
        )
        return mermaid(
            drawing,
            class_defs={"broken": "fill:#fee2e2,stroke:#b91c1c,stroke-width:3px"},
            class_defs_last=True,
        )


def _successors(table: MachineTable) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {s: [] for s in table.states}
    for e in table.edges:
        if e.dest not in out[e.source]:
            out[e.source].append(e.dest)
    return out


def _approval(table: MachineTable) -> list[MachineProblem]:
    """Search (state, approved since the last model call) from each entry for a tools
    step reached unapproved; the shortest such path is the counterexample."""
    by_state = step_effects(table)
    if not any("approval" in e for steps in by_state.values() for e in steps):
        return []
    following = _successors(table)
    Node = tuple[str, bool]
    parent: dict[Node, Node | None] = {}
    queue: deque[Node] = deque()
    for entry in dict.fromkeys(table.entries.values()):
        parent[(entry, False)] = None
        queue.append((entry, False))
    while queue:
        node = queue.popleft()
        state, approved = node
        for declared in by_state.get(state, ()):
            if "model" in declared:
                approved = False
            if "approval" in declared:
                approved = True
            if "tools" in declared and not approved:
                return [
                    MachineProblem(
                        rule="approval",
                        message=f"{state!r} runs tools the model asked for, and the path "
                        "to it passes no approval check since the model call",
                        path=_walk_back(parent, node),
                    )
                ]
        for dest in following[state]:
            if dest in table.steps and (dest, approved) not in parent:
                parent[(dest, approved)] = node
                queue.append((dest, approved))
    return []


def _walk_back(
    parent: Mapping[tuple[str, bool], tuple[str, bool] | None], node: tuple[str, bool]
) -> tuple[str, ...]:
    states: list[str] = []
    at: tuple[str, bool] | None = node
    while at is not None:
        states.append(at[0])
        at = parent[at]
    return tuple(reversed(states))


def _bounded(table: MachineTable) -> list[MachineProblem]:
    """A cycle of working states none of whose states has a ``bound`` step."""
    by_state = step_effects(table)
    free = {s for s in table.working if not any("bound" in e for e in by_state[s])}
    following = {s: [d for d in ds if d in free] for s, ds in _successors(table).items()}
    cycle = _find_cycle(free, following)
    if cycle is None:
        return []
    lead = _shortest(table, cycle[0])
    return [
        MachineProblem(
            rule="bounded",
            message=f"the cycle {' -> '.join((*cycle, cycle[0]))} passes no step that bounds "
            "it (check_max_runs, or a step declared @effects('bound'))",
            path=(*lead, *cycle[1:], cycle[0]),
        )
    ]


def _find_cycle(nodes: Iterable[str], following: Mapping[str, list[str]]) -> list[str] | None:
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(state: str) -> list[str] | None:
        colour[state] = 1
        stack.append(state)
        for dest in following[state]:
            if colour.get(dest) == 1:
                return stack[stack.index(dest) :]
            if dest not in colour:
                found = visit(dest)
                if found is not None:
                    return found
        stack.pop()
        colour[state] = 2
        return None

    for state in sorted(nodes):
        if state not in colour:
            found = visit(state)
            if found is not None:
                return found
    return None


def _shortest(table: MachineTable, goal: str) -> tuple[str, ...]:
    """The shortest path of states from an entry to ``goal``."""
    following = _successors(table)
    parent: dict[str, str | None] = {}
    queue: deque[str] = deque()
    for entry in dict.fromkeys(table.entries.values()):
        parent[entry] = None
        queue.append(entry)
    while queue:
        state = queue.popleft()
        if state == goal:
            break
        for dest in following[state]:
            if dest not in parent:
                parent[dest] = state
                queue.append(dest)
    states: list[str] = []
    at: str | None = goal
    while at is not None:
        states.append(at)
        at = parent.get(at)
    return tuple(reversed(states))


def _checkpointed(table: MachineTable, tools: Sequence[Any]) -> list[MachineProblem]:
    """A state whose work calls the model after running tools, with no boundary between:
    a later step after an earlier one, or a tool that runs tools and calls the model."""
    lent = lent_effects(tools)
    both = sorted(name for name, kinds in lent.items() if {"model", "tools"} <= kinds)
    problems = []
    for state, declared in step_effects(table).items():
        ran_tools = False
        for kinds in declared:
            if "tools" in kinds and both:
                message = (
                    f"{state!r} runs the tool(s) {', '.join(both)}, which run tools and then "
                    "call the model inside this state's work, so those tool results are not "
                    "saved at a boundary before it"
                )
            elif ("model" in kinds or ("tools" in kinds and _calls_model(lent))) and ran_tools:
                message = (
                    f"{state!r} calls the model after running tools in the same "
                    "work, so the tool results are not saved at a boundary before it"
                )
            else:
                ran_tools = ran_tools or "tools" in kinds
                continue
            problems.append(
                MachineProblem(rule="checkpointed", message=message, path=_shortest(table, state))
            )
            break
    return problems


def _calls_model(lent: Mapping[str, frozenset[str]]) -> bool:
    return any("model" in kinds for kinds in lent.values())


def check_machine(table: MachineTable, *, tools: Iterable[Any] = ()) -> list[MachineProblem]:
    """Every property ``table`` breaks (see the module), each with a counterexample; none: ok.

    ``tools`` are the tools its runs offer the model (an agent's ``tools``): a
    ``tools`` step does what they declare too (``Tool.effects``).
    """
    return [*_approval(table), *_bounded(table), *_checkpointed(table, list(tools))]
