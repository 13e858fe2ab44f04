"""Changing a machine: what changed, which saved runs may go on, and how.

:func:`shape_of` reads a machine's shape (states, edges, each state's steps by
their code), :func:`diff` says what changed between two; a saved run made on
another version goes on only under a declared policy (:data:`pinned`,
:data:`compatible`, :func:`mapped`) that :func:`check_resume` applies;
:func:`replay` re-runs saved traces against today's machine. The errors are
:class:`agentfsm.MachineChangedError` and :class:`agentfsm.OtherMachineError`.
"""

from ._moved import forward, show_at
from ._versions import (
    MachineDiff,
    Mapped,
    Policy,
    ReplayReport,
    ResumeDecision,
    check_resume,
    compatible,
    diff,
    mapped,
    pinned,
    rebuild,
    replay,
    resuming,
    shape_of,
)

__all__ = [
    "MachineDiff",
    "Mapped",
    "Policy",
    "ReplayReport",
    "ResumeDecision",
    "check_resume",
    "compatible",
    "diff",
    "mapped",
    "pinned",
    "rebuild",
    "replay",
    "resuming",
    "shape_of",
]

#: The last release's names this face no longer exports, kept one more release.
__getattr__ = forward(
    __name__,
    ("agentfsm", "agentfsm._shape"),
    frozenset({"MachineChangedError", "MachineShape", "OtherMachineError"}),
)
show_at(__name__, globals())
