"""Floor: the loop of ``floor_transitions`` on agentfsm's own shared machine.

The same states, transitions and seven triggers per round, fired through a
:class:`agentfsm._fsm.SharedMachine`: the lean events and weakly held, O(1)
model registry agentfsm's runs use, with nothing else (no chain, no steps, no
trace).  agentfsm's row divided by this one is what the library adds on top
of the machine it fires.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version as _dist_version

from agentfsm._fsm import SharedMachine

import workload as w
from adapters.floor_transitions import MACHINE_ARGS, loop

NAME = "floor_lean"


def version() -> str:
    return f"transitions {_dist_version('transitions')} (agentfsm lean)"


_RUN = loop(SharedMachine(**MACHINE_ARGS))


async def run_once(k: int) -> None:
    await w.drive(_RUN, k)


async def idle_run(event: asyncio.Event) -> None:
    await w.drive(_RUN, w.IDLE_K, gate=event)
