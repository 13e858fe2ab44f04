"""Starting and resuming an agent's saved runs: the agent side of the store.

The store saves and loads runs and never reads an agent's attributes; this module
binds a saved run to an agent (its model, tools, callbacks, middleware and machine)
and starts or resumes it, checkpointed. :meth:`Agent.resume_run
<agentfsm.Agent.resume_run>` runs what :func:`restore_run` builds. What runs again
after a crash, and how a resume claims a run, is told in
:mod:`agentfsm.store.checkpointer`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._chain import LLMChain
from ._errors import ResumeError
from ._invariants import check_resumable
from ._owner import new_owner as _new_owner
from ._results import Interrupted, Paused
from ._serialization import UnknownToolError
from ._state import AgentState
from ._versions import ResumeDecision, migrates, resume_decision
from ._versions import migration_trace as _migration_trace
from .store import Leases, SavedRun, Store, checkpoint, load_run

if TYPE_CHECKING:
    from ._agent import Agent, AgentRun

__all__ = ["execute_options", "restore_run", "start_run"]


def start_run(
    agent: Agent,
    state: AgentState,
    store: Store,
    *,
    run_id: str | None = None,
    until_tool: str | Sequence[str] | None = None,
    until_tool_success: str | Sequence[str] | None = None,
    max_runs: int | None = None,
    should_pause: Callable[[], bool | str] | None = None,
    extra_steps: Mapping[str, Sequence[Any]] | None = None,
    replace: bool = False,
) -> AgentRun:
    """``agent.start(state, ...)``, checkpointed as it goes; the id is
    ``Checkpointer.of(run).run_id``. A ``run_id`` the store has is refused
    (:class:`RunExistsError`) unless ``replace=True``."""
    run = agent.start(
        state,
        until_tool=until_tool,
        until_tool_success=until_tool_success,
        max_runs=max_runs,
        should_pause=should_pause,
        extra_steps=extra_steps,
    )
    options = agent.options(
        until_tool=until_tool,
        until_tool_success=until_tool_success,
        max_runs=max_runs,
        should_pause=should_pause,
    )
    checkpoint(run, store, run_id=run_id, options=options.saved(), replace=replace)
    return run


def _rebind(chain: LLMChain, agent: Agent, strict: bool) -> LLMChain:
    available = {t.name for t in agent.tools}
    missing = [name for name in chain.tool_names if name not in available]
    if missing and strict:
        raise UnknownToolError(
            f"The saved run used tool(s) {missing} that the agent does not have "
            f"(it has {sorted(available)}); resume with strict=False to go on without them."
        )
    return attrs.evolve(chain, llm=agent.model, tools=agent.tools, callbacks=agent.callbacks)


def _load_for(agent: Agent, run_id: str, store: Store) -> tuple[SavedRun, ResumeDecision]:
    saved = load_run(
        store,
        run_id,
        models={agent.model.name: agent.model},
        tools=agent.tools,
        callbacks=agent.callbacks,
        strict=False,
    )
    decision = resume_decision(saved, agent.mode.table)
    machine = decision.table
    if machine is not agent.mode.table:
        raise ResumeError(
            f"Run {run_id!r} ran on the {machine.name} machine and this agent runs the "
            f"{agent.mode.table.name} one; resume it with Agent(..., machine=...) of that machine"
        )
    return saved, decision


async def restore_run(
    agent: Agent,
    run_id: str,
    store: Store,
    answer: Any = None,
    *,
    should_pause: Callable[[], bool | str] | None = None,
    extra_steps: Mapping[str, Sequence[Any]] | None = None,
    strict: bool = True,
    unbound: bool = False,
) -> AgentRun:
    """The run behind :meth:`Agent.resume_run <agentfsm.Agent.resume_run>`, checkpointed,
    not stepped: for a host that steps a saved run.

    A run that had not ended goes on from the state it was saved at, with the
    saved chain and trace: no checkpointed tool result is produced again. A
    paused run goes on in a new segment from its chain's entry (pending tool
    calls run, tool results are propagated). An interrupted run goes on in a
    new segment at the state that asked, with ``answer`` as its input (see
    :meth:`Agent.resume <agentfsm.Agent.resume>`, ``unbound`` as there); a run
    that ended ok or in error is over. The
    agent's model, tools, callbacks and middleware replace the saved ones;
    ``should_pause`` and ``extra_steps`` are passed again.
    """
    saved, decision = _load_for(agent, run_id, store)
    if isinstance(saved.result, Interrupted) and saved.agent_state is not None:
        if answer is None:
            raise ResumeError(
                f"Run {run_id!r} ended interrupted; resume it with an answer: "
                "agent.resume_run(run_id, store, answer)"
            )
        _rebind(saved.chain, agent, strict)
        state = saved.agent_state
        # The result chain's messages are the store's own: reuse them, so the
        # new segment refers to the saved message rows instead of copying them.
        shared = tuple(saved.result.chain.messages)[-len(state.messages) :]
        if state.messages and shared == state.messages:
            state = attrs.evolve(state, messages=shared)
        if state.interrupted_at is None:  # a state saved before it was recorded
            last = saved.trace.transitions[-1].source if saved.trace.transitions else None
            state = attrs.evolve(state, interrupted_at=saved.result.state or last)
        # Claim first: the answer enters the machine only in the one process that holds
        # the run.
        owner = _new_owner()
        _claim(store, run_id, owner, saved.head)
        try:
            async with _holding(store, run_id, owner):
                resumed = await agent.start_resume(
                    state,
                    answer,
                    unbound=unbound,
                    should_pause=should_pause,
                    extra_steps=extra_steps,
                    **execute_options(saved.options),
                )
        except BaseException:
            _release(store, run_id, owner)
            raise
        checkpoint(resumed, store, options=saved.options, saved=saved, owner=owner)
        return resumed
    if answer is not None:
        raise ResumeError(
            f"Run {run_id!r} is {saved.status}, not interrupted by an agent: "
            "an answer resumes an interrupted agent run"
        )
    if saved.result is not None and not isinstance(saved.result, Paused):
        raise ResumeError(f"Run {run_id!r} ended {saved.status}: there is nothing to resume")
    chain = _rebind(saved.chain, agent, strict)
    moving = migrates(saved, decision)
    ask_again = check_resumable(
        saved.traces, saved.done, chain, agent.mode.table, agent.middleware, state=decision.state
    )
    options: dict[str, Any] = {
        "middleware": agent.middleware,
        "should_pause": should_pause,
        "token_budget": agent.token_budget,
        **saved.options,
    }
    if extra_steps:
        options["extra_steps"] = extra_steps
    if saved.result is None and not ask_again:
        if moving:  # a new segment on the new table, entered where the run is moved to
            trace = _migration_trace(saved, decision)
        else:
            trace = attrs.evolve(saved.trace, transitions=list(saved.trace.transitions))
        run = agent.mode.restore(
            chain,
            decision.state if moving else saved.state,
            trace,
            options,
            run_class=agent.run_class,
        )
    else:
        context = {k: v for k, v in chain.custom_context.items() if k != "pause_reason"}
        chain = attrs.evolve(chain, custom_context=context, exchanged_messages=())
        run = agent.mode.start(chain, options, run_class=agent.run_class)
    assert isinstance(run, agent.run_class)
    run.agent = agent
    checkpoint(run, store, options=saved.options, saved=saved, new_segment=ask_again or moving)
    return run


def _claim(store: Store, run_id: str, owner: str, head: str | None) -> None:
    """Take the run for ``owner`` if the store keeps leases (a compare-and-set on ``head``)."""
    if isinstance(store, Leases):
        store.claim(run_id, owner, head)


def _release(store: Store, run_id: str, owner: str) -> None:
    """Give back a claim that ran nothing (decisions that did not fit, say)."""
    if isinstance(store, Leases):
        with contextlib.suppress(Exception):  # the lease lapses by itself anyway
            store.release(run_id, owner)


@contextlib.asynccontextmanager
async def _holding(store: Store, run_id: str, owner: str) -> AsyncIterator[None]:
    """Renew ``owner``'s lease every third of it while the block runs (approved calls)."""
    if not isinstance(store, Leases) or not store.lease:
        yield
        return
    leases = store

    async def keep() -> None:
        while True:
            await asyncio.sleep(leases.lease / 3)
            try:
                if not leases.renew(run_id, owner):
                    return
            except Exception:  # the first checkpoint reports a failing store
                return

    task = asyncio.ensure_future(keep())
    try:
        yield
    finally:
        task.cancel()


def execute_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A saved run's options as :meth:`Agent.start <agentfsm.Agent.start>` takes them."""
    names = list(options.get("until_tool") or ())
    key = "until_tool_success" if options.get("require_tool_success") else "until_tool"
    out: dict[str, Any] = {key: names} if names else {}
    if "max_runs" in options:
        out["max_runs"] = options["max_runs"]
    return out
