"""Effects: what a step, or a tool, does that a guard must know of, declared on it.

Every guard that asks "is this the approval check?" or "does this state run the
model's tool calls?" asks the table for effects, never a function for its name:
a wrapper of ``execute_tools`` under another name runs tools all the same. The
effects are

* ``model`` -- calls the model;
* ``tools`` -- runs the tool calls the model asked for;
* ``approval`` -- asks whether the pending calls may run (a gate);
* ``bound`` -- ends a loop that has gone on too long (as ``check_max_runs`` does).

A step declares them with ``@effects("tools")`` above ``def my_step(result, opts)``,
as every built-in step does where it is defined (``@effects()``: it does none of
them). A :class:`~agentfsm.tools.Tool` declares
its own with ``@tool(effects=("model",))`` (a :class:`~agentfsm.SubAgent` calls a
model and runs tools): :func:`lent_effects` says what a ``tools`` step does once
it runs them. :func:`step_effects` and :func:`state_effects` read a whole table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, TypeVar

if TYPE_CHECKING:
    from ._machine import MachineTable

__all__ = [
    "EFFECTS",
    "Effect",
    "effects",
    "effects_of",
    "lent_effects",
    "state_effects",
    "step_effects",
    "tool_effects",
]

Effect: TypeAlias = Literal["model", "tools", "approval", "bound"]
#: Every effect a step may declare.
EFFECTS: Final[frozenset[str]] = frozenset({"model", "tools", "approval", "bound"})
#: Where :func:`effects` keeps a step's declaration.
_ATTRIBUTE: Final = "__agentfsm_effects__"
_NONE: Final[frozenset[str]] = frozenset()

_F = TypeVar("_F", bound=Callable[..., object])


def _checked(kinds: Iterable[str], what: str = "effect") -> frozenset[str]:
    """``kinds`` as a set of effects, or ``ValueError`` naming the unknown ones."""
    found = frozenset(kinds)
    unknown = sorted(found - EFFECTS)
    if unknown:
        # import time: only a mistake needs it
        import difflib

        hints = [
            f"{k!r} (did you mean {close[0]!r}?)"
            if (close := difflib.get_close_matches(k, sorted(EFFECTS), n=1))
            else repr(k)
            for k in unknown
        ]
        raise ValueError(f"unknown {what}(s) {', '.join(hints)}; effects: {sorted(EFFECTS)}")
    return found


def effects(*kinds: Effect) -> Callable[[_F], _F]:
    """Declare what a step does: ``@effects("tools")`` above ``def my_step(result, opts)``."""
    declared = _checked(kinds)

    def declare(step: _F) -> _F:
        setattr(step, _ATTRIBUTE, declared)
        return step

    return declare


def effects_of(step: Any) -> frozenset[str] | None:
    """What ``step`` declared it does; None when it declared nothing.

    A step that runs a child machine (its ``machine`` attribute is a table, as
    :func:`~agentfsm.run_machine`'s) does what the child's states do.
    """
    declared = getattr(step, _ATTRIBUTE, None)
    if declared is not None:
        return frozenset(declared)
    child: Any = getattr(step, "machine", None)
    if isinstance(getattr(child, "steps", None), Mapping) and hasattr(child, "working"):
        return frozenset().union(*state_effects(child).values())  # a child machine's step
    return None


def step_effects(table: MachineTable) -> Mapping[str, tuple[frozenset[str], ...]]:
    """``{state: effects of each step, in order}``; a step that declared none does none."""
    return {
        state: tuple(effects_of(step) or _NONE for step in its_steps)
        for state, its_steps in table.steps.items()
    }


def state_effects(table: MachineTable) -> Mapping[str, frozenset[str]]:
    """``{state: everything its steps do}`` for each working state of ``table``.

    Every guard reads this: the states with ``approval`` are the gates, the
    states with ``tools`` run the model's tool calls.
    """
    return {state: frozenset().union(*kinds) for state, kinds in step_effects(table).items()}


def tool_effects(tool: Any) -> frozenset[str]:
    """What ``tool`` declared its calls do (``Tool.effects``); none by default."""
    return frozenset(getattr(tool, "effects", None) or ())


def lent_effects(tools: Iterable[Any]) -> Mapping[str, frozenset[str]]:
    """``{tool name: effects}`` for the ``tools`` that declared any: what a ``tools``
    step does besides running them once it runs one of them."""
    return {t.name: kinds for t in tools if (kinds := tool_effects(t))}
