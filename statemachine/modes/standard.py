"""The standard mode: Sagents' pipeline as a machine of explicit states.

One loop is ``expanding -> calling -> interrupt_check -> executing ->
propagating -> until_check -> deciding``; each state's work is a few steps of
:mod:`agentfsm.steps`, and which terminal a run reaches is decided by the
step that produced it. See :data:`agentfsm.machine.STANDARD` for the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..chain import LLMChain
from ..errors import ChainError
from ..machine import STANDARD, MachineTable
from ..middleware.human_in_the_loop import HumanInTheLoop, check_pre_tool_hitl
from ..results import Continue, Failed, Interrupted, Ok, Paused, Terminal
from ..run import Outcome, Run, Work
from ..steps import (
    Step,
    call_llm,
    check_max_runs,
    check_pause,
    check_response_complete,
    check_tool_interrupts,
    check_until_tool,
    check_until_tool_success,
    ensure_mode_state,
    execute_tools,
    expand_tool_results,
    pipe,
    propagate_state,
    reset_run_count,
)
from ..trace import Trace

__all__ = ["StandardMode", "StandardOptions", "entry_state"]

#: The trigger a state fires when its work returns ``Continue``.
FORWARD: Mapping[str, str] = {
    "expanding": "expanded",
    "calling": "called",
    "interrupt_check": "clear",
    "executing": "executed",
    "propagating": "propagated",
    "until_check": "unsatisfied",
    "deciding": "loop",
}

#: The trigger each result fires, by state: ``Continue`` goes forward, ``Ok`` ends
#: the run where the table lets it (``satisfied`` in until_check, ``done`` in
#: deciding), and every other terminal has one trigger of its own.
_ENDS_OK: Mapping[str, str] = {"until_check": "satisfied", "deciding": "done"}
TRIGGERS: Mapping[str, Mapping[type, str]] = {
    state: {
        Continue: forward,
        Paused: "paused",
        Failed: "failed",
        Interrupted: "interrupted",
        **({Ok: _ENDS_OK[state]} if state in _ENDS_OK else {}),
    }
    for state, forward in FORWARD.items()
}


def _names(until_tool: str | Sequence[str] | None) -> tuple[str, ...]:
    if until_tool is None:
        return ()
    if isinstance(until_tool, str):
        return (until_tool,)
    if isinstance(until_tool, list | tuple):
        return tuple(until_tool)
    raise ValueError(f"Invalid until_tool option: expected string or list, got: {until_tool!r}")


def _max_runs(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_runs must be a positive integer, got: {value!r}")
    return value


@attrs.frozen
class StandardOptions:
    """The standard mode's options, checked once when a run starts."""

    middleware: tuple[Any, ...] = attrs.field(default=(), converter=tuple)
    should_pause: Callable[[], bool] | None = None
    max_runs: int = attrs.field(default=50, converter=_max_runs)
    until_tool: tuple[str, ...] = attrs.field(default=(), converter=_names)
    require_tool_success: bool = False
    #: Steps added after a state's own work, by state: ``{"calling": [my_check]}``.
    extra_steps: Mapping[str, Sequence[Step]] = attrs.field(factory=dict)

    @extra_steps.validator
    def _known_states(self, _: Any, value: Mapping[str, Sequence[Step]]) -> None:
        unknown = set(value) - set(FORWARD)
        if unknown:
            raise ValueError(
                f"extra_steps names unknown state(s) {sorted(unknown)}; states: {list(FORWARD)}"
            )

    @classmethod
    def of(cls, opts: Mapping[str, Any] | None) -> StandardOptions:
        opts = dict(opts or {})
        if "should_pause?" in opts:
            opts["should_pause"] = opts.pop("should_pause?")
        if "tool_names" in opts and "until_tool" not in opts:
            opts["until_tool"] = opts.pop("tool_names")
        known = {f.name for f in attrs.fields(cls)}
        unknown = set(opts) - known
        if unknown:
            raise ValueError(f"Unknown option(s) {sorted(unknown)}. Options: {sorted(known)}")
        return cls(**opts)

    def step_opts(self) -> dict[str, Any]:
        """The options as the steps read them."""
        return {
            "middleware": self.middleware,
            "should_pause": self.should_pause,
            "max_runs": self.max_runs,
            "tool_names": list(self.until_tool) or None,
        }


def entry_state(chain: LLMChain) -> str:
    """Where a run over ``chain`` enters the machine.

    Tool results at the end (a resume) are propagated and checked before any
    model call; an assistant message whose calls have not run (a paused run)
    goes to the approval check and runs them; anything else starts fresh.
    """
    last = chain.last_message
    if last is not None and last.role == "tool":
        return "propagating"
    if last is not None and last.is_tool_call and last.status == "complete":
        return "interrupt_check"
    return "expanding"


class _Work:
    """The work of each state for one run's options."""

    def __init__(self, options: StandardOptions) -> None:
        self.options = options
        self.opts = options.step_opts()
        self.hitl = any(isinstance(m, HumanInTheLoop) for m in options.middleware)
        self.until = check_until_tool_success if options.require_tool_success else check_until_tool

    def table(self) -> dict[str, Work]:
        work: dict[str, Work] = {
            "expanding": self.expanding,
            "calling": self.calling,
            "interrupt_check": self.interrupt_check,
            "executing": self.executing,
            "propagating": self.propagating,
            "until_check": self.until_check,
            "deciding": self.deciding,
        }
        for state, steps in self.options.extra_steps.items():
            work[state] = self._with_steps(work[state], tuple(steps))
        return work

    def _with_steps(self, own: Work, steps: tuple[Step, ...]) -> Work:
        async def work(chain: LLMChain) -> Outcome:
            outcome = own(chain)
            result, detail = outcome if isinstance(outcome, tuple) else await outcome
            return await pipe(result, *steps, opts=self.opts), detail

        return work

    def expanding(self, chain: LLMChain) -> Outcome:
        result = expand_tool_results(Continue(chain))
        inserted = len(result.chain.messages) - len(chain.messages)
        return result, ({"inserted": inserted} if inserted else None)

    async def calling(self, chain: LLMChain) -> Outcome:
        result = await call_llm(Continue(chain))
        if not isinstance(result, Continue):
            return result, {"model": chain.llm.name}
        reply = result.chain.last_message
        assert reply is not None
        detail = {
            "model": reply.metadata.get("model", chain.llm.name),
            "tool_calls": [c.name for c in reply.tool_calls],
        }
        if "fallback_errors" in reply.metadata:
            detail["fallback_errors"] = reply.metadata["fallback_errors"]
        return check_pause(check_response_complete(result), self.opts), detail

    async def interrupt_check(self, chain: LLMChain) -> Outcome:
        if not self.hitl:
            return Continue(chain), None
        return check_pre_tool_hitl(Continue(chain), self.opts), None

    async def executing(self, chain: LLMChain) -> Outcome:
        result = await execute_tools(Continue(chain))
        last = result.chain.last_message
        if last is None or last is chain.last_message or last.role != "tool":
            return result, None
        return result, {
            "tools": [r.name for r in last.tool_results],
            "errors": sum(r.is_error for r in last.tool_results),
        }

    def propagating(self, chain: LLMChain) -> Outcome:
        last = chain.last_message
        if last is None or last.role != "tool":
            return Continue(chain), None
        return check_tool_interrupts(propagate_state(Continue(chain))), None

    def until_check(self, chain: LLMChain) -> Outcome:
        if not self.options.until_tool:
            return Continue(chain), None
        return self.until(Continue(chain), self.opts), None

    def deciding(self, chain: LLMChain) -> Outcome:
        if chain.needs_response:
            return check_max_runs(Continue(chain), self.opts), None
        if self.options.until_tool:
            names = list(self.options.until_tool)
            return Failed(
                chain,
                ChainError(
                    "until_tool_not_called",
                    f"Agent completed without calling target tool(s): {names}. "
                    "The LLM stopped responding before invoking the required tool.",
                ),
            ), None
        return Ok(chain), None


class StandardMode:
    """Sagents' standard execution mode, run as the :data:`STANDARD` machine.

    Options: ``middleware``, ``should_pause``, ``max_runs`` (50), ``until_tool``
    (a name or a list; empty is off), ``require_tool_success`` (False),
    ``extra_steps``.
    """

    table: MachineTable = STANDARD

    def start(
        self,
        chain: LLMChain,
        opts: Mapping[str, Any] | None = None,
        *,
        run_class: type[Run] = Run,
        **kw: Any,
    ) -> Run:
        """A run over ``chain``, at its entry state, not yet stepped."""
        options = StandardOptions.of({**(opts or {}), **kw})
        entry = entry_state(chain)
        chain = reset_run_count(ensure_mode_state(chain))
        if entry == "interrupt_check" and chain.last_message not in chain.exchanged_messages:
            # The pending reply is this run's to approve and execute.
            assert chain.last_message is not None
            chain = attrs.evolve(
                chain, exchanged_messages=(*chain.exchanged_messages, chain.last_message)
            )
        return run_class(self.table, _Work(options).table(), TRIGGERS, chain, entry)

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
        if state not in FORWARD:
            raise ValueError(f"Cannot restore a run at {state!r}; working states: {list(FORWARD)}")
        options = StandardOptions.of(opts)
        run = run_class(self.table, _Work(options).table(), TRIGGERS, chain, state)
        run.trace = trace
        return run

    async def run(
        self, chain: LLMChain, opts: Mapping[str, Any] | None = None, **kw: Any
    ) -> Terminal:
        """Run to the end; a step-level pause reason is folded into ``custom_context``."""
        return await self.start(chain, opts, **kw).run()
