"""``agentfsm check MODULE:ATTR``: prove a machine's properties, or print a counterexample."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from ._runs_cli import UsageError
from ._spec import import_attribute
from .machine import MachineTable
from .testing._checks import check_machine, effects_of

__all__ = ["add_parser", "handle", "load_tables"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``check`` command; the namespace carries ``handler=handle``."""
    check: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="prove a machine's properties over all its paths",
        description="Check a machine table (or a list of them) over every path: tools run "
        "only after the approval check when the machine has one, and every cycle passes a "
        "step that bounds it, and no state calls the model after running tools in the same work. A "
        "failed check prints a counterexample path; exit code 1.",
    )
    check.add_argument(
        "target", metavar="MODULE:ATTR", help="a MachineTable, or a list of them, in a module"
    )
    check.add_argument(
        "--draw",
        action="store_true",
        help="draw each counterexample on its machine (Mermaid), its edges numbered",
    )
    check.set_defaults(handler=handle)
    return check


def load_tables(spec: str) -> list[MachineTable]:
    """The machines named by ``module:attribute``: a table or an iterable of tables."""
    value = import_attribute(spec, "check", UsageError)
    tables = [value] if isinstance(value, MachineTable) else value
    if not isinstance(tables, Iterable) or not all(isinstance(t, MachineTable) for t in tables):
        raise UsageError(f"{spec} is a {type(value).__name__}, not a MachineTable")
    return list(tables)


def handle(args: argparse.Namespace) -> int:
    """Check each table; print what holds, or each problem and its counterexample."""
    failed = False
    for table in load_tables(args.target):
        problems = check_machine(table)
        undeclared = sorted(
            {
                getattr(step, "__name__", repr(step))
                for steps in table.steps.values()
                for step in steps
                if effects_of(step) is None
            }
        )
        if problems:
            failed = True
            print(f"{table.name}: {len(problems)} problem(s)")
            for problem in problems:
                print("  " + str(problem).replace("\n", "\n  "))
                if args.draw:
                    print(problem.mermaid(table))
        else:
            print(f"{table.name}: ok (approval, bounded, checkpointed) over every path")
        if undeclared:
            print(f"  steps with no declared effects (taken as pure): {', '.join(undeclared)}")
    return 1 if failed else 0
