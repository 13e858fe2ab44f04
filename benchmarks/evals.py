"""How long an eval takes on the scripted model: 100 cases x 10 runs, and its parts.

    python benchmarks/evals.py [--cases 100] [--runs 10] [--concurrency 8] [--repeat 3]

Each run is a seeded :class:`agentfsm.testing.StochasticModel` agent answering a
question with one tool call and then, with a chance of 0.3 each turn, another (so runs
take 14 to 40-odd transitions; 2.4 model calls on average). It prints one table: the
median of ``--repeat`` evals for running it, saving it to a SQLite store, reading it
back, drawing its report in the terminal and comparing it with another eval of the same
configuration. Run it by hand; no test times anything.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from agentfsm import Agent, tool  # noqa: E402
from agentfsm._cli._eval_tables import report_tables  # noqa: E402
from agentfsm.evals import Case, Dataset, EvalReport, Expect, compare, evaluate_sync  # noqa: E402
from agentfsm.providers import call_tool, say  # noqa: E402
from agentfsm.store import SQLiteStore  # noqa: E402
from agentfsm.testing import StochasticModel  # noqa: E402


@tool
def lookup(query: str) -> str:
    """Look a fact up."""
    return f"{query}: 42"


def agent(seed: int) -> Agent:
    model = StochasticModel(
        [
            [(0.97, call_tool("lookup", query="fact")), (0.03, say("I cannot tell."))],
            [(0.7, say("It is 42.")), (0.3, call_tool("lookup", query="more"))],
        ],
        seed=seed,
    )
    return Agent(model, [lookup], max_runs=10)


def dataset(cases: int) -> Dataset:
    return Dataset(
        [Case(f"question {i}", [Expect.contains("42")], name=f"q{i}") for i in range(cases)],
        name="bench",
        expect=[Expect.ends_in("ok"), Expect.edge("deciding", "loop", at_most=3)],
    )


def timed(action: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, value = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        value = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = dataset(args.cases)
    total = args.cases * args.runs

    def run(seed: int) -> EvalReport:
        return evaluate_sync(agent(seed), data, runs=args.runs, concurrency=args.concurrency)

    seconds, report = timed(lambda: run(1), args.repeat)
    other = run(2)
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "evals.db")
        saving, saved = timed(lambda: _save_fresh(store, report), args.repeat)
        reading, _ = timed(lambda: EvalReport.load(store, saved), args.repeat)
        store.close()
    drawing, _ = timed(
        lambda: Console(file=io.StringIO(), width=120).print(report_tables(report)), args.repeat
    )
    comparing, comparison = timed(lambda: compare(report, other), args.repeat)
    counts = report.path_counts()
    transitions = sum(len(report.paths[i][1]) * n for i, n in counts.items())
    table = Table(
        title=f"an eval of {args.cases} cases x {args.runs} runs "
        f"({args.concurrency} at once), median of {args.repeat}"
    )
    table.add_column("what")
    table.add_column("seconds", justify="right")
    table.add_column("per run", justify="right")
    for what, value in (
        ("run the eval", seconds),
        ("save it to a SQLite store", saving),
        ("read it back", reading),
        ("draw its report (rich)", drawing),
        ("compare it with another", comparing),
    ):
        table.add_row(what, f"{value:.3f}", f"{value / total * 1e6:.0f} µs")
    console = Console()
    console.print(table)
    console.print(
        f"{total} runs, {transitions} transitions ({transitions / total:.1f} per run), "
        f"{len(report.paths)} distinct paths; the comparison: {comparison.verdict}"
    )


def _save_fresh(store: SQLiteStore, report: EvalReport) -> str:
    """Save ``report`` under a new id each time (an id is kept once)."""
    # import time: the benchmark's own helper
    import attrs

    from agentfsm._evals._runner import new_eval_id

    fresh = attrs.evolve(report, id=new_eval_id(report.name))
    fresh.save(store)
    return fresh.id


if __name__ == "__main__":
    main()
