"""The standard mode: Sagents' pipeline as a machine of explicit states.

One loop is ``expanding -> calling -> interrupt_check -> executing ->
propagating -> until_check -> deciding``; each state's work is a few steps of
:mod:`agentfsm.steps`, and which terminal a run reaches is decided by the
step that produced it. See :data:`agentfsm.machine.STANDARD` for the table.
The mode runs any machine with the standard entries and options: the standard
one, or one declared from it (a state added to the loop, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..chain import LLMChain
from ..machine import STANDARD, MachineTable
from ..options import StandardOptions
from ..results import Terminal
from ..run import Run
from ..steps import reset_run_count
from ..trace import Trace

__all__ = ["StandardMode", "StandardOptions", "entry_state"]

#: The situations a run over a chain can start in, as the machine's entries name them.
_FRESH, _PENDING, _RESULTS = "fresh", "pending tool calls", "tool results"


def _situation(chain: LLMChain) -> str:
    last = chain.last_message
    if last is not None and last.role == "tool":
        return _RESULTS
    if last is not None and last.is_tool_call and last.status == "complete":
        return _PENDING
    return _FRESH


def entry_state(chain: LLMChain, table: MachineTable = STANDARD) -> str:
    """Where a run over ``chain`` enters the machine.

    Tool results at the end (a resume) are propagated and checked before any
    model call; an assistant message whose calls have not run (a paused run)
    goes to the approval check and runs them; anything else starts fresh.
    """
    return table.entries[_situation(chain)]


class StandardMode:
    """Sagents' standard execution mode, run as the :data:`STANDARD` machine or ``table``.

    ``table`` is any machine whose entries are the standard ones (``fresh``,
    ``pending tool calls``, ``tool results``) and whose runs take
    :class:`~agentfsm.options.StandardOptions`.
    """

    def __init__(self, table: MachineTable = STANDARD) -> None:
        missing = [s for s in (_FRESH, _PENDING, _RESULTS) if s not in table.entries]
        if missing:
            raise ValueError(
                f"The standard mode starts runs at the entries {[_FRESH, _PENDING, _RESULTS]}; "
                f"the {table.name} machine has no {missing}"
            )
        self.table = table
        #: The class of its runs' options: the table's, when it refines the standard ones.
        self.options_class = (
            table.options if issubclass(table.options, StandardOptions) else StandardOptions
        )

    def options(self, opts: Mapping[str, Any] | None = None, **kw: Any) -> StandardOptions:
        """``opts`` checked for this mode and its machine, before anything runs."""
        options = self.options_class.of(opts, **kw)
        assert isinstance(options, StandardOptions)
        self.table.work(options.extra_steps)  # refuses steps for states the machine lacks
        return options

    def start(
        self,
        chain: LLMChain,
        opts: Mapping[str, Any] | None = None,
        *,
        run_class: type[Run] = Run,
        **kw: Any,
    ) -> Run:
        """A run over ``chain``, at its entry state, not yet stepped."""
        options = self.options(opts, **kw)
        situation = _situation(chain)
        chain = reset_run_count(chain)  # creates mode_state when there is none
        if situation == _PENDING and chain.last_message not in chain.exchanged_messages:
            # The pending reply is this run's to approve and execute.
            assert chain.last_message is not None
            chain = attrs.evolve(
                chain, exchanged_messages=(*chain.exchanged_messages, chain.last_message)
            )
        return self._run(run_class, chain, self.table.entries[situation], options)

    def restore(
        self,
        chain: LLMChain,
        state: str,
        trace: Trace,
        opts: Mapping[str, Any] | None = None,
        *,
        run_class: type[Run] = Run,
    ) -> Run:
        """A run at working ``state`` over ``chain``, with ``trace`` behind it: a checkpoint's.

        No entry logic and no run-count reset: the run goes on where it stopped.
        """
        if trace.machine != self.table.name:
            raise ValueError(
                f"The trace is of the {trace.machine!r} machine; this mode runs "
                f"the {self.table.name!r} one"
            )
        if state not in self.table.steps:
            raise ValueError(
                f"Cannot restore a run at {state!r}; working states: {list(self.table.working)}"
            )
        run = self._run(run_class, chain, state, self.options(opts))
        run.trace = trace
        return run

    def _run(
        self, run_class: type[Run], chain: LLMChain, entry: str, options: StandardOptions
    ) -> Run:
        return run_class(self.table, chain, entry, options)

    async def run(
        self, chain: LLMChain, opts: Mapping[str, Any] | None = None, **kw: Any
    ) -> Terminal:
        """Run to the end; a step-level pause reason is folded into ``custom_context``."""
        return await self.start(chain, opts, **kw).run()
