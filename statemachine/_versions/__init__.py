"""Machine versions: a run saved on one version of a machine meets another, checked.

A machine is data, so what changed between two versions is data too:
:func:`diff` names the states and edges added, removed and changed, and draws
them. A saved run records the name, version and fingerprint of the table it ran
on (:attr:`MachineTable.fingerprint <agentfsm.machine.MachineTable.fingerprint>`),
and the table itself as data (:class:`MachineShape`). Resuming it on a table with
another fingerprint is refused with :class:`MachineChangedError`, naming what
changed, unless a policy says how it goes on:

* :data:`pinned` -- the run finishes on the table it started on: declared in
  this process (``version=`` the old one), or rebuilt from the shape the run
  kept, its steps found by name among the tables declared (:func:`rebuild`);
* :data:`compatible` -- it goes on on the new table when every segment of its
  recorded path is a path of the new table and its resting state exists there;
* :func:`mapped` -- an explicit map from the old table's resting states to new
  ones, checked when it is declared.

Neither of the last two lets a run holding a gated call nobody decided on (at
rest before the approval state, paused with the call pending, interrupted at
the gate) reach a state that runs tools without passing a state that asks for
approval: not at the state it goes on at, nor through an entry it re-enters by
(an entry is part of the change). Gates and tool states are read from the
steps' declared effects (:mod:`agentfsm.effects`), never from their names. A
run of another machine (another name) is refused whatever the policy
(:class:`OtherMachineError`).

:func:`check_resume` decides for one saved run; ``with resuming(policy):``
makes a policy the one :func:`~agentfsm.store.restore_run` (and
``Agent.resume_run``) applies. :func:`replay` drives a recorded run's model
replies and tool results through another table, with no model and no tool
called, and says where the two part.
"""

from __future__ import annotations

from .._errors import MachineChangedError, OtherMachineError
from .._replay import ReplayReport, replay
from .._shape import MachineDiff, MachineShape, diff, shape_of
from ._decisions import ResumeDecision, check_resume
from ._decisions import resume_decision as resume_decision
from ._migration import migrates as migrates
from ._migration import migration_fault as migration_fault
from ._migration import migration_trace as migration_trace
from ._policies import Mapped, Policy, compatible, mapped, pinned, resuming
from ._recorded import header_identity as header_identity
from ._recorded import rebuild
from ._recorded import recorded_table as recorded_table
from ._recorded import segment_table as segment_table
from ._recorded import trace_identity as trace_identity

__all__ = [
    "MachineChangedError",
    "MachineDiff",
    "MachineShape",
    "Mapped",
    "OtherMachineError",
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
