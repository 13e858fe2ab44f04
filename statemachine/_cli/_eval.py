"""``agentfsm eval``: run a dataset on an agent, list and show saved evals, compare two.

``agentfsm eval run DATASET.json --agent MODULE:ATTR`` runs every case ``--runs`` times
(``--model PROVIDER:NAME`` swaps the agent's model), with a progress bar on stderr, and
prints the report (``--json``: the report's JSON on stdout) and saves it to the store.
``--against EVAL`` compares it with a saved eval (or a report file) and exits 1 on a
regression of at least ``--max-drop`` points; ``--fail-under PCT`` exits 1 when fewer
runs than that met every expectation. ``agentfsm eval compare A B`` compares two, with
the same exit code: a gate for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._agent import Agent
from .._agent_spec import UsageError
from .._errors import StoreError
from .._evals._compare import EvalComparison, compare
from .._evals._dataset import Dataset
from .._evals._report import EvalReport
from .._evals._runner import evaluate
from .._printable import printable, shown
from .._resumable import default_db
from .._serialization import FormatError
from .._spec import import_attribute
from ..store import SQLiteStore
from . import _runs as _runs_cli
from ._eval_tables import comparison_tables, report_tables
from ._values import positive

__all__ = ["add_parser"]


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of points (0-100), got {text!r}"
        ) from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a number of points (0-100), got {text!r}")
    return value / 100


def _alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an error rate such as 0.05, got {text!r}"
        ) from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected an error rate between 0 and 1, got {text!r}")
    return value


def _gate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--alpha",
        type=_alpha,
        default=0.05,
        metavar="RATE",
        help="the error rate of the comparison (default 0.05)",
    )
    parser.add_argument(
        "--correction",
        choices=("holm", "bh"),
        default="holm",
        help="holm (default: the chance of any false change stays under --alpha) "
        "or bh (Benjamini-Hochberg: the expected share of false changes)",
    )
    parser.add_argument(
        "--max-drop",
        type=_share,
        default=0.0,
        metavar="POINTS",
        help="the least significant drop of a pass rate (or rise of error), in "
        "points, that fails (default 0: any significant one)",
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``eval`` command and its subcommands."""
    top: argparse.ArgumentParser = subparsers.add_parser(
        "eval",
        help="run a dataset many times on an agent, and compare two configurations",
        description="Evals: run each case of a dataset many times on an agent and report "
        "each expectation's pass rate (with its interval), the paths, terminals and edges "
        "taken, tokens, cost and latency; compare two evals with tests corrected for "
        "multiple comparisons, exiting 1 on a regression.",
    )
    commands = top.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)
    run = commands.add_parser(
        "run",
        help="run a dataset on an agent and report (and save) it",
        description="Run every case of DATASET.json --runs times on --agent, --concurrency at "
        "once; print the report (--json: as JSON on stdout) and save it to the store (--db) "
        "unless --no-save. With --against, compare with a saved eval (or a report file) and "
        "exit 1 on a regression; with --fail-under, exit 1 when fewer runs met every "
        "expectation.",
    )
    run.add_argument("dataset", metavar="DATASET.json", help="the dataset file")
    run.add_argument(
        "--agent",
        required=True,
        metavar="MODULE:ATTR",
        help="an Agent, or a function making one (called once per run)",
    )
    run.add_argument(
        "--model",
        metavar="NAME",
        help="run the agent on this model instead of its own, named PROVIDER:NAME "
        "(openai:gpt-4.1-mini, anthropic:..., scripted:echo)",
    )
    run.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server's URL")
    run.add_argument("--runs", type=positive, default=10, metavar="N", help="runs per case (10)")
    run.add_argument(
        "--concurrency", type=positive, default=8, metavar="N", help="runs at once at most (8)"
    )
    run.add_argument(
        "--name", metavar="NAME", help="the configuration's name (default: the model's)"
    )
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument("--no-save", action="store_true", help="do not save it to the store")
    run.add_argument(
        "--against", metavar="EVAL", help="a saved eval's id (or a report file) to compare with"
    )
    run.add_argument(
        "--fail-under",
        type=_share,
        default=None,
        metavar="PCT",
        help="exit 1 when under PCT percent of the runs met every expectation",
    )
    _gate_options(run)
    _runs_cli.add_db_option(run)
    run.set_defaults(handler=_run)
    cmp = commands.add_parser(
        "compare",
        help="compare two evals of one dataset; exit 1 on a regression",
        description="Compare eval B (the candidate) with eval A (the baseline): every pass "
        "rate and terminal share (Fisher's exact test) and every edge's count per run "
        "(Mann-Whitney U), corrected together (Holm, or --correction bh). Exit 1 when B "
        "regressed: a significant drop of a pass rate or rise of error, of --max-drop points "
        "at least. A and B are saved evals' ids or report files (agentfsm eval run --json).",
    )
    cmp.add_argument("a", metavar="A", help="the baseline: an eval id or a report file")
    cmp.add_argument("b", metavar="B", help="the candidate: an eval id or a report file")
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    _gate_options(cmp)
    _runs_cli.add_db_option(cmp)
    cmp.set_defaults(handler=_compare)
    listing = commands.add_parser(
        "list",
        help="list the evals saved in the store",
        description="List the evals saved in the store, newest first.",
    )
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    _runs_cli.add_db_option(listing)
    listing.set_defaults(handler=_list)
    show = commands.add_parser(
        "show",
        help="print a saved eval's report",
        description="Print the report of a saved eval (or a report file).",
    )
    show.add_argument("eval", metavar="EVAL", help="an eval id or a report file")
    show.add_argument("--json", action="store_true", help="print it as JSON")
    _runs_cli.add_db_option(show)
    show.set_defaults(handler=_show)
    return top


# ---------------------------------------------------------------- reading


def _db(args: argparse.Namespace) -> str:
    return _runs_cli.given_db(args.db) if args.db is not None else default_db()


def _report(spec: str, args: argparse.Namespace) -> EvalReport:
    """The report ``spec`` names: a report file, else an eval saved in the store."""
    path = pathlib.Path(spec)
    if spec.endswith(".json") or _is_file(path):
        try:
            return EvalReport.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise UsageError(f"{spec}: no such file") from None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise UsageError(f"{spec}: cannot read an eval report: {exc}") from None
    with _store(_db(args)) as store:
        try:
            return EvalReport.load(store, spec)
        except (StoreError, ValueError) as exc:
            raise UsageError(str(exc)) from None


def _is_file(path: pathlib.Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _store(db: str, *, create: bool = False) -> SQLiteStore:
    try:
        if create and not os.path.exists(db):
            return SQLiteStore(db)
        return _runs_cli.open_store(db, read_only=not create)
    except (FormatError, StoreError) as exc:
        raise UsageError(str(exc)) from None


# ---------------------------------------------------------------- running


def _agent_source(args: argparse.Namespace) -> Agent | Callable[[], Agent]:
    value = import_attribute(args.agent, "--agent", UsageError)
    if not isinstance(value, Agent) and not callable(value):
        raise UsageError(
            f"--agent {args.agent} is a {type(value).__name__}, not an Agent or a function"
        )
    if args.model is None:
        if args.base_url is not None:
            raise UsageError("--base-url goes with --model PROVIDER:NAME")
        return value  # type: ignore[no-any-return]
    provider, _, name = args.model.partition(":")
    if not provider or not name:
        raise UsageError(f"--model takes PROVIDER:NAME (openai:gpt-4.1-mini), got {args.model!r}")
    # the command starts fast: only a run on another model loads the providers
    from ..providers import create_model

    try:
        model = create_model(provider, name, base_url=args.base_url)
    except ValueError as exc:
        raise UsageError(f"--model {args.model}: {exc}") from None

    def make() -> Agent:
        agent = value if isinstance(value, Agent) else value()
        if not isinstance(agent, Agent):
            raise UsageError(f"--agent {args.agent} made a {type(agent).__name__}, not an Agent")
        agent.model = model
        return agent

    return make


def _run(args: argparse.Namespace) -> int:
    try:
        dataset = Dataset.load(args.dataset)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    source = _agent_source(args)
    baseline = _report(args.against, args) if args.against else None
    db = _db(args)
    store = None if args.no_save else _store(db, create=True)
    err = Console(stderr=True)
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as bar:
            task = bar.add_task(
                printable(f"eval {dataset.name}"), total=len(dataset.cases) * args.runs
            )

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done)

            try:
                report = asyncio.run(
                    evaluate(
                        source,
                        dataset,
                        runs=args.runs,
                        concurrency=args.concurrency,
                        name=args.name,
                        store=store,
                        progress=progress,
                    )
                )
            except (TypeError, ValueError, StoreError) as exc:
                raise UsageError(str(exc)) from None
    finally:
        if store is not None:
            store.close()
    comparison = None
    if baseline is not None:
        comparison = _compared(baseline, report, args)
    failed_under = args.fail_under is not None and report.overall.value < args.fail_under
    if args.json:
        doc = report.to_json()
        if comparison is not None:
            doc["comparison"] = comparison.to_json()
        print(json.dumps(doc, indent=1, ensure_ascii=False))
    else:
        out = Console()
        out.print(report_tables(report))
        if comparison is not None:
            out.print(comparison_tables(comparison))
        if store is not None:
            print(printable(f"saved: eval {report.id} in {db}"))
    if failed_under:
        print(
            printable(
                f"agentfsm eval: {report.overall.value:.1%} of the runs met every expectation, "
                f"under --fail-under {args.fail_under:.0%}"
            ),
            file=sys.stderr,
        )
    regressed = comparison is not None and not comparison.ok
    return 1 if failed_under or regressed else 0


def _compared(a: EvalReport, b: EvalReport, args: argparse.Namespace) -> EvalComparison:
    try:
        return compare(a, b, alpha=args.alpha, correction=args.correction, threshold=args.max_drop)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _compare(args: argparse.Namespace) -> int:
    comparison = _compared(_report(args.a, args), _report(args.b, args), args)
    if args.json:
        print(json.dumps(comparison.to_json(), indent=1, ensure_ascii=False))
    else:
        Console().print(comparison_tables(comparison))
    return 0 if comparison.ok else 1


def _list(args: argparse.Namespace) -> int:
    with _store(_db(args)) as store:
        rows = store.evals()
    if args.json:
        keys = ("id", "name", "dataset", "created")
        print(
            json.dumps(
                [dict(zip(keys, r, strict=True)) for r in rows], indent=1, ensure_ascii=False
            )
        )
        return 0
    if not rows:
        print("no evals saved yet (agentfsm eval run saves one)")
        return 0
    table = Table("eval", "name", "dataset", "when")
    # import time: only a listing shows times
    import datetime

    for eval_id, name, dataset, created in rows:
        when = datetime.datetime.fromtimestamp(created).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(shown(eval_id), shown(name), shown(dataset), when)
    Console().print(table)
    return 0


def _show(args: argparse.Namespace) -> int:
    report = _report(args.eval, args)
    if args.json:
        print(json.dumps(report.to_json(), indent=1, ensure_ascii=False))
    else:
        Console().print(report_tables(report))
    return 0
