"""Mutation testing of the core: which small changes to the engine no test notices.

Not part of CI: a run takes about 20 minutes on two shared cores, one worker. The last
run's numbers, and why each survivor is equivalent, are in ``benchmarks/mutation.md``.
Run by hand::

    pip install -e '.[test,mutation]' --config-settings editable_mode=strict
    nice -n 10 python benchmarks/mutation.py            # run.py, steps.py, machine.py
    python benchmarks/mutation.py --report              # the numbers and the survivors again
    python benchmarks/mutation.py --recheck-only        # survivors again, in fresh processes
    python benchmarks/mutation.py --only 'agentfsm.run*'  # some mutants only (mutmut's globs)

mutmut (3.x) mutates files by their path and names a mutant by the module its
path spells, and it imports the code from its ``mutants/`` copy. This project's
folders are not its import names (``statemachine/`` installs as ``agentfsm``,
``providers/`` as ``agentfsm.providers``), so the script first lays the package
out under its import name in a work folder (``src/agentfsm/``, providers inside
it, the tests and the docs beside it) and runs mutmut there. The editable
install of the project stays as it is: mutmut puts its mutated copy first on
``sys.path``. Each mutant runs the tests of :data:`TESTS` that reach the mutated
function (mutmut records which do), one worker at a time (``--workers``); each
survivor then runs every test of :data:`TESTS` once more in a fresh process, where
what the package builds on import is built with the mutant in place.

A survivor is a change of the code that no test fails on: either a missing test,
or an equivalent mutant (the code behaves the same, e.g. a default argument that
every caller passes). ``--report`` lists them, one line each, with the diff of each
in ``mutants.txt`` of the work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The modules mutated, as paths of the work folder's copy.
MODULES = ("src/agentfsm/run.py", "src/agentfsm/steps.py", "src/agentfsm/machine.py")

#: The tests each mutant may run: those of the engine, its tables, options and faults.
TESTS = (
    "tests/test_steps.py",
    "tests/test_machine.py",
    "tests/test_standard.py",
    "tests/test_user_machines.py",
    "tests/test_options.py",
    "tests/test_shared_machine.py",
    "tests/test_modes.py",
    "tests/test_reliability.py",
    "tests/test_faults.py",
    "tests/test_budgets.py",
    "tests/test_callbacks.py",
    "tests/test_definitions.py",
    "tests/test_engine_guards.py",
    "tests/test_messages_and_chain.py",
    "tests/test_tools.py",
    "tests/test_sync.py",
    "tests/test_hitl.py",
)

_CONFIG = """\
[tool.mutmut]
source_paths = ["src/agentfsm"]
only_mutate = {modules}
also_copy = ["docs", "diagrams", "examples"]
pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-x", "-q"]
pytest_add_cli_args_test_selection = {tests}
timeout_multiplier = 5.0
use_git_change_detection = false

[tool.pytest.ini_options]
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
timeout = 120
"""


def _lay_out(work: Path) -> None:
    """The package under its import name, with the tests and the pages they read."""
    src = work / "src" / "agentfsm"
    if src.exists():
        shutil.rmtree(src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "statemachine", src, ignore=ignore)
    shutil.copytree(ROOT / "providers", src / "providers", ignore=ignore)
    for folder in ("tests", "docs", "diagrams", "examples"):
        if (work / folder).exists():
            shutil.rmtree(work / folder)
        if (ROOT / folder).exists():
            shutil.copytree(ROOT / folder, work / folder, ignore=ignore)
    tests = [t for t in TESTS if (ROOT / t).exists()]
    (work / "pyproject.toml").write_text(
        _CONFIG.format(modules=_toml_list(MODULES), tests=_toml_list(tests))
    )


def _toml_list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def _mutmut(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mutmut", *args],
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


def _recheck(work: Path, survivors: list[str]) -> dict[str, bool]:
    """Each survivor against every test of :data:`TESTS`, in a fresh process.

    mutmut forks each mutant's tests from a process that already imported the
    package and ran them once, so what a module builds when it is imported or first
    used (a machine's piped steps, say) is the unmutated code's: such a mutant
    survives tests that would kill it. A fresh process builds everything with the
    mutant in place, and runs all the selected tests, not only those that hit it.
    """
    tests = [t for t in TESTS if (work / "mutants" / t).exists()]
    env = {**os.environ, "PYTHONPATH": "src"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly"]
    killed: dict[str, bool] = {}
    for name in survivors:
        finished = subprocess.run(
            [*command, "-p", "no:cacheprovider", *tests],
            cwd=work / "mutants",
            env={**env, "MUTANT_UNDER_TEST": name},
            capture_output=True,
            check=False,
        )
        killed[name] = finished.returncode != 0
        print(f"  {name}: {'killed' if killed[name] else 'survived'}", flush=True)
    (work / "recheck.json").write_text(json.dumps(killed, indent=1))
    return killed


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
            if killed and status.get(name) == "survived":
                status[name] = "killed on recheck"
    per_module: dict[str, list[str]] = {}
    for name, verdict in status.items():
        per_module.setdefault(name.split(".x")[0], []).append(verdict)
    dead_verdicts = ("killed", "timeout", "caught by type check", "killed on recheck")
    print(f"{'module':<24} {'mutants':>8} {'killed':>8} {'rate':>7}")
    total = killed = 0
    for module, verdicts in sorted(per_module.items()):
        done = [v for v in verdicts if v not in ("not checked", "skipped")]
        dead = sum(v in dead_verdicts for v in done)
        total += len(done)
        killed += dead
        rate = dead / len(done) if done else 0.0
        print(f"{module:<24} {len(done):>8} {dead:>8} {rate:>7.1%}")
    print(f"{'all':<24} {total:>8} {killed:>8} {killed / max(total, 1):>7.1%}")
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
    args = parser.parse_args(argv)
    work: Path = args.work
    if args.recheck_only:
        survivors = sorted(n for n, v in _statuses(work).items() if v == "survived")
        _recheck(work, survivors)
    elif not args.report:
        work.mkdir(parents=True, exist_ok=True)
        if (work / "mutants").exists():
            shutil.rmtree(work / "mutants")
        _lay_out(work)
        command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.workers)]
        finished = subprocess.run([*command, *args.only], cwd=work, check=False)
        if finished.returncode not in (0, 1):
            return finished.returncode
        (work / "recheck.json").unlink(missing_ok=True)
        if not args.no_recheck:
            survivors = sorted(n for n, v in _statuses(work).items() if v == "survived")
            print(f"rechecking {len(survivors)} survivors in fresh processes")
            _recheck(work, survivors)
    return _report(work)


if __name__ == "__main__":
    raise SystemExit(main())
