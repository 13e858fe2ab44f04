"""``agentfsm machines diff`` and ``agentfsm runs migrate|replay``: machine versions, from
the command line.

A machine is named ``MODULE:ATTR``: a :class:`~agentfsm.machine.MachineTable`,
an :class:`~agentfsm.agent.Agent` (its machine), or a function returning either,
importable from the current folder. ``diff`` and ``replay`` exit 0 when the two
agree and 1 when they differ, as ``diff`` does; a mistake on the command line
exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from .._errors import AgentfsmError, FormatError, RunNotFoundError, UnknownToolError
from .._machine import MachineTable, UnknownMachineError
from .._printable import printable
from .._spec import import_attribute
from .._trace import Trace
from .._versions import (
    MachineChangedError,
    OtherMachineError,
    Policy,
    ResumeDecision,
    check_resume,
    compatible,
    diff,
    mapped,
    migrates,
    pinned,
    replay,
)
from ..store import SavedRun, SQLiteStore, load_run, migrate_run

__all__ = ["add_machines_parser", "add_runs_commands", "load_table", "on"]


class _Usage(AgentfsmError):
    """A mistake on the command line: said on stderr by the handler, exit status 2."""


def _usage(message: str) -> AgentfsmError:
    return _Usage(message)


def _reported(command: str, handler: Callable[[argparse.Namespace], int]) -> Any:
    """``handler``, with its command-line mistakes said on one line and exit status 2."""

    def handle(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except _Usage as exc:
            _say(sys.stderr, f"agentfsm {command}: error: {exc}")
            return 2

    return handle


def _say(out: TextIO, text: str) -> None:
    print(printable(text), file=out)


def load_table(spec: str, what: str = "MACHINE") -> MachineTable:
    """The machine named by ``module:attribute`` (a table, an agent, or a function of none)."""
    value = import_attribute(spec, what, _usage)
    if not isinstance(value, MachineTable) and callable(value) and not hasattr(value, "mode"):
        try:
            value = value()
        except Exception as exc:
            raise _usage(
                f"{what} {spec}: calling {spec.partition(':')[2]}() failed: {exc}"
            ) from exc
    mode = getattr(value, "mode", None)
    table = getattr(mode, "table", value)
    if not isinstance(table, MachineTable):
        raise _usage(f"{what} {spec} is a {type(value).__name__}, not a machine or an agent")
    return table


def _identity(table: MachineTable) -> str:
    return f"{table.name} v{table.version} ({table.fingerprint})"


def _identity_json(table: MachineTable) -> dict[str, Any]:
    return {"name": table.name, "version": table.version, "fingerprint": table.fingerprint}


def on(trace: Trace) -> str:
    """``, on standard v2 (fingerprint)`` for a segment that recorded its machine."""
    if trace.machine_fingerprint is None:
        return ""
    return f", on {trace.machine} v{trace.machine_version} ({trace.machine_fingerprint})"


# ---------------------------------------------------------------- machines diff


def add_machines_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``machines`` command (``machines diff OLD NEW``) to ``subparsers``."""
    machines: argparse.ArgumentParser = subparsers.add_parser(
        "machines",
        help="compare versions of a machine",
        description="Machines as data: compare two of them.",
    )
    commands = machines.add_subparsers(dest="machines_command", metavar="{diff}")
    commands.required = True
    diff_ = commands.add_parser(
        "diff",
        help="states and edges added, removed and changed, and a coloured Mermaid diagram",
        description="Compare two machines (MODULE:ATTR each: a MachineTable, an Agent, "
        "or a function returning one): each one's version and fingerprint, the states and "
        "edges added (+), removed (-) and changed (~), and a Mermaid flowchart of both with "
        "the changes coloured. Exit 0 when nothing a run depends on changed, 1 when it did.",
    )
    diff_.add_argument("old", metavar="OLD", help="MODULE:ATTR of the old machine")
    diff_.add_argument("new", metavar="NEW", help="MODULE:ATTR of the new machine")
    diff_.add_argument(
        "--no-diagram", action="store_true", help="the changes only, without the Mermaid diagram"
    )
    diff_.add_argument(
        "--json",
        action="store_true",
        help="both machines' identities and the changes as JSON (with the diagram's text)",
    )
    diff_.set_defaults(handler=_reported("machines diff", _machines_diff))
    return machines


def _machines_diff(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    old, new = load_table(args.old, "OLD"), load_table(args.new, "NEW")
    changes = diff(old, new)
    if getattr(args, "json", False):
        doc = {
            "old": _identity_json(old),
            "new": _identity_json(new),
            "same": changes.same,
            "changes": changes.lines(),
            "mermaid": None if changes.same or args.no_diagram else changes.mermaid(),
        }
        _say(out, json.dumps(doc, indent=2, ensure_ascii=False))
        return 0 if changes.same else 1
    _say(out, f"old: {_identity(old)}")
    _say(out, f"new: {_identity(new)}")
    if changes.same:
        _say(out, "no change a run depends on (the fingerprints are equal)")
        return 0
    for line in changes.lines():
        _say(out, line)
    if not args.no_diagram:
        _say(out, "")
        _say(out, "```mermaid")
        _say(out, changes.mermaid().rstrip("\n"))
        _say(out, "```")
    return 1


# ---------------------------------------------------------------- runs migrate, runs replay


def add_runs_commands(commands: Any) -> None:
    """Add ``migrate`` and ``replay`` to the ``runs`` command's subcommands."""
    migrate = commands.add_parser(
        "migrate",
        help="move saved runs onto another machine (--dry-run: say which can go on)",
        description="For every saved run of the store, say whether it can go on on the "
        "machine --to (MODULE:ATTR): 'ok' (unchanged, or allowed by --policy), "
        "'needs mapping' (its machine changed and the policy does not take it) or 'refused' "
        "(it cannot be read, or the mapping does not fit it), with why. Without --dry-run, "
        "each run that is ok and had not ended is moved: a new segment on the new machine "
        "records the migration, so resuming it later needs no policy; the others are left "
        "as they are (an ended run moves when it is resumed under the policy).",
    )
    _add_db(migrate)
    migrate.add_argument(
        "--to",
        required=True,
        metavar="MODULE:ATTR",
        help="the machine table to move the runs onto, e.g. myapp.machines:STANDARD_V2",
    )
    migrate.add_argument("--dry-run", action="store_true", help="report only, change nothing")
    migrate.add_argument(
        "--policy",
        choices=["none", "pinned", "compatible", "mapped"],
        default="compatible",
        help="how a run of a changed machine may go on (default: compatible)",
    )
    migrate.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="with --policy mapped: an old resting state and the new state it goes on at",
    )
    migrate.add_argument(
        "--from",
        dest="from_",
        metavar="MODULE:ATTR",
        help="with --policy mapped: the old machine the mapping is from",
    )
    migrate.add_argument(
        "--json", action="store_true", help="the report as JSON: each run's verdict and why"
    )
    migrate.set_defaults(handler=_reported("runs migrate", _runs_migrate))
    replay_ = commands.add_parser(
        "replay",
        help="drive a saved run's recorded replies and results through another machine",
        description="Replay a saved run on the machine --machine (MODULE:ATTR): its "
        "recorded model replies and tool results are handed out again, no model and no tool "
        "is called. Says the first state where the two part, or that they agree (exit 1 or 0).",
    )
    _add_db(replay_)
    replay_.add_argument("run_id", metavar="RUN_ID", help="the run to replay")
    replay_.add_argument(
        "--machine",
        required=True,
        metavar="MODULE:ATTR",
        help="the machine table to replay it through (its own, or another version)",
    )
    replay_.add_argument(
        "--json", action="store_true", help="the states recorded and replayed, as JSON"
    )
    replay_.set_defaults(handler=_reported("runs replay", _runs_replay))


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="PATH", help="the SQLite store (default: $AGENTFSM_DB or agentfsm.db)"
    )


def _store(args: argparse.Namespace, *, writes: bool = False) -> SQLiteStore:
    """The store of ``--db``, read-only unless the command ``writes`` (a migration)."""
    path = str(args.db or os.environ.get("AGENTFSM_DB") or "agentfsm.db")
    if not os.path.isfile(path):
        raise _usage(f"no store at {path!r} (pass --db PATH or set AGENTFSM_DB)")
    try:
        return SQLiteStore(path, read_only=not writes)
    except AgentfsmError as exc:
        raise _usage(str(exc)) from exc


def _policy(args: argparse.Namespace, table: MachineTable) -> Policy | None:
    if args.policy == "none":
        return None
    if args.policy == "pinned":
        return pinned
    if args.policy == "compatible":
        return compatible
    if not args.from_:
        raise _usage("--policy mapped needs --from MODULE:ATTR (the old machine)")
    pairs = dict(_pair(text) for text in args.map)
    try:
        return mapped(pairs, old=load_table(args.from_, "--from"), new=table)
    except MachineChangedError as exc:
        raise _usage(str(exc)) from exc


def _pair(text: str) -> tuple[str, str]:
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise _usage(f"--map takes OLD=NEW, got {text!r}")
    return old, new


def _runs_migrate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    table = load_table(args.to, "--to")
    policy = _policy(args, table)
    store = _store(args, writes=not args.dry_run)
    runs = store.runs()
    rows: list[dict[str, Any]] = []
    for info in runs:
        row: dict[str, Any] = {"run_id": info.run_id}
        try:
            saved = load_run(store, info.run_id, strict=False)
            decision = check_resume(saved, table, policy)
        except OtherMachineError as exc:
            rows.append({**row, "verdict": "refused", "why": f"{exc} (--to {args.to})"})
            continue
        except MachineChangedError as exc:
            rows.append({**row, "verdict": "needs mapping", "why": str(exc)})
            continue
        except (FormatError, UnknownToolError, UnknownMachineError, KeyError) as exc:
            rows.append({**row, "verdict": "refused", "why": str(exc)})
            continue
        row.update(verdict="ok", policy=decision.policy, state=decision.state, was=saved.state)
        if not args.dry_run:
            row["done"] = _apply(store, saved, decision)
        rows.append(row)
    if getattr(args, "json", False):
        doc = {
            "store": str(store.path),
            "machine": _identity_json(table),
            "policy": args.policy,
            "dry_run": args.dry_run,
            "runs": rows,
        }
        _say(out, json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    _say(out, f"runs of {store.path} on {_identity(table)}, policy {args.policy}:")
    for row in rows:
        if row["verdict"] != "ok":
            _say(out, f"{row['run_id']}: {row['verdict']}: {row['why']}")
            continue
        where = "" if row["state"] == row["was"] else f", from {row['was']}"
        said = f"{row['run_id']}: ok ({row['policy']}, at {row['state']}{where})"
        if "done" in row:
            said += f": {row['done']}"
        _say(out, said)
    if not runs:
        _say(out, "no saved runs")
    return 0


def _apply(store: SQLiteStore, saved: SavedRun, decision: ResumeDecision) -> str:
    """Move one run as ``decision`` says, and say what was done."""
    if decision.policy == "unchanged":
        return "left, already on this machine"
    if decision.policy == "pinned":
        return f"left on v{decision.table.version}, which it finishes on (pinned)"
    if not migrates(saved, decision):
        if saved.result is not None and saved.status in ("paused", "interrupted"):
            return f"left {saved.status}: it moves when resumed under the policy"
        return f"left: it ended {saved.status}"
    try:
        migrate_run(store, saved, decision)
    except AgentfsmError as exc:
        return f"not moved: {exc}"
    return f"migrated to v{decision.table.version}, at {decision.state}"


def _runs_replay(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    table = load_table(args.machine, "--machine")
    try:
        saved = load_run(_store(args), args.run_id, strict=False)
    except (RunNotFoundError, FormatError, MachineChangedError) as exc:
        raise _usage(str(exc)) from exc
    report = replay(saved, table)
    if getattr(args, "json", False):
        doc = {
            "run_id": saved.run_id,
            "machine": _identity_json(table),
            "agrees": report.agrees,
            "parts_at": report.index,
            "said": str(report),
            "recorded": list(report.recorded),
            "replayed": list(report.replayed),
            "replies": report.replies,
            "model_calls": report.model_calls,
            "unrecorded_calls": list(report.unrecorded_calls),
        }
        _say(out, json.dumps(doc, indent=2, ensure_ascii=False))
        return 0 if report.agrees else 1
    _say(out, f"run {saved.run_id} replayed on {_identity(table)}: {report}")
    if report.unrecorded_calls:
        _say(out, f"calls with no recorded result: {', '.join(report.unrecorded_calls)}")
    return 0 if report.agrees else 1
