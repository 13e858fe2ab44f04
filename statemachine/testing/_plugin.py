"""The agentfsm pytest plugin, installed with the package (entry point ``pytest11``).

Fixtures:

* ``scripted_model(*replies, name="scripted")``: a :class:`~agentfsm.providers.ScriptedModel`
  answering ``replies`` in order (or one function of the conversation);
* ``agentfsm_store``: a :class:`~agentfsm.store.SQLiteStore` in the test's temporary folder;
* ``cassette(model=None)``: the test's cassette (``cassettes/<file>/<test>.json`` next to
  the test file) replayed as a model; with no cassette yet, ``model`` recording into it.
  A request that differs from the recorded one fails the test with a diff.

* ``eval_gate(report, baseline)``: fails the test when the eval ``report`` regressed
  against ``baseline`` (an eval id, a report file, or a configuration's name: its newest
  saved eval of the same dataset), as ``agentfsm eval compare`` judges it;
  ``--agentfsm-eval-db``, ``--agentfsm-eval-alpha``, ``--agentfsm-eval-max-drop`` set
  where baselines are and how strict it is; ``--agentfsm-eval-save`` saves each report.

Options: ``--agentfsm-coverage`` reports, for each machine the tests ran, the edges and
paths their runs took against all of them, the edges none took, and how many paths none
took (``--agentfsm-coverage=full`` lists them);
``--agentfsm-fail-under=PCT`` fails the session when the edges taken, over all those
machines, are under ``PCT`` percent; ``--agentfsm-coverage-dir=DIR`` draws each machine
(Mermaid) with every edge's count; ``--agentfsm-cassettes=strict|new_episodes|rewrite``
says how ``cassette`` replays. Under pytest-xdist the coverage is every worker's, added up.
"""

from __future__ import annotations

import json
import re
import types
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel
    from agentfsm._machine import MachineTable
    from agentfsm._run import Run
    from agentfsm.store import SQLiteStore

_COVERAGE = "agentfsm-coverage"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentfsm", "agentfsm machines")
    group.addoption(
        "--agentfsm-coverage",
        nargs="?",
        const="summary",
        default=None,
        choices=("summary", "full"),
        help="report the edges and paths of each machine the tests' runs took: the edges "
        "never taken and a count of the paths (summary, the default), or every path never "
        "taken too (--agentfsm-coverage=full)",
    )
    group.addoption(
        "--agentfsm-fail-under",
        type=float,
        metavar="PCT",
        default=None,
        help="fail when under PCT percent of the edges of the machines run were taken",
    )
    group.addoption(
        "--agentfsm-coverage-dir",
        metavar="DIR",
        default=None,
        help="draw each machine run, with the count of each edge, as DIR/<machine>.mmd",
    )
    group.addoption(
        "--agentfsm-eval-db",
        metavar="PATH",
        default=None,
        help="the store the eval_gate fixture reads baselines from and saves evals to "
        "(default: $AGENTFSM_DB or agentfsm.db)",
    )
    group.addoption(
        "--agentfsm-eval-save",
        action="store_true",
        help="save every eval the eval_gate fixture judges to --agentfsm-eval-db",
    )
    group.addoption(
        "--agentfsm-eval-alpha",
        type=float,
        default=0.05,
        metavar="RATE",
        help="the error rate of eval_gate's comparisons (default 0.05)",
    )
    group.addoption(
        "--agentfsm-eval-max-drop",
        type=float,
        default=0.0,
        metavar="POINTS",
        help="the least significant drop of a pass rate, in points, that fails eval_gate",
    )
    group.addoption(
        "--agentfsm-cassettes",
        choices=("strict", "new_episodes", "rewrite"),
        default="strict",
        help="how the cassette fixture replays: strict (default), new_episodes, rewrite",
    )


#: pytest-asyncio's setting that warns at the start of every session while unset.
_LOOP_SCOPE = "asyncio_default_fixture_loop_scope"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _default_loop_scope(config)
    wanted = (
        config.getoption("agentfsm_coverage")
        or config.getoption("agentfsm_fail_under") is not None
        or config.getoption("agentfsm_coverage_dir") is not None
    )
    if wanted:
        config.pluginmanager.register(CoverageReport(config), _COVERAGE)


def _default_loop_scope(config: pytest.Config) -> None:
    """With pytest-asyncio installed and ``asyncio_default_fixture_loop_scope`` unset, take
    ``function``, the default its next versions will have: a project testing agents starts
    with no deprecation warning in its header. A value the project sets is left alone."""
    try:
        unset = not config.getini(_LOOP_SCOPE)
    except ValueError:  # pytest-asyncio is not installed: nothing to set
        return
    cache = getattr(config, "_inicache", None)  # pytest's cache of ini values
    if unset and isinstance(cache, dict):
        cache[_LOOP_SCOPE] = "function"


# ---------------------------------------------------------------- coverage


class _Taken:
    """A global run hook: the edges and whole paths each machine's runs took."""

    def __init__(self) -> None:
        self.tables: dict[str, MachineTable] = {}
        self.edges: dict[str, Counter[tuple[str, str]]] = {}
        self.paths: dict[str, Counter[tuple[tuple[str, str], ...]]] = {}
        #: Runs a planner made to try its scenarios, not the tests' runs.
        self.ignored: weakref.WeakSet[Run] = weakref.WeakSet()

    def run_started(self, run: Run) -> None:
        # import time: pytest loads the plugin in every session
        from agentfsm.testing._cases import PLANNING

        if PLANNING.get():
            self.ignored.add(run)
            return
        name = run.table.name
        if name not in self.tables:
            self.tables[name] = run.table
            self.edges[name] = Counter()
            self.paths[name] = Counter()

    def transition(self, run: Run, transition: Any) -> None:
        if run in self.ignored:
            return
        self.edges[run.table.name][(transition.source, transition.trigger)] += 1

    def run_ended(self, run: Run) -> None:
        if run in self.ignored:
            return
        path = tuple((t.source, t.trigger) for t in run.trace)
        self.paths[run.table.name][path] += 1


class CoverageReport:
    """Counts the runs of the session; reports, draws and judges their coverage.

    Under pytest-xdist each worker counts its own tests' runs and sends what it saw (plain
    data, :func:`covered`) to the controller, which adds them up and reports once."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.taken = _Taken()
        #: Each machine's coverage, by name: this process's, or the workers' added up.
        self.covered: dict[str, Covered] = {}
        self._remove: Callable[[], None] | None = None
        self.ratio: float | None = None
        self._worker = hasattr(config, "workerinput")
        #: The controller of an xdist session: it runs no test, its workers do.
        self._spread = not self._worker and bool(getattr(config.option, "numprocesses", None))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # import time: pytest loads the plugin in every session
        from agentfsm._hooks import add_global_hook

        if not self._spread:
            self._remove = add_global_hook(self.taken)

    def _stop(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """An xdist worker is done: add what its runs took."""
        sent = getattr(node, "workeroutput", {}).get(_COVERAGE) or {}
        for name, seen in sent.items():
            known = self.covered.get(name)
            self.covered[name] = seen if known is None else merged(known, seen)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._stop()
        folder = self.config.getoption("agentfsm_coverage_dir")
        if not self._spread:
            taken = self.taken
            self.covered = {
                name: covered(table, taken.edges[name], taken.paths[name], draw=folder is not None)
                for name, table in taken.tables.items()
            }
        if self._worker:  # the controller reports
            self.config.workeroutput[_COVERAGE] = self.covered  # type: ignore[attr-defined]
            return
        under = self.config.getoption("agentfsm_fail_under")
        self.ratio = self._edge_ratio()
        failing = under is not None and self.ratio is not None and self.ratio * 100 < under
        if failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if folder is not None:
            self._draw(Path(folder))

    def _edge_ratio(self) -> float | None:
        edges = [e for seen in self.covered.values() for e in seen["edges"]]
        if not edges:
            return None
        return sum(1 for e in edges if e[4]) / len(edges)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self._worker:
            return
        write = terminalreporter.write_line
        terminalreporter.section("agentfsm coverage")
        if not self.covered:
            write("no run of any machine was made")
        full = self.config.getoption("agentfsm_coverage") == "full"
        for name, seen in sorted(self.covered.items()):
            for line in machine_report(name, seen, full=full):
                write(line)
        under = self.config.getoption("agentfsm_fail_under")
        if under is not None and self.ratio is not None:
            failing = self.ratio * 100 < under
            verdict = "FAIL" if failing else "ok"
            write(
                f"edges taken over all machines: {self.ratio:.1%} "
                f"(--agentfsm-fail-under={under:g}): {verdict}"
            )
            if failing:  # pytest's last line counts what its stats hold: say it there too
                verdict_report = types.SimpleNamespace(count_towards_summary=True, when="")
                terminalreporter.stats.setdefault("agentfsm_fail_under", []).append(verdict_report)

    def _draw(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, seen in self.covered.items():
            (folder / f"{name}.mmd").write_text(coverage_mermaid(seen))


#: One machine's coverage as plain data (it crosses from an xdist worker to the controller):
#: ``edges``, every edge as ``[source, trigger, dest, why, runs that took it]``; ``paths``,
#: every path as ``[entry, text, [[source, trigger], ...], runs that took it, why no run
#: can take it or None]``; ``runs``, how many runs; ``drawing``, the machine in Mermaid
#: with each edge's label left as ``@@index@@``, or None when no drawing was asked for.
Covered = dict[str, Any]


def covered(
    table: MachineTable,
    edges: Counter[tuple[str, str]],
    runs: Counter[tuple[tuple[str, str], ...]],
    *,
    draw: bool = False,
) -> Covered:
    """What the runs of ``table`` took (``edges`` and whole paths counted) as plain data."""
    # import time: pytest loads the plugin in every session
    from agentfsm._paths import paths

    every = [(p, tuple((e.source, e.trigger) for e in p.edges)) for p in paths(table)]
    missed = any(not runs[key] for _, key in every)
    impossible = _impossible(table) if missed else {}
    return {
        "edges": [
            [e.source, e.trigger, e.dest, e.why, edges[(e.source, e.trigger)]] for e in table.edges
        ],
        "paths": [
            [p.entry, p.text, [list(k) for k in key], runs[key], impossible.get(p.edges)]
            for p, key in every
        ],
        "runs": sum(runs.values()),
        "drawing": _drawing(table) if draw else None,
    }


def merged(one: Covered, other: Covered) -> Covered:
    """The coverage of two sets of runs of the same machine, added up."""
    counts: Counter[tuple[str, str]] = Counter()
    for e in (*one["edges"], *other["edges"]):
        counts[(e[0], e[1])] += e[4]
    took: Counter[tuple[tuple[str, str], ...]] = Counter()
    why: dict[tuple[tuple[str, str], ...], str | None] = {}
    for p in (*one["paths"], *other["paths"]):
        key = _edges_of(p)
        took[key] += p[3]
        why[key] = why.get(key) or p[4]
    return {
        "edges": [[*e[:4], counts[(e[0], e[1])]] for e in one["edges"]],
        "paths": [[*p[:3], took[key], why[key]] for p in one["paths"] for key in [_edges_of(p)]],
        "runs": one["runs"] + other["runs"],
        "drawing": one["drawing"] or other["drawing"],
    }


def _edges_of(path: list[Any]) -> tuple[tuple[str, str], ...]:
    """A path of :data:`Covered` by what tells it apart: its (source, trigger) pairs."""
    return tuple((source, trigger) for source, trigger in path[2])


def machine_report(name: str, seen: Covered, *, full: bool = True) -> list[str]:
    """The lines that report one machine: edges and paths taken, and the untaken ones
    (the untaken paths listed when ``full``, else counted).

    An untaken path that no run can take (:attr:`PathCase.unforceable`) says so.
    """
    untaken = [e for e in seen["edges"] if not e[4]]
    missed = [p for p in seen["paths"] if not p[3]]
    impossible = sum(1 for p in missed if p[4])
    n_edges, n_paths = len(seen["edges"]), len(seen["paths"])
    taken_paths = n_paths - len(missed)
    note = f"; {impossible} no run can take" if impossible else ""
    lines = [
        f"{name}: {seen['runs']} runs; edges {n_edges - len(untaken)}/{n_edges} "
        f"({(n_edges - len(untaken)) / n_edges:.0%}), "
        f"paths {taken_paths}/{n_paths} ({taken_paths / n_paths:.0%}{note})"
    ]
    if untaken:
        lines.append("  edges never taken:")
        lines += [
            f"    {source} --{trigger}--> {dest}  ({why})"
            for source, trigger, dest, why, _ in untaken
        ]
    if missed and not full:
        lines.append(f"  {len(missed)} paths never taken (--agentfsm-coverage=full lists them)")
    elif missed:
        lines.append("  paths never taken:")
        for entry, text, _, _, why in missed:
            lines.append(f"    {entry}: {text}" + ("  (no run can take it)" if why else ""))
    return lines


def _impossible(table: MachineTable) -> dict[tuple[Any, ...], str]:
    """The paths of ``table`` that :func:`path_cases` finds no run can take, with why."""
    # import time: pytest loads the plugin in every session
    from agentfsm.testing import path_cases

    return {
        c.path.edges: c.unforceable
        for c in path_cases(table)
        if c.unforceable is not None and c.scenario is not None
    }


def _drawing(table: MachineTable) -> str:
    """The machine as a Mermaid state diagram, edge ``i`` labelled ``@@i@@`` (counts go there)."""
    # import time: pytest loads the plugin in every session
    from agentfsm._mermaid import Drawing, mermaid

    # import time: pytest loads the plugin in every session
    from agentfsm._paths import state_label

    index = {(e.source, e.trigger): i for i, e in enumerate(table.edges)}
    drawing = Drawing(
        states=table.states,
        terminals=table.terminals,
        entries=table.entries,
        edges=table.edges,
        id=state_label,
        edge_label=lambda e: f"@@{index[(e.source, e.trigger)]}@@",
    )
    return mermaid(drawing)


def coverage_mermaid(seen: Covered) -> str:
    """The machine as a Mermaid state diagram, each edge labelled with its count."""
    edges = seen["edges"]

    def label(found: re.Match[str]) -> str:
        _, trigger, _, _, count = edges[int(found[1])]
        return f"{trigger} x{count}" if count else f"{trigger} NEVER"

    return re.sub(r"@@(\d+)@@", label, seen["drawing"] or "")


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def scripted_model() -> Callable[..., Any]:
    """Make a scripted model: ``scripted_model(call_tool("add", a=1, b=2), say("3"))``."""
    # import time: pytest loads the plugin in every session
    from agentfsm.providers import ScriptedModel

    def make(*replies: Any, name: str = "scripted") -> ScriptedModel:
        if len(replies) == 1 and callable(replies[0]):
            return ScriptedModel(replies[0], model_name=name)
        return ScriptedModel(list(replies), model_name=name)

    return make


@pytest.fixture
def agentfsm_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A run store in a file of the test's temporary folder, closed after the test."""
    # import time: pytest loads the plugin in every session
    from agentfsm.store import SQLiteStore

    store = SQLiteStore(tmp_path / "runs.db")
    try:
        yield store
    finally:
        store.close()


_PLAYED: pytest.StashKey[list[Any]] = pytest.StashKey()


def _cassette_path(request: pytest.FixtureRequest) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")
    return request.path.parent / "cassettes" / request.path.stem / f"{name}.json"


@pytest.fixture
def cassette(request: pytest.FixtureRequest) -> Iterator[Callable[..., ChatModel]]:
    """The test's cassette as a model: ``model = cassette(real_model)``.

    Replays ``cassettes/<test file>/<test>.json`` (next to the test file) when it
    exists; otherwise records ``model`` into it (a test with no cassette and no
    model fails). ``--agentfsm-cassettes`` picks the mode; ``rewrite`` records anew.
    A request that differs from the recorded one fails the test with a diff.
    """
    # import time: pytest loads the plugin in every session
    from agentfsm.testing import Cassette, record

    mode = request.config.getoption("agentfsm_cassettes")
    played: list[Cassette] = request.node.stash.setdefault(_PLAYED, [])

    def make(model: ChatModel | None = None, *, path: str | Path | None = None) -> ChatModel:
        where = Path(path) if path is not None else _cassette_path(request)
        if mode == "rewrite" or not where.exists():
            if model is None:
                pytest.fail(f"no cassette at {where}: pass the real model once to record it")
            if where.exists():
                where.unlink()
            return record(model, where)
        if mode == "new_episodes" and model is not None:
            replay = Cassette(where, "new_episodes", model=model)
        else:
            replay = Cassette(where)
        played.append(replay)
        return replay

    yield make


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A test whose cassette met a request it did not record fails, showing the diff."""
    report = yield
    if call.when != "call":
        return report
    mismatches = [m for c in item.stash.get(_PLAYED, []) for m in c.mismatches]
    if mismatches:
        text = "\n\n".join(m.message for m in mismatches)
        if report.outcome == "passed":
            report.longrepr = text
        report.outcome = "failed"
        report.sections.append(("cassette mismatch", text))
    return report


@pytest.fixture
def eval_gate(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``eval_gate(report, baseline)``: compare the eval ``report`` with ``baseline`` and fail
    the test, showing every regression, when it regressed; returns the comparison.

    ``baseline`` is an eval id or a configuration name in ``--agentfsm-eval-db`` (a name
    means its newest eval of the same dataset), or a report file (``.json``); None judges
    nothing. With ``--agentfsm-eval-save`` the report is saved as well, and a report whose
    own name is ``baseline``, with none saved yet, is the first: it passes, saved.
    """
    # import time: pytest loads the plugin in every session
    from agentfsm._evals._compare import compare

    # import time: pytest loads the plugin in every session
    from agentfsm._evals._report import EvalReport

    # import time: pytest loads the plugin in every session
    from agentfsm._resumable import default_db

    # import time: pytest loads the plugin in every session
    from agentfsm.store import SQLiteStore

    config = request.config
    db = config.getoption("agentfsm_eval_db") or default_db()

    def baseline_of(store: SQLiteStore, spec: str, report: EvalReport) -> EvalReport | None:
        if spec.endswith(".json"):
            return EvalReport.from_json(json.loads(Path(spec).read_text(encoding="utf-8")))
        rows = store.evals()
        if any(row[0] == spec for row in rows):
            return EvalReport.load(store, spec)
        named = [row for row in rows if row[1] == spec and row[2] == report.dataset]
        if named:
            return EvalReport.load(store, named[0][0])
        if config.getoption("agentfsm_eval_save") and report.name == spec:
            return None  # the first run of a configuration: saved, it is the next one's baseline
        pytest.fail(
            f"eval_gate: no eval {spec!r} of dataset {report.dataset!r} in {db} "
            "(--agentfsm-eval-save saves a first one)",
            pytrace=False,
        )

    def gate(report: EvalReport, baseline: str | None) -> Any:
        with SQLiteStore(db) as store:
            base = None if baseline is None else baseline_of(store, baseline, report)
            if config.getoption("agentfsm_eval_save"):
                report.save(store)
        if base is None:
            return None
        comparison = compare(
            base,
            report,
            alpha=config.getoption("agentfsm_eval_alpha"),
            threshold=config.getoption("agentfsm_eval_max_drop") / 100,
        )
        if not comparison.ok:
            try:
                comparison.check()
            except AssertionError as exc:
                said = str(exc)
            pytest.fail(said, pytrace=False)
        return comparison

    return gate
