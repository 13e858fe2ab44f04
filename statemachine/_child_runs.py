"""Child runs: how deep they nest, what they may spend of their parent's budget, how
they run, and where their traces go.

A child run (a subagent's agent, a child machine) starts one level deeper than the run
that started it, with what the parent has left of ``max_runs`` and ``token_budget``,
and its trace nests under the parent's transition that ran it. A host may run a
subagent's child elsewhere (:func:`children_run_by`, a durable engine's workflow).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Final

from ._errors import ChainError
from ._options import Options
from ._results import Terminal
from ._run import Run
from ._state import AgentState
from ._steps import get_run_count
from ._trace import Trace

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["MAX_DEPTH", "ChildRunner", "children_run_by", "nested"]

#: How deep runs may nest (a parent, its child, the child's child...): past it a child
#: is refused at run time, whatever the tools say.
MAX_DEPTH: Final = 8


_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("agentfsm_depth", default=0)


#: How a host runs a subagent's child elsewhere (a durable engine: as a workflow of its
#: own): ``runner(name, agent, task, max_runs, token_budget, depth)`` returns the child's
#: end state and its traces, or raises the ChainError of a child that could not start.
ChildRunner = Callable[
    [str, "Agent", str, int, "int | None", int], Awaitable[tuple[AgentState, Sequence[Trace]]]
]


_RUNNER: contextvars.ContextVar[ChildRunner | None] = contextvars.ContextVar(
    "agentfsm_child_runner", default=None
)


@contextlib.contextmanager
def children_run_by(runner: ChildRunner | None) -> Iterator[None]:
    """Subagents started in the block run through ``runner`` (None: here, in the step);
    their limits and depth are still decided here, and their traces adopted here."""
    token = _RUNNER.set(runner)
    try:
        yield
    finally:
        _RUNNER.reset(token)


@contextlib.contextmanager
def nested(depth: int) -> Iterator[None]:
    """Run the block ``depth`` runs deep: a host running a child elsewhere keeps the
    tree's :data:`MAX_DEPTH` across it."""
    token = _DEPTH.set(depth)
    try:
        yield
    finally:
        _DEPTH.reset(token)


def _limits(parent: Run | None, options: Options) -> tuple[int, int | None] | ChainError:
    """The child's ``max_runs`` and ``token_budget``: its own, at most what ``parent``
    has left (its model calls and tokens so far, earlier children's included); or the
    error of a parent with nothing left."""
    runs, tokens = options.max_runs, options.token_budget
    if parent is None:
        return runs, tokens
    left = parent.opts.max_runs - get_run_count(parent.chain)
    if left < 1:
        return ChainError(
            "exceeded_max_runs",
            f"The run has no model call left of its max_runs ({parent.opts.max_runs}) "
            "for a child run",
            retryable=False,
        )
    budget = parent.token_budget
    if budget is not None:
        spent = parent.trace.usage.total_tokens
        if budget - spent < 1:
            return ChainError(
                "exceeded_token_budget",
                f"The run used {spent} tokens of its token_budget ({budget}); none is "
                "left for a child run",
                retryable=False,
            )
        tokens = budget - spent if tokens is None else min(tokens, budget - spent)
    return min(runs, left), tokens


def _too_deep(name: str) -> ChainError | None:
    if _DEPTH.get() < MAX_DEPTH:
        return None
    return ChainError(
        "child_too_deep",
        f"The child {name!r} would nest runs {MAX_DEPTH + 1} deep (at most {MAX_DEPTH}): "
        "machines or agents that run each other?",
        retryable=False,
    )


async def _run_child(child: Run) -> Terminal:
    """Run ``child`` to its end one level deeper than the run that started it."""
    depth = _DEPTH.set(_DEPTH.get() + 1)
    try:
        return await child.run()
    finally:
        _DEPTH.reset(depth)


def _adopt(parent: Run | None, trace: Trace) -> None:
    """Nest a child's ``trace`` under ``parent``'s step."""
    if parent is not None:
        parent.adopt(trace)
