"""Resume policies: how a run saved on another version of its machine may go on.

A policy is a value (:data:`pinned`, :data:`compatible`, :func:`mapped`);
``with resuming(policy):`` makes one the policy of the runs loaded and resumed
inside the block.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Final, TypeAlias

import attrs

from .._errors import MachineChangedError
from .._machine import MachineTable
from .._shape import MachineShape, entry_faults, gate_fault, shape_of, skips_gate

__all__ = [
    "Compatible",
    "Mapped",
    "Pinned",
    "Policy",
    "compatible",
    "mapped",
    "pinned",
    "policy_now",
    "resuming",
]


@attrs.frozen
class Pinned:
    """The run finishes on the table it started on: declared still, or rebuilt from the
    shape the run kept (its steps found by qualified name among the declared tables)."""

    name: str = "pinned"


@attrs.frozen
class Compatible:
    """The run goes on on the new table when its recorded path is one of the new table's
    paths and the state it rests at is a state there."""

    name: str = "compatible"


@attrs.frozen
class Mapped:
    """Runs of ``old`` go on on ``new`` at ``mapping[state]`` (checked: :func:`mapped`)."""

    old: MachineShape
    new: MachineShape
    #: Every resting state of ``old`` (its working states and terminals) to a state of ``new``.
    mapping: Mapping[str, str]
    name: str = "mapped"


#: A resume policy: :data:`pinned`, :data:`compatible` or :func:`mapped`.
Policy: TypeAlias = Pinned | Compatible | Mapped

#: Finish the run on the table it started on.
pinned: Final = Pinned()
#: Go on on the new table when the run's path is one of its paths.
compatible: Final = Compatible()


def mapped(
    mapping: Mapping[str, str],
    *,
    old: MachineTable | MachineShape,
    new: MachineTable | MachineShape,
) -> Mapped:
    """A policy that moves runs resting at an ``old`` state to ``mapping[state]`` of ``new``.

    Checked here, not when a run meets it (:class:`MachineChangedError` naming
    each fault): every resting state of ``old`` (working or terminal) is mapped,
    explicitly or by being a state of ``new`` of the same kind; each target is a
    legal resume point (a working state for a working one, a terminal for a
    terminal); and no target lets a call that needs approval run without a
    decision: a state that meets the approval check before any tool runs maps to
    one that does too, and no state maps past a gate that ``old`` did not pass.
    """
    a, b = shape_of(old), shape_of(new)
    faults: list[str] = []
    for source, dest in mapping.items():
        if source not in a.states:
            faults.append(f"{source!r} is not a state of the {a.name} machine v{a.version}")
        if dest not in b.states:
            faults.append(f"{dest!r} is not a state of the {b.name} machine v{b.version}")
    full: dict[str, str] = {}
    for state in a.states:
        target = mapping.get(state) or (state if state in b.states else None)
        if target is None:
            faults.append(f"resting state {state!r} is not mapped (the new table lacks it)")
            continue
        if target not in b.states:
            continue
        full[state] = target
        if state in a.working and target not in b.working:
            faults.append(
                f"{state!r} -> {target!r}: a run resting at a working state goes on at a "
                "working state (a legal resume point), not a terminal"
            )
        elif state in a.terminals and target not in b.terminals:
            faults.append(f"{state!r} -> {target!r}: an ended run's terminal maps to a terminal")
        elif state in a.working and skips_gate(a, state, b, target):
            faults.append(gate_fault(a, state, b, target))
    faults += entry_faults(a, b)
    if faults:
        raise MachineChangedError(
            f"The mapping from the {a.name} machine v{a.version} to the {b.name} machine "
            f"v{b.version} is refused: " + "; ".join(faults)
        )
    return Mapped(old=a, new=b, mapping=full)


_POLICY: contextvars.ContextVar[Policy | None] = contextvars.ContextVar(
    "agentfsm_resume_policy", default=None
)


@contextlib.contextmanager
def resuming(policy: Policy) -> Iterator[Policy]:
    """Within the block, saved runs made on another version of their machine are loaded
    and resumed under ``policy`` (it holds for the tasks started inside too)."""
    token = _POLICY.set(policy)
    try:
        yield policy
    finally:
        _POLICY.reset(token)


def policy_now() -> Policy | None:
    """The policy of the :func:`resuming` block this runs in, if any."""
    return _POLICY.get()
