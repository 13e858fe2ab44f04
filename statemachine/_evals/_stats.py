"""The statistics of evals, with the standard library only (``math``, ``statistics``).

A pass rate gets a Wilson score interval; two configurations' counts are compared with
Fisher's exact test (a rate: runs that passed, runs that ended in a terminal) or the
Mann-Whitney U test (a count per run: how often a run took an edge), two-sided; a
family of p-values is corrected with Holm's step-down method (the family-wise error
rate) or Benjamini-Hochberg's (the false discovery rate). Each is a few lines, checked
against published values in ``tests/test_evals_stats.py``: scipy, statsmodels or
pingouin would bring tens of megabytes of compiled code for these few functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist, fmean, stdev
from typing import Final, Literal

__all__ = [
    "Correction",
    "adjust",
    "fisher_exact",
    "mann_whitney",
    "mean_interval",
    "wilson",
]

Correction = Literal["holm", "bh"]
_NORMAL: Final = NormalDist()


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence is between 0 and 1, got {confidence!r}")
    return _NORMAL.inv_cdf(1 - (1 - confidence) / 2)


def wilson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``successes / trials``; (0, 1) for none."""
    if trials == 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials)) / (1 + z2n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def _log_hypergeometric(k: int, row: int, column: int, total: int) -> float:
    """log P(X = k): ``k`` of ``row`` draws land in a column of ``column`` out of ``total``."""
    return _log_choose(column, k) + _log_choose(total - column, row - k) - _log_choose(total, row)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """The two-sided p-value of Fisher's exact test of the table ``[[a, b], [c, d]]``:
    the probability, given the margins, of a table no more likely than this one (tables
    within a relative 1e-7 of it count as equally likely, as R and scipy count them)."""
    if min(a, b, c, d) < 0:
        raise ValueError(f"a contingency table holds counts, got {[a, b, c, d]}")
    row, column, total = a + b, a + c, a + b + c + d
    if row in (0, total) or column in (0, total):
        return 1.0
    low, high = max(0, row + column - total), min(row, column)
    observed = _log_hypergeometric(a, row, column, total)
    cut = observed + math.log1p(1e-7)
    p = sum(
        math.exp(lp)
        for k in range(low, high + 1)
        if (lp := _log_hypergeometric(k, row, column, total)) <= cut
    )
    return min(1.0, p)


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> float:
    """The two-sided p-value of the Mann-Whitney U test of ``x`` against ``y``: the normal
    approximation with the tie correction and a continuity correction (scipy's
    ``method="asymptotic"``). 1.0 when either is empty or every value is the same."""
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        return 1.0
    pooled = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    n = n1 + n2
    rank_x = 0.0
    ties = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # the mean rank of the tied run i..j
        size = j - i + 1
        ties += size**3 - size
        rank_x += rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u = rank_x - n1 * (n1 + 1) / 2
    mean = n1 * n2 / 2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (abs(u - mean) - 0.5) / math.sqrt(variance)
    return min(1.0, 2 * (1 - _NORMAL.cdf(max(z, 0.0))))


def adjust(p_values: Sequence[float], correction: Correction = "holm") -> list[float]:
    """``p_values`` adjusted for being tested together, in their order: Holm's step-down
    (a rejection at alpha keeps the chance of any false one under alpha) or
    Benjamini-Hochberg's step-up (the expected share of false ones under alpha)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    if correction == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p_values[i]))
            adjusted[i] = running
    elif correction == "bh":
        running = 1.0
        for rank in range(m - 1, -1, -1):
            i = order[rank]
            running = min(running, m * p_values[i] / (rank + 1))
            adjusted[i] = min(1.0, running)
    else:
        raise ValueError(f"correction is 'holm' or 'bh', got {correction!r}")
    return adjusted


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The mean of ``values`` and its normal-approximation interval (the mean twice for
    fewer than two values)."""
    if not values:
        return 0.0, 0.0, 0.0
    mean = fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = _z(confidence) * stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
