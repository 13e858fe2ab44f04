"""``agentfsm check MODULE:ATTR``: prove a machine's properties, or print a counterexample."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import Any

from .._agent_spec import UsageError
from .._checks import check_machine
from .._effects import effects_of, lent_effects, state_effects
from .._machine import MachineTable
from .._spec import import_attribute

__all__ = ["add_parser", "handle", "load_tables"]

#: A machine to check and the tools its runs offer (an agent's; none for a bare table).
Target = tuple[MachineTable, tuple[Any, ...]]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``check`` command; the namespace carries ``handler=handle``."""
    check: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="prove a machine's properties over all its paths",
        description="Check a machine table or an agent (or a list of them) over every path: "
        "tools run only after the approval check when the machine has one, every cycle passes "
        "a step that bounds it, and no state calls the model after running tools in the same "
        "work (an agent's tools count: a subagent calls a model). A failed check prints a "
        "counterexample path; exit code 1.",
    )
    check.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="a MachineTable or an Agent, or a list of them, in a module",
    )
    check.add_argument(
        "--draw",
        action="store_true",
        help="draw each counterexample on its machine (Mermaid), its edges numbered",
    )
    check.add_argument(
        "--json",
        action="store_true",
        help="each machine's verdict as JSON: what holds, or each problem and its path",
    )
    check.set_defaults(handler=handle)
    return check


def load_tables(spec: str, command: str = "check") -> list[MachineTable]:
    """The machines named by ``module:attribute``: a table, an agent or an iterable of them
    (``command`` names the command in an error)."""
    return [table for table, _ in load_targets(spec, command)]


def _target(value: Any) -> Target | None:
    if isinstance(value, MachineTable):
        return value, ()
    table = getattr(getattr(value, "mode", None), "table", None)
    if isinstance(table, MachineTable):  # an agent: its machine and its tools
        return table, tuple(getattr(value, "tools", ()) or ())
    return None


def load_targets(spec: str, command: str = "check") -> list[Target]:
    """Each machine named by ``module:attribute`` with the tools its runs offer."""
    value = import_attribute(spec, command, UsageError)
    one = _target(value)
    if one is not None:
        return [one]
    found = [_target(v) for v in value] if isinstance(value, Iterable) else [None]
    if not found or any(t is None for t in found):
        raise UsageError(f"{spec} is a {type(value).__name__}, not a MachineTable or an Agent")
    return [t for t in found if t is not None]


def _holds(table: MachineTable) -> str:
    gates = [s for s, kinds in state_effects(table).items() if "approval" in kinds]
    if gates:
        return f"approval (gate: {', '.join(gates)}), bounded, checkpointed"
    return "bounded, checkpointed; approval holds vacuously: the machine has no approval state"


def handle(args: argparse.Namespace) -> int:
    """Check each table; print what holds, or each problem and its counterexample."""
    failed = False
    report: list[dict[str, Any]] = []
    for table, tools in load_targets(args.target):
        problems = check_machine(table, tools=tools)
        undeclared = sorted(
            {
                getattr(step, "__name__", repr(step))
                for steps in table.steps.values()
                for step in steps
                if effects_of(step) is None
            }
        )
        lent = lent_effects(tools)
        runners = [s for s, kinds in state_effects(table).items() if "tools" in kinds]
        failed = failed or bool(problems)
        if getattr(args, "json", False):
            report.append(
                {
                    "machine": table.name,
                    "ok": not problems,
                    "holds": None if problems else _holds(table),
                    "problems": [
                        {"problem": str(p), **({"mermaid": p.mermaid(table)} if args.draw else {})}
                        for p in problems
                    ],
                    "tool_effects": {name: sorted(k) for name, k in lent.items()},
                    "tools_run_in": runners,
                    "undeclared_steps": undeclared,
                }
            )
            continue
        if problems:
            print(f"{table.name}: {len(problems)} problem(s)")
            for problem in problems:
                print("  " + str(problem).replace("\n", "\n  "))
                if args.draw:
                    print(problem.mermaid(table))
        else:
            print(f"{table.name}: ok ({_holds(table)}) over every path")
        if lent:
            said = "; ".join(f"{name}: {', '.join(sorted(k))}" for name, k in lent.items())
            print(f"  tools with effects, run in {', '.join(runners) or 'no state'}: {said}")
        if undeclared:
            print(f"  steps with no declared effects (taken as pure): {', '.join(undeclared)}")
    if getattr(args, "json", False):
        print(json.dumps(report, indent=2, ensure_ascii=False))
    return 1 if failed else 0
