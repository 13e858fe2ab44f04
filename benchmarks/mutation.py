"""Mutation testing of the core: which small changes to the engine no test notices.

Not part of CI: on two shared cores, one worker, the whole run takes about 25 minutes (the
first pass over the selected tests about 10, the mutants 0.16 s each on average: the tests
that killed a function's other mutants run first, see :func:`_run_tests_fast`); a survivor
of a hot function runs its few hundred tests, some tens of seconds. Run the modules one by
one with ``--only`` if time is short. The last run's numbers, and why each
survivor is equivalent, are in ``benchmarks/mutation.md``.
Run by hand::

    pip install -e '.[test,mutation]' --config-settings editable_mode=strict
    nice -n 19 python benchmarks/mutation.py            # every module of MODULES
    python benchmarks/mutation.py --selection           # which test files reach which module
    python benchmarks/mutation.py --report              # the numbers and the survivors again
    python benchmarks/mutation.py --recheck-only        # survivors again, in fresh processes
    python benchmarks/mutation.py --recheck-only --with-tests tests/test_x.py::test_new
                                                        # ... with tests written since the run
    python benchmarks/mutation.py --only 'agentfsm._run*'  # some mutants only (mutmut's globs)

mutmut (3.x) mutates files by their path and names a mutant by the module its
path spells, and it imports the code from its ``mutants/`` copy. This project's
folders are not its import names (``statemachine/`` installs as ``agentfsm``,
``providers/`` as ``agentfsm.providers``), so the script first lays the package
out under its import name in a work folder (``src/agentfsm/``, providers inside
it, the tests and the docs beside it) and runs mutmut there. The editable
install of the project stays as it is: mutmut puts its mutated copy first on
``sys.path``.

Which tests run: no list is kept by hand, the code decides, on every run.

1. A test file *reaches* a module when the module is in the import closure of the
   file: the modules the file imports (at any depth of the file, and through the
   helper modules of ``tests/`` it imports), then the modules those import, and so
   on. ``from agentfsm import Agent`` is an edge to the module that defines
   ``Agent`` (``agentfsm._agent``), not to the whole face, so a test of the store
   does not reach the engine by naming one of the face's names; ``import agentfsm``
   alone reaches everything the face imports. A test that only starts other
   processes (the docs' blocks, the workers of ``tests/``) reaches nothing here:
   mutmut's mutated copy lives in the test's own process, and another process
   never sees it.
2. The tests mutmut runs are the test files that reach at least one module of
   :data:`MODULES` (``--selection`` prints them, per module). A new test file is
   in the selection as soon as it imports what it tests.
3. mutmut then runs the selection once, unmutated, recording which test calls which
   mutated function (a test that fails there is set aside: it never runs against a
   mutant, which its failure would kill falsely), and runs for each mutant only the
   tests that call its function: first the few likeliest to kill it (those that killed
   the function's other mutants) in a pytest session that collects their files only,
   then, if it survives them, the rest, fastest first (:func:`_run_tests_fast`).
4. Each survivor runs those same tests once more in a fresh process, where what
   the package builds on import is built with the mutant in place (mutmut forks
   each mutant's tests from a process that already imported the package).

A survivor is a change of the code that no test fails on: either a missing test,
or an equivalent mutant (the code behaves the same, e.g. a default argument that
every caller passes). ``--report`` lists them, one line each, with the diff of each
in ``mutants.txt`` of the work folder. A mutant no test calls is "no tests": code
only run on import, or code the selection does not reach.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The modules mutated: the engine (the run, the steps, the machine's table), the
#: rooms that decide approvals and resumes (typed approvals, resuming a saved run,
#: which runs may resume, the gate's effects) and the machine's fingerprint.
MODULES = (
    "agentfsm._run",
    "agentfsm._steps",
    "agentfsm._machine",
    "agentfsm._approval",
    "agentfsm._resume",
    "agentfsm._resumable",
    "agentfsm._effects",
    "agentfsm._identity",
)

#: Where each package of the import names lives in the repository.
_PACKAGES = {"agentfsm": ROOT / "statemachine", "agentfsm.providers": ROOT / "providers"}


def _package_modules() -> dict[str, Path]:
    """Every module of the package by its import name, with its source file."""
    found: dict[str, Path] = {}
    for package, folder in _PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _test_modules() -> dict[str, Path]:
    """The modules of ``tests/`` by the names a test imports them under."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").glob("*.py")):
        found[f"tests.{path.stem}"] = path
        found[path.stem] = path  # pytest puts tests/ on sys.path (rootdir-less layout)
    return found


def _imported(path: Path, name: str) -> list[tuple[str, str | None]]:
    """What a module imports, anywhere in it: ``(module, name or None)`` pairs."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    pairs: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pairs += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            pairs += [(base, alias.name) for alias in node.names]
    return pairs


def _target(module: str, name: str | None, known: dict[str, Path]) -> str | None:
    """The module an import reaches: a module itself, or the one defining a name."""
    if name is not None and f"{module}.{name}" in known:
        return f"{module}.{name}"
    while module and module not in known:
        module = module.rpartition(".")[0]  # ``import agentfsm.store.sqlite`` and the like
    if not module:
        return None
    if name is None or name == "*" or not module.startswith("agentfsm"):
        return module
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return module
    if isinstance(value, ModuleType):
        return value.__name__ if value.__name__ in known else module
    defined = getattr(value, "__module__", None)
    if isinstance(defined, str) and defined in known and getattr(value, "__name__", "") == name:
        return defined  # a class or function: the module that defines it
    return module  # a constant: the module it came from, and all it imports


def selection(tests: Path | None = None) -> dict[str, list[str]]:
    """For each module of :data:`MODULES`, the test files that reach it (see the docstring)."""
    package = _package_modules()
    helpers = _test_modules()
    known = {**package, **helpers}
    edges: dict[str, set[str]] = {}

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            module = todo.pop()
            if module in seen:
                continue
            seen.add(module)
            if module not in edges:
                found = {_target(m, n, known) for m, n in _imported(known[module], module)}
                edges[module] = {f for f in found if f is not None}
            todo += sorted(edges[module] - seen)
        return seen

    chosen: dict[str, list[str]] = {module: [] for module in MODULES}
    for path in sorted((tests or ROOT / "tests").glob("test_*.py")):
        reached = reach(f"tests.{path.stem}")
        for module in MODULES:
            if module in reached:
                chosen[module].append(f"tests/{path.name}")
    return chosen


_CONFIG = """
[tool.mutmut]
source_paths = ["src/agentfsm"]
only_mutate = {modules}
also_copy = ["docs", "diagrams", "examples", "statemachine", "providers", "README.md", "mkdocs.yml"]
pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-x", "-q"]
pytest_add_cli_args_test_selection = {tests}
timeout_multiplier = 5.0
use_git_change_detection = false
"""


#: The work folder's ``tests/conftest.py`` (the project has none): mutmut's first run
#: of the tests (``stats``, unmutated) runs every selected test to its end; a test that
#: fails there (a flake of a loaded machine, a test that cannot run in mutmut's
#: process) is written down and never runs against a mutant, where its failure would
#: kill the mutant falsely. mutmut's "clean" run after it would run the same tests,
#: unmutated, a second time: it runs none.
_CONFTEST = """\
import os
import pathlib

FAILED = pathlib.Path(__file__).resolve().parent.parent / "stats-failures.txt"


def _mutant():
    return os.environ.get("MUTANT_UNDER_TEST", "")


def pytest_configure(config):
    if _mutant() == "stats":
        config.option.maxfail = 0


def pytest_runtest_logreport(report):
    if _mutant() == "stats" and report.failed:
        with FAILED.open("a") as out:
            out.write(report.nodeid + "\\n")


def pytest_collection_modifyitems(config, items):
    mutant = _mutant()
    if mutant in ("stats", "fail", "list_all_tests"):
        return
    failed = set(FAILED.read_text().splitlines()) if FAILED.exists() else set()
    dropped = [i for i in items if not mutant or i.nodeid in failed]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]


def pytest_sessionfinish(session, exitstatus):
    if (_mutant() == "stats" and exitstatus == 1) or (not _mutant() and exitstatus == 5):
        session.exitstatus = 0
"""


#: pytest's exit codes of a killed mutant: tests failed, collection failed, internal error.
_KILLED = (1, 2, 3)
_CACHES = shutil.ignore_patterns("__pycache__", "*.pyc")


#: The tests that killed a mutant, one ``function<TAB>test id`` a line, in the work folder:
#: each mutant's tests run the tests that killed its function's other mutants first.
_KILLERS = "killers.txt"
#: Each mutant's time in its worker, one ``mutant<TAB>seconds<TAB>exit code<TAB>tests`` a line.
_TIMES = "times.txt"
#: How many of a mutant's tests, the likeliest killers, run in a first short pytest session.
_FIRST = 8


def _ranked(
    tests: list[str], function: str, durations: dict[str, float], killers: list[tuple[str, str]]
) -> list[str]:
    """A mutant's tests, likeliest killer first: those that killed other mutants of its
    function (most kills first), then those that killed any mutant, then the fastest."""
    own: dict[str, int] = {}
    anywhere: dict[str, int] = {}
    for killed_function, test in killers:
        anywhere[test] = anywhere.get(test, 0) + 1
        if killed_function == function:
            own[test] = own.get(test, 0) + 1
    return sorted(
        tests,
        key=lambda t: (-own.get(t, 0), -anywhere.get(t, 0), durations.get(t, 0.0), t),
    )


#: mutmut's own ``PytestRunner.run_tests``, once :func:`_as_mutmut` replaced it.
_MUTMUT_RUN_TESTS: list[Any] = []


def _run_tests_fast(self: Any, *, mutant_name: str | None, tests: Iterable[str]) -> int:
    """mutmut's worker for one mutant (in place of ``PytestRunner.run_tests``).

    mutmut hands the tests that call the mutant's function to one pytest session, in no
    order: pytest collects every file among them (some 70 for the engine's hot
    functions) before the first test runs, and a killed mutant may die at the last one.
    Here the likeliest killers (:func:`_ranked`) run first in a session of their own,
    which collects their few files only; the rest, fastest first, run in a second
    session only if the mutant survives the first. The test that kills is written down
    (``killers.txt``) for the next mutants of the same function.
    """
    from mutmut.state import state  # mutmut's, in the worker only
    from mutmut.utils.file_utils import change_cwd  # likewise

    listed = sorted(tests)
    if not listed:  # mutmut's forced failure: the whole selection, as mutmut runs it
        return int(_MUTMUT_RUN_TESTS[0](self, mutant_name=mutant_name, tests=listed))
    work = Path.cwd()
    started = time.monotonic()
    function = (mutant_name or "").partition("__mutmut_")[0]
    killers_file = work / _KILLERS
    killers = [
        tuple(line.split("\t", 1))
        for line in (killers_file.read_text().splitlines() if killers_file.exists() else [])
    ]
    ordered = _ranked(listed, function, dict(state().duration_by_test), killers)  # type: ignore[arg-type]
    batches = [ordered[:_FIRST], ordered[_FIRST:]] if len(ordered) > 2 * _FIRST else [ordered]

    class FirstFailure:
        nodeid = ""

        def pytest_runtest_logreport(self, report: Any) -> None:
            if report.failed and not self.nodeid:
                self.nodeid = report.nodeid

    code = 0
    for batch in filter(None, batches):
        failure = FirstFailure()
        with change_cwd("mutants"):
            code = int(self.execute_pytest(self._pytest_args_regular_run(batch), plugins=[failure]))
        if code == 5:  # every test of the batch set aside (failed unmutated): none ran
            code = 0
        if code != 0:
            if failure.nodeid and function:
                with killers_file.open("a") as out:
                    out.write(f"{function}\t{failure.nodeid}\n")
            break
    with (work / _TIMES).open("a") as out:
        out.write(f"{mutant_name}\t{time.monotonic() - started:.3f}\t{code}\t{len(listed)}\n")
    return code


def _timed_run_tests(original: Any) -> Any:
    """mutmut's own worker, timed into ``times.txt`` (``--plain``: the numbers to compare)."""

    def run_tests(self: Any, *, mutant_name: str | None, tests: Iterable[str]) -> int:
        started = time.monotonic()
        listed = list(tests)
        code = int(original(self, mutant_name=mutant_name, tests=listed))
        with (Path.cwd() / _TIMES).open("a") as out:
            out.write(f"{mutant_name}\t{time.monotonic() - started:.3f}\t{code}\t{len(listed)}\n")
        return code

    return run_tests


def _as_mutmut(argv: list[str]) -> int:
    """mutmut's command line, its worker replaced by :func:`_run_tests_fast` (or timed
    only, with ``MUTATION_PLAIN=1``). The fork server and the workers are forked from
    this process, so they run the replaced worker too."""
    from mutmut.__main__ import cli  # mutmut's, only when running as mutmut
    from mutmut.runners.harness import PytestRunner  # likewise

    sys.path[0] = ""  # as ``python -m mutmut`` has it: the working folder, not benchmarks/
    _MUTMUT_RUN_TESTS.append(PytestRunner.run_tests)
    if os.environ.get("MUTATION_PLAIN") == "1":
        PytestRunner.run_tests = _timed_run_tests(PytestRunner.run_tests)  # type: ignore[method-assign]
    else:
        PytestRunner.run_tests = _run_tests_fast  # type: ignore[method-assign]
    try:
        cli.main(args=argv, prog_name="mutmut", standalone_mode=False)
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


def _path(module: str) -> str:
    """A module's file in the work folder's copy: ``agentfsm._run`` -> src/agentfsm/_run.py."""
    return "src/" + module.replace(".", "/") + ".py"


def _lay_out(work: Path, tests: list[str]) -> None:
    """The package under its import name, with the tests and the files they read.

    The work folder's ``pyproject.toml`` is the project's (its pytest settings) with
    mutmut's table added; the source folders are copied as they are too, for the
    tests that read the code as text.
    """
    src = work / "src" / "agentfsm"
    if src.exists():
        shutil.rmtree(src)
    ignore = _CACHES
    shutil.copytree(ROOT / "statemachine", src, ignore=ignore)
    shutil.copytree(ROOT / "providers", src / "providers", ignore=ignore)
    for folder in ("tests", "docs", "diagrams", "examples", "statemachine", "providers"):
        if (work / folder).exists():
            shutil.rmtree(work / folder)
        if (ROOT / folder).exists():
            shutil.copytree(ROOT / folder, work / folder, ignore=ignore)
    for name in ("README.md", "mkdocs.yml"):
        shutil.copy(ROOT / name, work / name)
    (work / "tests" / "conftest.py").write_text(_CONFTEST)
    config = _CONFIG.format(
        modules=_toml_list([_path(m) for m in MODULES]), tests=_toml_list(tests)
    )
    (work / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + config)


def _toml_list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def _mutmut(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, __file__, "--as-mutmut", *args],
        cwd=work,
        text=True,
        capture_output=True,
        check=False,
    )


def _statuses(work: Path) -> dict[str, str]:
    """Each mutant's verdict in the last run, by name."""
    listing = _mutmut(work, "results", "--all", "true").stdout
    status: dict[str, str] = {}
    for line in listing.splitlines():
        match = re.match(r"\s*(\S+__mutmut_\d+): (.+)$", line)
        if match:
            status[match.group(1)] = match.group(2).strip()
    return status


def _tests_of(work: Path, name: str) -> list[str]:
    """The tests mutmut recorded as calling a mutant's function."""
    stats = json.loads((work / "mutants" / "mutmut-stats.json").read_text())
    function = name.partition("__mutmut_")[0]
    return sorted(stats["tests_by_mangled_function_name"].get(function, []))


def _recheck(work: Path, survivors: list[str], extra: tuple[str, ...] = ()) -> dict[str, bool]:
    """Each survivor against the tests that call its function, in a fresh process.

    mutmut forks each mutant's tests from a process that already imported the
    package and ran them once, so what a module builds when it is imported or first
    used (a machine's piped steps, say) is the unmutated code's: such a mutant
    survives tests that would kill it. A fresh process builds everything with the
    mutant in place. ``extra``: test files written since the run, run too. A failing
    test kills, and so does a package that no longer imports (pytest's exit codes 1, 2
    and 3); a test id that is gone since (4) does not.
    """
    recheck = work / "recheck.json"
    killed: dict[str, bool] = json.loads(recheck.read_text()) if recheck.exists() else {}
    env = {**os.environ, "PYTHONPATH": "src"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly"]
    if extra:  # the added tests must pass on the code as it is, or they kill every mutant
        baseline = subprocess.run(
            [*command, "-p", "no:cacheprovider", *extra],
            cwd=work / "mutants",
            env={**env, "MUTANT_UNDER_TEST": "agentfsm.none__mutmut_0"},  # no mutant's name
            capture_output=True,
            check=False,
        )
        if baseline.returncode != 0:
            raise SystemExit(f"the added tests fail unmutated:\n{baseline.stdout[-2000:]!r}")
    for name in survivors:
        tests = [*extra, *_tests_of(work, name)]  # the new tests first: -x stops at a kill
        if not tests:
            continue
        finished = subprocess.run(
            [*command, "-p", "no:cacheprovider", *tests],
            cwd=work / "mutants",
            env={**env, "MUTANT_UNDER_TEST": name},
            capture_output=True,
            check=False,
        )
        killed[name] = finished.returncode in _KILLED
        print(f"  {name}: {'killed' if killed[name] else 'survived'}", flush=True)
        recheck.write_text(json.dumps(killed, indent=1))
    return killed


def _survivors(work: Path, only: list[str], verdicts: tuple[str, ...] = ()) -> list[str]:
    """The survivors of the last run (or those of ``verdicts``), those matching
    ``--only``'s globs if given."""
    verdicts = verdicts or ("survived",)
    names = sorted(n for n, v in _statuses(work).items() if v in verdicts)
    if not only:
        return names
    return [n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in only)]


def _report(work: Path) -> int:
    """Kill rate per module and overall (a survivor killed on recheck counts as killed);
    the survivors, one a line, their diffs in mutants.txt."""
    status = _statuses(work)
    if not status:
        print("no results yet: run without --report first")
        return 1
    recheck = work / "recheck.json"
    if recheck.exists():
        for name, killed in json.loads(recheck.read_text()).items():
            if killed and status.get(name) in ("survived", "no tests"):
                status[name] = "killed on recheck"
    per_module: dict[str, list[str]] = {}
    for name, verdict in status.items():
        per_module.setdefault(name.split(".x")[0], []).append(verdict)
    dead_verdicts = ("killed", "timeout", "caught by type check", "killed on recheck")
    columns = ("mutants", "checked", "killed", "no tests", "survived", "rate", "unchecked")
    print(f"{'module':<20}" + "".join(f"{c:>10}" for c in columns))
    rows = [(m, v) for m, v in sorted(per_module.items())]
    rows.append(("all", [v for _, verdicts in rows for v in verdicts]))
    for module, verdicts in rows:
        done = [v for v in verdicts if v not in ("not checked", "skipped")]
        dead = sum(v in dead_verdicts for v in done)
        rate = f"{dead / len(done):.1%}" if done else "-"
        counts = (len(verdicts), len(done), dead, done.count("no tests"), done.count("survived"))
        print(
            f"{module:<20}"
            + "".join(f"{n:>10}" for n in counts)
            + f"{rate:>10}{len(verdicts) - len(done):>10}"
        )
    times = work / _TIMES
    if times.exists():
        seconds = [float(line.split("\t")[1]) for line in times.read_text().splitlines()]
        if seconds:
            print(
                f"{len(seconds)} mutants timed in their workers: "
                f"{sum(seconds) / len(seconds):.2f} s a mutant on average, "
                f"median {sorted(seconds)[len(seconds) // 2]:.2f} s"
            )
    verdicts = list(status.values())
    others = sorted(set(verdicts) - {"killed", "survived"})
    if others:
        print("verdicts besides killed:", ", ".join(f"{v}: {verdicts.count(v)}" for v in others))
    survivors = sorted(n for n, v in status.items() if v == "survived")
    print(f"{len(survivors)} survivors (diffs in {work / 'mutants.txt'}):")
    with (work / "mutants.txt").open("w") as out:
        for name in survivors:
            diff = _mutmut(work, "show", name).stdout
            out.write(diff + "\n")
            print(f"  {name}: {_changed(diff)}")
    return 0


def _changed(diff: str) -> str:
    """The lines a mutant changed, on one line: ``- old | + new``."""
    lines = [
        " ".join(line.split())
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return " | ".join(lines)[:240]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-mutmut"]:
        return _as_mutmut(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "mutation")
    parser.add_argument("--workers", type=int, default=1, help="mutants tested at once")
    parser.add_argument("--only", nargs="*", default=[], help="mutant names or globs")
    parser.add_argument("--report", action="store_true", help="only report the last run")
    parser.add_argument(
        "--no-recheck", action="store_true", help="skip running each survivor in a fresh process"
    )
    parser.add_argument(
        "--recheck-only", action="store_true", help="recheck the last run's survivors, report"
    )
    parser.add_argument(
        "--with-tests",
        nargs="*",
        default=[],
        help="with --recheck-only: test files written since the run, run against every "
        "survivor and every mutant no test reached",
    )
    parser.add_argument(
        "--selection", action="store_true", help="print the test files that reach each module"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="forget earlier verdicts and mutmut's test records"
    )
    args = parser.parse_args(argv)
    work: Path = args.work
    chosen = selection()
    tests = sorted({test for files in chosen.values() for test in files})
    if args.selection:
        for module, files in chosen.items():
            print(f"{module}: {len(files)} test files")
            print("".join(f"  {test}\n" for test in files), end="")
        print(f"{len(tests)} test files in all")
        return 0
    if args.recheck_only:
        if args.with_tests:  # the tests as they are now, in both copies
            for folder in (work / "tests", work / "mutants" / "tests"):
                shutil.copytree(ROOT / "tests", folder, dirs_exist_ok=True, ignore=_CACHES)
        names = _survivors(work, args.only, ("survived", "no tests") if args.with_tests else ())
        _recheck(work, names, tuple(args.with_tests))
    elif not args.report:
        work.mkdir(parents=True, exist_ok=True)
        if args.fresh:
            shutil.rmtree(work / "mutants", ignore_errors=True)
            (work / "recheck.json").unlink(missing_ok=True)
        _lay_out(work, tests)
        command = [sys.executable, __file__, "--as-mutmut", "run", "--max-children"]
        command.append(str(args.workers))
        finished = subprocess.run([*command, *args.only], cwd=work, check=False)
        if finished.returncode not in (0, 1):
            return finished.returncode
        if not args.no_recheck:
            survivors = _survivors(work, args.only)
            print(f"rechecking {len(survivors)} survivors in fresh processes")
            _recheck(work, survivors)
    return _report(work)


if __name__ == "__main__":
    raise SystemExit(main())
