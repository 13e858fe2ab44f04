"""Static checks of a machine: properties of every run, proved from the table alone.

Steps say what they do with :func:`effects` (``@effects("tools")``): ``model``
(calls the model), ``tools`` (runs tools), ``approval`` (asks whether the
pending calls may run) and ``bound`` (ends a loop that has gone on too long,
as ``check_max_runs`` does). The built-in steps are declared here.
:func:`check_machine` searches every path of the table, loops included, for:

* ``approval``: when some state asks for approval, no state runs tools that a
  model asked for without an approval since that model call (and since the run
  entered);
* ``bounded``: every cycle of the machine passes a state with a ``bound`` step;
* ``checkpointed``: no state calls the model after running tools in the same
  state's work, so each tool call is saved at a state boundary before the next
  model call (a run is checkpointed at every transition).

A property that fails comes with a counterexample: the states of a path that
breaks it. ``agentfsm check MODULE:ATTR`` prints them. :mod:`agentfsm.testing` exports
all of it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Literal, TypeAlias, TypeVar

import attrs

from ..machine import MachineTable
from ..modes import langchain
from ..modes import standard as _standard
from ..steps import (
    Step,
    call_llm,
    check_max_runs,
    check_pause,
    check_response_complete,
    check_tool_interrupts,
    check_until_tool,
    check_until_tool_success,
    execute_tools,
    expand_tool_results,
    propagate_state,
    take_tool_answers,
)

__all__ = ["EFFECTS", "Effect", "MachineProblem", "check_machine", "effects", "effects_of"]

Effect: TypeAlias = Literal["model", "tools", "approval", "bound"]
#: Every effect a step may declare.
EFFECTS: Final[frozenset[str]] = frozenset({"model", "tools", "approval", "bound"})
_ATTRIBUTE: Final = "__agentfsm_effects__"

_F = TypeVar("_F", bound=Callable[..., object])


def effects(*kinds: Effect) -> Callable[[_F], _F]:
    """Declare what a step does: ``@effects("tools")`` above ``def my_step(result, opts)``."""
    unknown = sorted(set(kinds) - EFFECTS)
    if unknown:
        raise ValueError(f"unknown effect(s) {unknown}; effects: {sorted(EFFECTS)}")

    def declare(step: _F) -> _F:
        setattr(step, _ATTRIBUTE, frozenset(kinds))
        return step

    return declare


#: The built-in steps' effects (declared here, so the steps stay plain functions).
_BUILT_IN: Final[Mapping[object, frozenset[str]]] = {
    call_llm: frozenset({"model"}),
    execute_tools: frozenset({"tools"}),
    check_max_runs: frozenset({"bound"}),
    _standard.check_approvals: frozenset({"approval"}),
    _standard._decide: frozenset({"bound"}),  # check_max_runs when the loop goes on
    langchain.call_model: frozenset({"model"}),
    langchain.tools_else_model: frozenset({"model", "tools"}),
    # The step loop goes on only while the user's should_continue says so.
    langchain.check_should_continue: frozenset({"bound"}),
    # max_retry_count failures in a row end the loop; a success ends it too.
    langchain.check_success: frozenset({"bound"}),
    # Steps that only read or reshape the conversation.
    **dict.fromkeys(
        (
            check_pause,
            check_response_complete,
            check_tool_interrupts,
            check_until_tool,
            check_until_tool_success,
            expand_tool_results,
            propagate_state,
            take_tool_answers,
            _standard._check_until,
            _standard._this_turns_interrupts,
            langchain.finish,
            langchain.check_needs_response,
            langchain.check_tool_names,
            langchain.start_mode_state,
        ),
        frozenset[str](),
    ),
}


def effects_of(step: Step) -> frozenset[str] | None:
    """What ``step`` declared it does; None when it declared nothing."""
    declared = getattr(step, _ATTRIBUTE, None)
    if declared is not None:
        return frozenset(declared)
    try:
        return _BUILT_IN.get(step)
    except TypeError:  # an unhashable callable declares nothing
        return None


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
        from ..paths import state_label

        steps: dict[tuple[str, str], list[int]] = {}
        for i, (a, b) in enumerate(zip(self.path, self.path[1:], strict=False), start=1):
            steps.setdefault((a, b), []).append(i)
        lines = ["stateDiagram-v2"]
        lines += [
            f"    [*] --> {state_label(state)} : {situation}"
            for situation, state in table.entries.items()
        ]
        drawn: set[tuple[str, str]] = set()
        for e in table.edges:
            numbers = steps.get((e.source, e.dest)) if (e.source, e.dest) not in drawn else None
            label = e.trigger
            if numbers:
                drawn.add((e.source, e.dest))
                label += " ◀ " + ", ".join(f"#{n}" for n in numbers)
            lines.append(f"    {state_label(e.source)} --> {state_label(e.dest)} : {label}")
        lines += [f"    {state_label(t)} --> [*]" for t in table.terminals]
        lines.append(f"    class {state_label(self.path[-1])} broken")
        lines.append("    classDef broken fill:#fee2e2,stroke:#b91c1c,stroke-width:3px")
        return "\n".join(lines) + "\n"


def _state_effects(table: MachineTable) -> dict[str, list[frozenset[str]]]:
    return {
        state: [effects_of(step) or frozenset() for step in steps]
        for state, steps in table.steps.items()
    }


def _successors(table: MachineTable) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {s: [] for s in table.states}
    for e in table.edges:
        if e.dest not in out[e.source]:
            out[e.source].append(e.dest)
    return out


def _approval(table: MachineTable) -> list[MachineProblem]:
    """Search (state, approved since the last model call) from each entry for a tools
    step reached unapproved; the shortest such path is the counterexample."""
    by_state = _state_effects(table)
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
    by_state = _state_effects(table)
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


def _checkpointed(table: MachineTable) -> list[MachineProblem]:
    """A state whose work calls the model after running tools, with no boundary between."""
    problems = []
    for state, declared in _state_effects(table).items():
        ran_tools = False
        for kinds in declared:
            if "model" in kinds and ran_tools:
                problems.append(
                    MachineProblem(
                        rule="checkpointed",
                        message=f"{state!r} calls the model after running tools in the same "
                        "work, so the tool results are not saved at a boundary before it",
                        path=_shortest(table, state),
                    )
                )
                break
            ran_tools = ran_tools or "tools" in kinds
    return problems


def check_machine(table: MachineTable) -> list[MachineProblem]:
    """Every property ``table`` breaks (see the module), each with a counterexample; none: ok."""
    return [*_approval(table), *_bounded(table), *_checkpointed(table)]
