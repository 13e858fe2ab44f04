"""Evals: how a configuration behaves over a dataset, and whether a change changed it.

With a real model a run's path is a random variable. :func:`evaluate` runs every
:class:`Case` of a :class:`Dataset` ``runs`` times (at most ``concurrency`` at once) on
an agent, and checks each run against :class:`Expect` expectations of its path (the
terminal it ends in, states it visits or never visits, how often it takes an edge, a
path pattern) and of its answer. The :class:`EvalReport` gives each expectation's pass
rate with a Wilson interval, the paths, terminals and edge counts, tokens, cost and
latency. :func:`compare` tests two reports of one dataset against each other (Fisher's
exact test, Mann-Whitney U, Holm's correction): an comparison with its
changes, its regressions and a verdict a CI gate can act on. ``agentfsm eval`` is the
command line; the store keeps reports and the studio draws them.
"""

from __future__ import annotations

from ._evals._compare import compare
from ._evals._dataset import Case, Dataset, Expect
from ._evals._report import EvalReport
from ._evals._runner import evaluate, evaluate_sync

__all__ = [
    "Case",
    "Dataset",
    "EvalReport",
    "Expect",
    "compare",
    "evaluate",
    "evaluate_sync",
]
