"""Evals in the terminal: rich tables of a report and of a comparison.

Every name, label, prompt and answer reaches a table through :func:`shown` (text from
a dataset file or a model is untrusted: control characters are spelled out).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .._paths import compress_path
from .._printable import short, shown

if TYPE_CHECKING:
    from .._evals._compare import EvalComparison
    from .._evals._report import EvalReport
    from .._machine import MachineTable

__all__ = ["comparison_tables", "report_tables"]


def _table_of(report: EvalReport) -> MachineTable | None:
    # import time: a report read from a store names its machine; find it when drawn
    from .._machine import UnknownMachineError, machine_named

    try:
        return machine_named(report.machine, version=report.machine_version)
    except (UnknownMachineError, ValueError):
        return None


def report_tables(report: EvalReport, *, paths: int = 5) -> Group:
    """The report: each case's expectations with their pass rates, then the terminals,
    the commonest paths, the edges per run, tokens, cost and latency."""
    n = len(report.outcomes)
    title = f"{report.name} on {report.dataset}: {len(report.cases)} cases x {report.runs} runs"
    cases = Table(title=shown(title), title_justify="left")
    cases.add_column("case")
    cases.add_column("expectation")
    cases.add_column("passed", justify="right")
    cases.add_column(f"{report.confidence:.0%} interval", justify="right")
    cases.add_column("the case's runs ended")
    for case in report.cases:
        ended = ", ".join(f"{k} {v}" for k, v in sorted(case.terminals().items()))
        if not case.expectations:
            cases.add_row(
                shown(short(case.name, 30)), Text("(none)", style="dim"), "", "", shown(ended)
            )
        for i, label in enumerate(case.expectations):
            rate = case.rate(i, report.confidence)
            low, high = rate.interval
            style = "green" if rate.passed == rate.runs else "red" if high < 0.5 else "yellow"
            cases.add_row(
                shown(short(case.name, 30)) if i == 0 else Text(""),
                shown(label),
                Text(f"{rate.passed}/{rate.runs} {rate.value:.0%}", style=style),
                f"[{low:.0%}, {high:.0%}]",
                shown(ended) if i == 0 else Text(""),
            )
    overall = report.overall
    low, high = overall.interval
    cases.add_section()
    cases.add_row(
        "all",
        "met every expectation",
        f"{overall.passed}/{n} {overall.value:.0%}",
        f"[{low:.0%}, {high:.0%}]",
        "",
    )
    table = _table_of(report)
    counts = Table(title="paths", title_justify="left")
    counts.add_column("runs", justify="right")
    counts.add_column("path")
    for index, count in report.path_counts().most_common(paths):
        states = report.states(index)
        text = compress_path(states, table) if table is not None else " ".join(states)
        counts.add_row(f"{count} ({count / n:.0%})", shown(text))
    left = len(report.path_counts()) - paths
    if left > 0:
        counts.add_row("", Text(f"... and {left} more paths", style="dim"))
    edges = Table(title="edges per run", title_justify="left")
    edges.add_column("edge")
    edges.add_column("per run", justify="right")
    edges.add_column("runs taking it 0x, 1x, 2x...")
    for (s, t, d), per_run in report.edge_counts().items():
        spread = Counter(per_run)
        shape = ", ".join(f"{k}x {v}" for k, v in sorted(spread.items()))
        edges.add_row(shown(f"{s} --{t}--> {d}"), f"{sum(per_run) / n:.2f}", shape)
    numbers = Table(title="runs", title_justify="left", show_header=False)
    numbers.add_column()
    numbers.add_column()
    terminals = ", ".join(f"{k} {v} ({v / n:.0%})" for k, v in sorted(report.terminals().items()))
    numbers.add_row("terminals", shown(terminals))
    mean, t_low, t_high = report.tokens()
    numbers.add_row("tokens per run", f"{mean:.0f} [{t_low:.0f}, {t_high:.0f}]")
    cost = report.cost()
    numbers.add_row(
        "cost", "not reported" if cost is None else f"{cost:.6g} ({cost / n:.3g} per run)"
    )
    latency = report.latency()
    numbers.add_row(
        "seconds per run",
        f"mean {latency['mean']:.3f}, p50 {latency['p50']:.3f}, p95 {latency['p95']:.3f}",
    )
    failed = [o.error for o in report.outcomes if o.error is not None]
    if failed:
        numbers.add_row(
            "runs that raised", shown(f"{len(failed)}, the first: {short(failed[0], 80)}")
        )
    numbers.add_row("wall time", f"{report.seconds:.2f}s ({report.concurrency} at once)")
    numbers.add_row("eval id", shown(report.id))
    return Group(cases, counts, edges, numbers)


def comparison_tables(comparison: EvalComparison) -> Group:
    """Every compared quantity, A against B, changes marked; then the verdict."""
    a, b = comparison.a, comparison.b
    rows = Table(title=shown(f"A: {a.name} ({a.id}) -> B: {b.name} ({b.id})"), title_justify="left")
    for name, justify in (
        ("what", "left"),
        ("A", "right"),
        ("B", "right"),
        ("change", "right"),
        ("p (adj.)", "right"),
        ("", "left"),
    ):
        rows.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in comparison.rows:
        what = f"{row.case}: {row.what}" if row.case else row.what
        if row.kind == "edge":
            values = (f"{row.a:.2f}", f"{row.b:.2f}", f"{row.delta:+.2f}")
        else:
            values = (f"{row.a:.0%}", f"{row.b:.0%}", f"{row.delta * 100:+.0f} pts")
        p = "" if row.p_adjusted is None else f"{row.p_adjusted:.3g}"
        mark = (
            Text("REGRESSION", style="bold red")
            if row.regression
            else (Text("changed", style="yellow") if row.significant else Text(""))
        )
        rows.add_row(shown(short(what, 70)), *values, p, mark)
    style = "green" if not comparison.changes else "red" if comparison.regressions else "yellow"
    verdict = Text(comparison.verdict, style=style)
    parts: list[Table | Text] = [rows, verdict]
    if comparison.unmatched:
        parts.append(shown(f"left out (ran on one side only): {', '.join(comparison.unmatched)}"))
    return Group(*parts)
