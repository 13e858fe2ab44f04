"""The statistics of evals against published values (scipy 1.17's, and the textbooks')."""

from __future__ import annotations

import pytest

from agentfsm._evals._stats import adjust, fisher_exact, mann_whitney, mean_interval, wilson


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        # Fisher's lady tasting tea: 3 of 4 cups right
        ((3, 1, 1, 3), 0.4857142857142857),
        # scipy.stats.fisher_exact([[8, 2], [1, 5]]).pvalue
        ((8, 2, 1, 5), 0.034965034965034975),
        ((0, 10, 10, 0), 1.082508822446903e-05),
        ((12, 38, 3, 47), 0.02260438688192351),
        ((5, 5, 5, 5), 1.0),
        ((0, 0, 3, 4), 1.0),
    ],
)
def test_fisher_exact_gives_the_published_p_values(table: tuple[int, ...], expected: float) -> None:
    assert fisher_exact(*table) == pytest.approx(expected, rel=1e-9)


def test_mann_whitney_gives_scipys_asymptotic_p_values() -> None:
    # scipy.stats.mannwhitneyu(x, y, method="asymptotic").pvalue
    assert mann_whitney([1, 2, 2, 3, 5], [2, 4, 4, 6, 7, 8]) == pytest.approx(0.07934368319771502)
    counts_a = [0, 0, 1, 1, 1, 2, 0, 1]
    counts_b = [1, 2, 2, 3, 1, 2, 2, 4, 1]
    assert mann_whitney(counts_a, counts_b) == pytest.approx(0.013052452607712374)
    assert mann_whitney([1, 1, 1], [1, 1]) == 1.0
    assert mann_whitney([], [1]) == 1.0


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Newcombe (1998), and scipy's binomtest(k, n).proportion_ci(method="wilson")
        (81, 263, 0.2552885198782742, 0.36620957698280004),
        (0, 10, 0.0, 0.27753279986288926),
        (10, 10, 0.7224672001371109, 1.0),
        (3, 20, 0.05236874589621662, 0.3604188647407569),
    ],
)
def test_wilson_intervals_are_the_published_ones(k: int, n: int, low: float, high: float) -> None:
    assert wilson(k, n) == pytest.approx((low, high), rel=1e-9, abs=1e-12)


def test_holm_and_benjamini_hochberg_adjust_as_published() -> None:
    p = [0.01, 0.04, 0.03, 0.005, 0.5]
    assert adjust(p, "holm") == pytest.approx([0.04, 0.09, 0.09, 0.025, 0.5])
    # scipy.stats.false_discovery_control(p)
    assert adjust(p, "bh") == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])
    assert adjust([]) == []
    with pytest.raises(ValueError, match="correction is 'holm' or 'bh', got 'bonf'"):
        adjust(p, "bonf")  # type: ignore[arg-type]


def test_the_mean_interval_is_the_normal_one() -> None:
    # z(0.975) x stdev / sqrt(n) = 1.959964 x 1.290994 / 2
    mean, low, high = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert (low, high) == pytest.approx((2.5 - 1.2651513, 2.5 + 1.2651513), rel=1e-6)
    assert mean_interval([]) == (0.0, 0.0, 0.0)
