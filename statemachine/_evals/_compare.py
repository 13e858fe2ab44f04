"""Two evals of one dataset compared: what changed, tested, with the tests corrected together.

Every quantity is compared between the baseline (A) and the candidate (B):

* the share of runs that met every expectation, over the dataset, and each case's
  expectation's pass rate: Fisher's exact test, two-sided;
* the share of runs that ended in each terminal: Fisher's exact test;
* how many times a run took each edge: the Mann-Whitney U test (a count per run, whatever
  its distribution: a loop taken once or four times), two-sided.

The p-values of all of them are one family, adjusted with Holm's method (default; the
chance of calling anything changed when nothing did stays under ``alpha``) or
Benjamini-Hochberg's (``correction="bh"``: the expected share of false findings). A
quantity that is the same constant on both sides (an edge every run took once) is
shown, not tested. Runs are pooled over cases: with the same cases and the same runs per
case on both sides, that is conservative. A regression is a significant drop of a pass
rate or a significant rise of ``error`` (or of runs that raised), by at least
``threshold`` (a share, 0.05 = five points); other significant differences are changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from ._report import EvalReport, Rate
from ._stats import Correction, adjust, fisher_exact, mann_whitney

__all__ = ["EvalComparison", "Row", "compare"]

Kind = Literal["overall", "expectation", "terminal", "edge"]
#: The terminal rows a rise of which is a regression: runs that failed, or raised.
_FAILING = ("ends in error", "ends in none")


@attrs.frozen
class Row:
    """One quantity on both sides: a share (``a``/``b`` of ``a_runs``/``b_runs``) or, for
    an edge, the mean count per run."""

    kind: Kind
    #: The case, for an expectation; None otherwise.
    case: str | None
    what: str
    a: float
    b: float
    p: float | None = None
    p_adjusted: float | None = None
    significant: bool = False
    regression: bool = False

    @property
    def delta(self) -> float:
        return self.b - self.a

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "case": self.case,
            "what": self.what,
            "a": self.a,
            "b": self.b,
            "delta": self.delta,
            "p": self.p,
            "p_adjusted": self.p_adjusted,
            "significant": self.significant,
            "regression": self.regression,
        }


@attrs.frozen
class EvalComparison:
    """The rows of a comparison and its verdict (see the module's text for the tests)."""

    a: EvalReport
    b: EvalReport
    rows: tuple[Row, ...]
    alpha: float
    correction: Correction
    threshold: float
    #: Cases only one side ran (left out of every row).
    unmatched: tuple[str, ...] = ()

    @property
    def tests(self) -> int:
        """How many quantities were tested (the family the correction adjusts for)."""
        return sum(1 for r in self.rows if r.p is not None)

    @property
    def changes(self) -> list[Row]:
        return [r for r in self.rows if r.significant]

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regression]

    @property
    def ok(self) -> bool:
        """No regression: what a gate passes on."""
        return not self.regressions

    @property
    def method(self) -> str:
        """The tests, said in a sentence (reports and docs quote it)."""
        name = "Holm" if self.correction == "holm" else "Benjamini-Hochberg"
        return (
            f"Fisher's exact test (rates), Mann-Whitney U (edge counts), two-sided; "
            f"{name} over {self.tests} tests at alpha={self.alpha:g}"
        )

    @property
    def verdict(self) -> str:
        changes, regressions = self.changes, self.regressions
        if not changes:
            return f"no change at alpha={self.alpha:g} ({self.method})"
        return (
            f"{len(changes)} change(s), {len(regressions)} regression(s) at "
            f"alpha={self.alpha:g} ({self.method})"
        )

    def check(self) -> None:
        """Raise AssertionError naming every regression (a test's gate)."""
        if self.ok:
            return
        lines = [f"{self.b.name} regressed against {self.a.name}: {self.verdict}"]
        lines += [f"  {_describe(r)}" for r in self.regressions]
        raise AssertionError("\n".join(lines))

    def to_json(self) -> dict[str, Any]:
        return {
            "a": {"id": self.a.id, "name": self.a.name},
            "b": {"id": self.b.id, "name": self.b.name},
            "dataset": self.a.dataset,
            "alpha": self.alpha,
            "correction": self.correction,
            "threshold": self.threshold,
            "tests": self.tests,
            "method": self.method,
            "verdict": self.verdict,
            "ok": self.ok,
            "unmatched": list(self.unmatched),
            "rows": [r.to_json() for r in self.rows],
        }


def _describe(row: Row) -> str:
    where = f"{row.case}: " if row.case else ""
    if row.kind == "edge":
        return f"{where}{row.what}: {row.a:.2f} -> {row.b:.2f} per run (p={row.p_adjusted:.3g})"
    return f"{where}{row.what}: {row.a:.0%} -> {row.b:.0%} (p={row.p_adjusted:.3g})"


def _rate_row(kind: Kind, case: str | None, what: str, a: Rate, b: Rate) -> tuple[Row, bool]:
    row = Row(kind, case, what, a.value, b.value)
    if a.runs == 0 or b.runs == 0:
        return row, False
    if (
        a.passed in (0, a.runs)
        and a.passed / a.runs == b.passed / b.runs
        and b.passed in (0, b.runs)
    ):
        return row, False  # the same constant on both sides: nothing to test
    return attrs.evolve(
        row, p=fisher_exact(a.passed, a.runs - a.passed, b.passed, b.runs - b.passed)
    ), True


def compare(
    a: EvalReport,
    b: EvalReport,
    *,
    alpha: float = 0.05,
    correction: Correction = "holm",
    threshold: float = 0.0,
) -> EvalComparison:
    """Compare the candidate ``b`` with the baseline ``a`` (two evals of one dataset).

    ``alpha`` is the error rate: with ``correction="holm"`` two evals of one
    configuration are called changed with at most that chance. ``threshold`` is the
    least drop of a pass rate (or rise of ``error``), as a share, that counts as a
    regression. Cases are matched by name; a case only one side ran is left out and
    named in ``unmatched``.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha is between 0 and 1, got {alpha!r}")
    if correction not in ("holm", "bh"):
        raise ValueError(f"correction is 'holm' or 'bh', got {correction!r}")
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold is a share between 0 and 1, got {threshold!r}")
    if a.dataset != b.dataset:
        raise ValueError(
            f"{a.name!r} ran dataset {a.dataset!r} and {b.name!r} ran {b.dataset!r}; "
            "compare two evals of one dataset"
        )
    b_cases = {c.name: c for c in b.cases}
    a_names = [c.name for c in a.cases]
    unmatched = tuple(
        [n for n in a_names if n not in b_cases] + [n for n in b_cases if n not in a_names]
    )
    shared = [(c, b_cases[c.name]) for c in a.cases if c.name in b_cases]
    if not shared:
        raise ValueError(f"{a.name!r} and {b.name!r} have no case in common")
    rows: list[tuple[Row, bool]] = []
    a_runs = [o for c, _ in shared for o in c.outcomes]
    b_runs = [o for _, c in shared for o in c.outcomes]
    rows.append(
        _rate_row(
            "overall",
            None,
            "met every expectation",
            Rate(sum(o.ok for o in a_runs), len(a_runs)),
            Rate(sum(o.ok for o in b_runs), len(b_runs)),
        )
    )
    for ca, cb in shared:
        for i, label in enumerate(ca.expectations):
            if label in cb.expectations:
                rows.append(
                    _rate_row(
                        "expectation",
                        ca.name,
                        label,
                        ca.rate(i),
                        cb.rate(cb.expectations.index(label)),
                    )
                )
    ta = Counter(o.terminal or "none" for o in a_runs)
    tb = Counter(o.terminal or "none" for o in b_runs)
    for terminal in sorted(set(ta) | set(tb)):
        rows.append(
            _rate_row(
                "terminal",
                None,
                f"ends in {terminal}",
                Rate(ta[terminal], len(a_runs)),
                Rate(tb[terminal], len(b_runs)),
            )
        )
    rows += _edge_rows(a, b, [c for c, _ in shared], [c for _, c in shared])
    tested = [i for i, (_, t) in enumerate(rows) if t]
    adjusted = adjust([rows[i][0].p or 1.0 for i in tested], correction)
    final = [row for row, _ in rows]
    for i, p in zip(tested, adjusted, strict=True):
        row = final[i]
        significant = p < alpha
        worse = (
            row.delta < 0
            if row.kind in ("overall", "expectation")
            else (row.kind == "terminal" and row.what in _FAILING and row.delta > 0)
        )
        regression = significant and worse and abs(row.delta) >= threshold
        final[i] = attrs.evolve(row, p_adjusted=p, significant=significant, regression=regression)
    return EvalComparison(a, b, tuple(final), alpha, correction, threshold, unmatched)


def _edge_rows(
    a: EvalReport, b: EvalReport, a_cases: Sequence[Any], b_cases: Sequence[Any]
) -> list[tuple[Row, bool]]:
    def counts(report: EvalReport, cases: Sequence[Any]) -> dict[tuple[str, str, str], list[int]]:
        per_path = [Counter(edges) for _, edges in report.paths]
        outcomes = [o for c in cases for o in c.outcomes]
        edges = sorted({e for o in outcomes for e in per_path[o.path]})
        return {e: [per_path[o.path][e] for o in outcomes] for e in edges}

    ca, cb = counts(a, a_cases), counts(b, b_cases)
    n_a = sum(len(c.outcomes) for c in a_cases)
    n_b = sum(len(c.outcomes) for c in b_cases)
    rows: list[tuple[Row, bool]] = []
    for edge in sorted(set(ca) | set(cb)):
        xa = ca.get(edge, [0] * n_a)
        xb = cb.get(edge, [0] * n_b)
        row = Row("edge", None, f"{edge[0]} --{edge[1]}--> {edge[2]}", sum(xa) / n_a, sum(xb) / n_b)
        constant = len(set(xa) | set(xb)) == 1
        rows.append((row, False) if constant else (attrs.evolve(row, p=mann_whitney(xa, xb)), True))
    return rows
