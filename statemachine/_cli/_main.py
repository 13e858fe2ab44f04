"""The ``agentfsm`` command: demo, show, view, studio, diagrams, run, runs, machines,
check, eval and worker.

``agentfsm demo`` runs a scripted agent with a live view, asks for approval
when it interrupts, saves the run to a store and writes its diagram and trace;
``agentfsm show`` draws a saved trace; ``agentfsm view`` writes a saved run or
trace as one self-contained HTML page; ``agentfsm studio`` serves every run of a store
in the browser (:mod:`agentfsm.studio`); ``agentfsm diagrams`` regenerates the
committed diagrams of the machine, or with ``--check`` says which are stale;
``agentfsm run`` runs a small agent on a real provider; ``agentfsm machines diff``
compares two versions of a machine. Bad arguments exit 2
with a one-line message; a run that ends in error exits 1. Text from a run
reaches the terminal only through :mod:`agentfsm._printable`.

One idea: the command's parser and the subcommands too small for a module of their own;
the larger groups (``runs``, ``machines``, ``check``, ``worker``) live in theirs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import hashlib
import importlib.metadata
import json
import os
import pathlib
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, cast

from rich.console import Console, RenderableType
from rich.panel import Panel
from rich.prompt import Confirm
from rich.table import Table
from rich.text import Text

from .. import diagrams
from .._agent import Agent, AgentRun
from .._agent_spec import DEFAULT_AGENT, UsageError
from .._approval import request_digest
from .._errors import AgentfsmError, ChainError, MachineChangedError, RunNotFoundError, StoreError
from .._machine import UnknownMachineError, machine_named
from .._modes.langchain import LANGCHAIN_MACHINES
from .._modes.standard import STANDARD, STANDARD_OUTPUT
from .._printable import printable, shown
from .._results import Failed
from .._resumable import agent_flag, db_flag, default_db, machines_flag, resume_hint
from .._resume import restore_run, start_run
from .._serialization import FormatError, UnknownToolError
from .._state import AgentState
from .._trace import Trace
from ..store import SQLiteStore, load_run
from . import _check as _check_cli
from . import _eval as _eval_cli
from . import _runs as _runs_cli
from . import _versions as _versions_cli
from . import _worker as _worker_cli
from ._machines_option import add_machines_option, import_machines
from ._values import positive

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse, with errors on one line, a did-you-mean for a mistyped option, exit code 2."""

    #: The command line being parsed (set by :func:`main`), for the suggestions.
    argv: Sequence[str] = ()

    def error(self, message: str) -> NoReturn:
        hint = _suggestion(self, message)
        # An option the top parser could not place belongs to the (sub)command the line
        # names: say that command, whose --help lists the options it takes.
        prog = _named(self).prog if message.startswith("unrecognized arguments") else self.prog
        self.exit(2, f"{prog}: error: {message}{hint} (see {prog} --help)\n")


def _named(parser: _Parser) -> argparse.ArgumentParser:
    """The deepest (sub)command of ``parser`` the command line names."""
    current: argparse.ArgumentParser = parser
    for word in parser.argv:
        current = _subparsers(current).get(word, current)
    return current


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _suggestion(parser: _Parser, message: str) -> str:
    """``; did you mean --approve?`` for an option or command close to a known one."""
    unknown = re.match(r"unrecognized arguments: (.*)", message)
    choice = re.match(r"argument \S+: invalid choice: '([^']*)'", message)
    if choice:
        known = list(_subparsers(parser))
        words = [choice.group(1)]
    elif unknown:
        # The options of the command (and sub-command) the line names, else the top's.
        current = _named(parser)
        known = [o for a in current._actions for o in a.option_strings if o.startswith("--")]
        words = [w.split("=", 1)[0] for w in unknown.group(1).split() if w.startswith("-")]
    else:
        return ""
    for word in words:
        close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        if close:
            return f"; did you mean {close[0]}?"
    return ""


# ---------------------------------------------------------------- trace JSON


def dump_runs(traces: Sequence[Trace], **about: Any) -> dict[str, Any]:
    """The JSON of ``agentfsm demo``: each run's trace document (the first run, then resumes).

    Each element of ``runs`` is a :func:`agentfsm.serialization.dump_trace`
    document; ``about`` adds context (the prompt, the decision).
    """
    # the command starts fast: only this subcommand loads it
    from .._serialization import dump_trace

    return {**about, "runs": [dump_trace(t) for t in traces]}


def load_runs(data: Any) -> list[Trace]:
    """Traces from JSON: a demo file (``runs``), a list of trace documents, or one.

    Tools and models are not at hand, so they load as stand-ins: enough to draw.
    """
    # the command starts fast: only this subcommand loads it
    from .._serialization import load_trace

    if isinstance(data, Mapping) and "runs" in data:
        data = data["runs"]
    docs = data if isinstance(data, list) else [data]
    if not docs:
        raise ValueError("the file holds no runs")
    if not all(isinstance(d, Mapping) for d in docs):
        raise ValueError("expected trace documents (JSON objects)")
    return [load_trace(d, strict=False) for d in docs]


# ---------------------------------------------------------------- demo


def _arguments(arguments: object) -> RenderableType:
    """Every argument in full, wrapped, strings as written: one approves what one reads."""
    if not isinstance(arguments, Mapping) or not arguments:
        return shown(json.dumps(arguments, default=str))
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
        grid.add_row(shown(key), shown(text))
    return grid


def _decide(
    request: Mapping[str, Any], decision: str | None, console: Console
) -> Mapping[str, Any]:
    """One approval decision: from the flag, or asked at the terminal.

    Asked outside any event loop, so the first Ctrl-C stops the command.
    """
    name = str(request.get("tool_name", "?"))
    console.print(
        Panel(
            _arguments(request.get("arguments", {})),
            title=shown(f"approval needed: {request.get('display_text') or name} ({name})"),
            title_align="left",
            border_style="yellow",
        )
    )
    if decision is None:
        try:
            approved = Confirm.ask(shown(f"Approve {name}?"), console=console)
        except EOFError:
            raise UsageError("no answer on stdin; pass --approve, --reject or --later") from None
        decision = "approve" if approved else "reject"
    console.print(Text.assemble("decision: ", (decision, "bold"), " ", shown(name)))
    # Bound to the request shown: a decision approves only what the reviewer saw.
    return {"type": decision, "digest": request_digest(request)}


def _unique(base: pathlib.Path, suffixes: Sequence[str], taken: set[str]) -> pathlib.Path:
    """``base``, or ``base-2``, ``-3``... so that no file of the set exists yet and the
    name is no run id in ``taken``."""
    candidate, n = base, 1
    while candidate.name in taken or any(
        candidate.with_name(candidate.name + s).exists() for s in suffixes
    ):
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


async def _resumed(
    agent: Agent,
    store: SQLiteStore,
    run_id: str,
    decisions: Sequence[Mapping[str, Any]],
    console: Console,
    title: str,
) -> AgentRun:
    """The rest of the run, checkpointed in a new segment that enters at the approval
    state: the approved calls run there, as transitions of its trace."""
    # the command starts fast: only this subcommand loads it
    from ..diagrams import watch

    run = await restore_run(agent, run_id, store, decisions)
    await watch(run, console, title=title)
    return run


def _demo_runs(
    agent: Agent, store: SQLiteStore, run_id: str, decision: str | None, console: Console
) -> tuple[list[Trace], AgentState]:
    # the command starts fast: only this subcommand loads it
    from .._demo import DEMO_PROMPT

    # the command starts fast: only this subcommand loads it
    from ..diagrams import watch

    console.rule(Text.assemble(("agentfsm demo", "bold"), f": {DEMO_PROMPT}"))
    run: AgentRun = start_run(agent, AgentState.of(DEMO_PROMPT), store, run_id=run_id)
    asyncio.run(watch(run, console, title="run 1"))
    traces = [run.trace]
    state = run.agent_state
    while state.status == "interrupted" and state.interrupt_data and decision != "later":
        requests = state.interrupt_data.get("action_requests") or ()
        decisions = [_decide(r, decision, console) for r in requests]
        title = f"run {len(traces) + 1} (resumed)"
        run = asyncio.run(_resumed(agent, store, run_id, decisions, console, title))
        traces.append(run.trace)
        state = run.agent_state
    return traces, state


def _cmd_demo(args: argparse.Namespace) -> int:
    # the command starts fast: only this subcommand loads it
    from .._demo import DEMO_PROMPT, demo_agent

    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory")
    decision = (
        "approve" if args.approve else "reject" if args.reject else "later" if args.later else None
    )
    if decision is None and not sys.stdin.isatty():
        raise UsageError(
            "the demo asks for approval at the terminal, and stdin is not one; "
            "pass --approve, --reject or --later"
        )
    db = args.db or default_db()
    store = _store(db, create=True)
    out.mkdir(parents=True, exist_ok=True)
    taken = {r.run_id for r in store.runs()}
    base = _unique(out / f"agentfsm-demo-{time.strftime('%Y%m%d-%H%M%S')}", (".md", ".json"), taken)
    console = Console()
    # The answer streams into the live view; it is not printed again.
    with store:
        try:
            traces, state = _demo_runs(demo_agent(folder=out), store, base.name, decision, console)
        except KeyboardInterrupt:
            _say_how_to_go_on(store, base.name, db)
            raise
    markdown = base.with_name(base.name + ".md")
    trace_json = base.with_name(base.name + ".json")
    markdown.write_text(diagrams.run_markdown(traces, title="agentfsm demo"), encoding="utf-8")
    data = dump_runs(traces, prompt=DEMO_PROMPT, decision=decision or "asked")
    trace_json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"diagram: {markdown}")
    print(f"trace: {trace_json}")
    flag = db_flag(db)
    print(f"saved: run {base.name} in {db}; see it with: agentfsm runs show {base.name}{flag}")
    print(f"view: agentfsm view {base.name}{flag} (one HTML page)")
    if state.status == "interrupted":
        print(printable(resume_hint(base.name, state.interrupt_data, db)))
        return 0
    return 0 if state.status == "ok" else 1


def _say_how_to_go_on(
    store: SQLiteStore,
    run_id: str,
    db: str,
    command: Mapping[str, Any] | None = None,
    *,
    stopped: str | None = None,
) -> None:
    """On stderr, one line: the command that goes on with a run stopped by Ctrl-C (its last
    checkpoint is in the store), the store named in full so it works from any folder, and
    the ``--agent`` the run was started with; ``stopped`` (what stopped) goes first."""
    try:
        saved = load_run(store, run_id, strict=False)
    except Exception:  # nothing saved yet (or unreadable): there is nothing to go on with
        if stopped is not None:
            print(printable(f"{stopped}; run {run_id} was not saved"), file=sys.stderr)
        return
    where = os.path.abspath(db)
    state = saved.agent_state
    if saved.status == "interrupted" and state is not None:
        line = f"run {run_id} " + resume_hint(run_id, state.interrupt_data, where, command)
    elif saved.status in ("running", "paused"):
        why = f" (paused: {state.pause_reason})" if state and state.pause_reason else ""
        line = (
            f"run {run_id} is saved at {saved.state}{why}; go on with: agentfsm runs resume "
            f"{shlex.quote(run_id)}{db_flag(where)}{agent_flag(command)}"
        )
    else:
        line = f"run {run_id} ended {saved.status}"
    print(printable(f"{stopped}; {line}" if stopped else line), file=sys.stderr)


def _store(db: str, *, create: bool = False) -> SQLiteStore:
    """The store at ``db`` (read-only unless ``create``), its errors as usage errors."""
    try:
        if create and not os.path.exists(db):
            return SQLiteStore(db)
        return _runs_cli.open_store(db, read_only=not create)
    except (FormatError, StoreError, UsageError) as exc:
        raise UsageError(str(exc)) from None


# ---------------------------------------------------------------- show


def _read_traces(path: pathlib.Path) -> list[Trace]:
    # the command starts fast: only this subcommand loads it
    from .._serialization import parse_json

    try:
        return load_runs(parse_json(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: cannot read a trace: {exc}") from None


def _cmd_show(args: argparse.Namespace) -> int:
    # the command starts fast: only this subcommand loads it
    from ..diagrams import summary, trace_table

    traces = _read_traces(pathlib.Path(args.trace))
    console = Console()
    for i, trace in enumerate(traces, 1):
        title = f"run {i} of {len(traces)}" if len(traces) > 1 else "trace"
        console.print(trace_table(trace, title=f"{title}: entered at {trace.entry}"))
        console.print(summary(trace))
        console.print(shown(f"path: {trace.path}"), soft_wrap=True, highlight=False)
        console.line()
    console.rule("the run on the machine (Mermaid)")
    # soft_wrap: the Mermaid text is printed as is, never broken at the terminal's width.
    mermaid = diagrams.run_mermaid(traces, STANDARD)
    console.print(shown(mermaid.rstrip("\n")), soft_wrap=True, highlight=False)
    return 0


# ---------------------------------------------------------------- studio


def _cmd_studio(args: argparse.Namespace) -> int:
    try:
        # the studio extra: only this subcommand needs it
        from .. import studio
    except ImportError as exc:
        raise UsageError(
            f"the studio needs its extra: pip install 'agentfsm[studio]' ({exc})"
        ) from None
    _import_machines(args.machines)
    db = _runs_cli.given_db(args.db)
    if not _runs_cli._is_durable(db):
        _store(db).close()  # refuse a missing file, or one that is not a store, now
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port")
    if args.token is not None and not args.token.strip():
        raise UsageError(
            "--token is empty: every request would be refused; leave --token out and a "
            "new token is made and printed"
        )
    try:
        studio.serve(db, host=args.host, port=args.port, token=args.token, agent=args.agent)
    except OSError as exc:
        raise UsageError(f"cannot listen: {exc.strerror or exc}") from None
    return 0


# ---------------------------------------------------------------- view


def _import_machines(modules: Sequence[str] | None) -> None:
    try:
        import_machines(modules)
    except UnknownMachineError as exc:
        raise UsageError(str(exc)) from None


def _cmd_view(args: argparse.Namespace) -> int:
    _import_machines(args.machines)
    sources: list[str] = args.run
    out = pathlib.Path(args.out) if args.out else None
    if len(sources) > 1 and out is not None and not _is_dir(out):
        raise UsageError(f"--out {out} names one page; with several runs, pass a folder")
    folder = out if out is not None and _is_dir(out) else None
    written: set[str] = set()
    for source in sources:
        page, name = _view_page(args, source)
        target = folder / name if folder is not None else out or pathlib.Path(name)
        if str(target) in written:
            raise UsageError(f"two of the runs given would both be written to {target}")
        written.add(str(target))
        if _is_dir(target):
            raise UsageError(f"--out {target} is a directory; name the HTML file")
        try:
            target.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
        print(printable(f"wrote {target}"))
    return 0


def _view_page(args: argparse.Namespace, run: str) -> tuple[str, str]:
    """The page of one run or trace file, and the file name it goes to by default.

    A trace file's page is ``NAME.trace.html``, so it never overwrites the page of the
    saved run of the same name."""
    # the command starts fast: only this subcommand loads it
    from .. import _view as view

    # the command starts fast: only this subcommand loads it
    from .._view import wall_clock

    source = pathlib.Path(run)
    if args.db is None and (source.suffix == ".json" or _is_file(source)):
        traces = _read_traces(source)
        table = STANDARD
        if traces:
            try:
                table = machine_named(traces[-1].machine)
            except UnknownMachineError as exc:
                raise UsageError(str(exc)) from None
        page = view.traces_page(traces, title=source.name, table=table)
        return page, source.with_suffix(".trace.html").name
    db = _runs_cli.given_db(args.db)
    if _runs_cli._is_durable(db):
        return _durable_page(db, run), f"{_file_name(run)}.html"
    db = _runs_cli._sqlite_path(db)
    store = _store(db)
    with store:
        try:
            saved = load_run(store, run, strict=False)
            clock = wall_clock(store, run, saved.steps)
        except (
            RunNotFoundError,
            FormatError,
            StoreError,
            UnknownToolError,
            MachineChangedError,
        ) as exc:
            raise UsageError(str(exc)) from None
        except UnknownMachineError as exc:
            raise UsageError(f"{exc} (--machines MODULE imports it)") from None
    try:
        page = view.saved_run_page(saved, clock=clock)
    except (RecursionError, UnknownMachineError) as exc:
        if isinstance(exc, UnknownMachineError):
            raise UsageError(str(exc)) from None
        raise UsageError(f"run {run} is nested too deeply to show") from None
    return page, f"{_file_name(run)}.html"


def _durable_page(db: str, run_id: str) -> str:
    """The page of a run of a durable engine's (DBOS) database, read as ``runs show``
    reads it; any failure, the database's own included, as one line."""
    try:
        failures = _runs_cli.durable_failures(db)
        # the command starts fast: only this subcommand loads it
        from ._durable import view_page
    except ImportError as exc:
        raise UsageError(f"{db} is a durable database: {exc}") from None
    try:
        return view_page(db, run_id)
    except UnknownMachineError as exc:
        raise UsageError(f"{exc} (--machines MODULE imports it)") from None
    except (AgentfsmError, ValueError, RecursionError) as exc:
        raise UsageError(" ".join(str(exc).split()) or type(exc).__name__) from None
    except failures as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines() or [repr(exc)]
        raise UsageError(f"{db}: the database cannot be used: {reason[0]}") from None


def _file_name(run_id: str) -> str:
    """A run id as part of a file name: letters, digits, ``-``, ``_`` and ``.`` only, and
    short enough for any file system (a long id keeps its start and a digest of the rest)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id).strip(".") or "run"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{name[: _NAME_MAX - 13]}-{digest}"


#: The longest file name a run id gives (most file systems allow 255 bytes).
_NAME_MAX = 100


def _is_file(path: pathlib.Path) -> bool:
    """Whether ``path`` is a file; a name no file system takes (too long, say) is none."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _is_dir(path: pathlib.Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------- diagrams


def all_diagram_files(*, svg: bool = True) -> dict[str, str]:
    """Every file of the ``diagrams/`` folder, by path in it: the standard machine's files,
    then the typed-output one's and each LangChain machine's under ``NAME/``."""
    files = diagrams.diagram_files(STANDARD, svg=svg)
    for table in (STANDARD_OUTPUT, *LANGCHAIN_MACHINES):
        for name, text in diagrams.diagram_files(table, svg=svg).items():
            files[f"{table.name}/{name}"] = text
    return files


def _cmd_diagrams(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory")
    if args.machine:  # a user's machine(s): each in a folder of its name when there are several
        tables = _check_cli.load_tables(args.machine, "diagrams --machine")
        files: dict[str, str] = {}
        for table in tables:
            drawn = diagrams.diagram_files(table)
            prefix = f"{table.name}/" if len(tables) > 1 else ""
            files.update({prefix + name: text for name, text in drawn.items()})
    else:
        files = all_diagram_files()
    no_svg = not any(name.endswith("machine.svg") for name in files)
    if args.check:
        stale = diagrams.stale_files(out, files)
        if no_svg:
            print("machine.svg not checked: Graphviz (dot) is not installed")
        if stale:
            print(
                f"stale diagrams in {out}: {', '.join(stale)}; they differ from what the machine "
                f"table draws. Regenerate them with: agentfsm diagrams --out {out}"
                + (f" --machine {args.machine}" if args.machine else ""),
                file=sys.stderr,
            )
            return 1
        print(f"diagrams in {out} are up to date ({len(files)} files checked)")
        return 0
    try:
        written = diagrams.write_files(out, files)
    except OSError as exc:
        raise UsageError(
            f"cannot write the diagrams to --out {out}: {exc.strerror or exc}"
        ) from exc
    for name in files:
        print(f"{'wrote' if out / name in written else 'unchanged'} {out / name}")
    if no_svg:
        print("machine.svg not written: Graphviz (dot) is not installed")
    return 0


# ---------------------------------------------------------------- run


def _run_agent(args: argparse.Namespace) -> tuple[Agent, dict[str, Any], str]:
    """The agent ``agentfsm run`` runs, what the store records of how it was made (so
    ``runs resume`` makes it again) and the live view's title."""
    if args.agent is not None:
        if args.provider is not None or args.model is not None or args.base_url is not None:
            raise UsageError(
                "--agent runs your agent on its own model: drop --provider, --model and "
                "--base-url (or drop --agent to run the built-in small agent)"
            )
        agent = _runs_cli.load_agent(args.agent)
        command: dict[str, Any] = {"agent": args.agent}
        if agent.mode.table not in (STANDARD, STANDARD_OUTPUT, *LANGCHAIN_MACHINES):
            # its module declares the machine: `--machines MODULE` finds it again
            command["machines"] = [args.agent.partition(":")[0]]
        return agent, command, args.agent
    # the command starts fast: only this subcommand loads it
    from .._demo import calculator_agent

    # the command starts fast: only this subcommand loads it
    from ..providers import create_model

    if args.provider is None:
        raise UsageError(
            "name the agent to run: --provider NAME (the built-in small agent on a "
            "provider's model) or --agent MODULE:ATTR (your own)"
        )
    name = args.model or ("echo" if args.provider == "scripted" else None)
    if name is None:
        raise UsageError(f"--provider {args.provider} needs --model NAME")
    model = create_model(args.provider, name, base_url=args.base_url, stream=args.stream)
    max_runs = args.max_runs or 10
    command = {
        "provider": args.provider,
        "model": name,
        "base_url": args.base_url,
        "max_runs": max_runs,
    }
    return calculator_agent(model, max_runs=max_runs), command, f"{args.provider}: {name}"


def _cmd_run(args: argparse.Namespace) -> int:
    # the command starts fast: only this subcommand loads it
    from .._tools import SYNC_TOOLS_IN_THREADS

    # the command starts fast: only this subcommand loads it
    from ..diagrams import summary, watch

    # the command starts fast: only this subcommand loads it
    from ..store import checkpoint

    try:
        agent, command, title = _run_agent(args)
    except (ValueError, ChainError) as exc:
        print(printable(f"agentfsm run: error: {_error_text(exc)}"), file=sys.stderr)
        return 1
    console = Console()
    db = args.db or default_db()
    with _store(db, create=True) as store:
        taken = {r.run_id for r in store.runs()}
        base = pathlib.Path(f"agentfsm-run-{time.strftime('%Y%m%d-%H%M%S')}")
        run_id = _unique(base, (), taken).name
        max_runs = args.max_runs if args.agent is not None else None
        run = agent.start(AgentState.of(args.prompt), max_runs=max_runs)
        options = agent.options(max_runs=max_runs)
        checkpoint(run, store, run_id=run_id, options=options.saved(), command=command)
        # Sync tools in threads of their own: Ctrl-C stops the run even inside one.
        threads = SYNC_TOOLS_IN_THREADS.set(True)
        try:
            result = asyncio.run(watch(run, console, title=title, show_summary=False))
        except KeyboardInterrupt:
            _say_how_to_go_on(store, run_id, db, command, stopped="agentfsm run: interrupted")
            return 130
        finally:
            SYNC_TOOLS_IN_THREADS.reset(threads)
    failed = isinstance(result, Failed)
    # A failure is said once, on stderr, not in the summary too.
    console.print(summary(run.trace, None if failed else result, table=run.table))
    flag = db_flag(db) + machines_flag(command)
    saved_line = f"saved: run {run_id} in {db}; see it with: agentfsm view {run_id}{flag}"
    if isinstance(result, Failed):
        print(printable(f"agentfsm run: error: {_error_text(result.error)}"), file=sys.stderr)
        print(printable(saved_line))
        return 1
    state = run.agent_state
    last = state.messages[-1] if state.messages else None
    if last is not None and last.role == "assistant" and last.text and not args.stream:
        console.print(Panel(shown(state.messages[-1].text), title="answer", title_align="left"))
    print(printable(saved_line))
    if state.status == "interrupted":
        print(printable(resume_hint(run_id, state.interrupt_data, db, command)))
        return 0
    if state.status == "paused":
        go_on = f"agentfsm runs resume {shlex.quote(run_id)}{db_flag(db)}{agent_flag(command)}"
        print(printable(f"paused: {state.pause_reason}; go on with: {go_on}"))
        return 0
    return 0 if state.status == "ok" else 1


def _error_text(error: BaseException) -> str:
    if isinstance(error, ChainError):
        return f"{error.type}: {error.message}"
    return str(error)


# ---------------------------------------------------------------- the parser


def _version() -> str:
    try:
        return importlib.metadata.version("agentfsm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _parser() -> _Parser:
    parser = _Parser(
        prog="agentfsm",
        description="An LLM agent's tool-calling loop as an explicit finite-state machine.",
    )
    parser.add_argument("--version", action="version", version=f"agentfsm {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="run a scripted agent with a live view and human approval",
        description="Run the demo agent (scripted model, no network) with a live view. It asks "
        "to write summary.md into --out, which needs approval: it asks at the terminal, unless "
        "--approve, --reject or --later decides. The run is saved to the store (--db), so "
        "'agentfsm runs' and 'agentfsm view' work on it; its diagram (Markdown with Mermaid) "
        "and trace (JSON) are written to --out and named on stdout.",
    )
    choice = demo.add_mutually_exclusive_group()
    choice.add_argument("--approve", action="store_true", help="approve without asking")
    choice.add_argument("--reject", action="store_true", help="reject without asking")
    choice.add_argument(
        "--later",
        action="store_true",
        help="decide later: the run stays interrupted in the store (see agentfsm runs resume)",
    )
    demo.add_argument(
        "--out", default=".", metavar="DIR", help="where to write the files (default: .)"
    )
    _runs_cli.add_db_option(demo)
    demo.set_defaults(handler=_cmd_demo)

    show = commands.add_parser(
        "show",
        help="draw a saved trace in the terminal",
        description="Draw a trace saved by 'agentfsm demo' (or any trace JSON): the trace "
        "table, the path, and the run drawn on the machine in Mermaid.",
    )
    show.add_argument("trace", metavar="TRACE.json", help="the trace file")
    show.set_defaults(handler=_cmd_show)

    view = commands.add_parser(
        "view",
        help="write a run as one HTML page: diagram, timeline, conversation",
        description="Write one self-contained HTML file (no network needed to open it) for a "
        "saved run (RUN_ID, from the store, or from a durable engine's database when --db names "
        "one) or a trace file (TRACE.json): the machine with the "
        "run's path and edge counts, a timeline of transitions with timings, and for each "
        "transition the conversation as it stood, tool calls and results, state updates, "
        "usage, the pause reason or error. Step with the arrow keys.",
    )
    view.add_argument(
        "run",
        metavar="RUN_ID|TRACE.json",
        nargs="+",
        help="saved runs' ids or trace files (each its own page)",
    )
    _runs_cli.add_db_option(view)
    view.add_argument(
        "--out",
        metavar="FILE.html",
        help="the page to write, or a folder for several "
        "(default: RUN_ID.html, or TRACE.trace.html)",
    )
    add_machines_option(view)
    view.set_defaults(handler=_cmd_view)

    studio = commands.add_parser(
        "studio",
        help="browse every run of a store in the browser, live, and answer approvals",
        description="Serve a local web app over a store (needs agentfsm[studio]): every run "
        "with its status, machine, times, model calls and tokens, waiting ones first; each "
        "run's page, following a running run live; and a waiting run's approvals answered "
        "from its page. It listens on 127.0.0.1; with --host every request needs a token.",
    )
    _runs_cli.add_db_option(studio)
    add_machines_option(studio)
    studio.add_argument("--host", metavar="HOST", help="listen on HOST (then a token is required)")
    studio.add_argument(
        "--port", type=int, default=8421, metavar="PORT", help="the port (default 8421; 0: any)"
    )
    studio.add_argument(
        "--token", metavar="TOKEN", help="the access token (default with --host: a new one)"
    )
    studio.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        action="append",
        help="the agent decisions resume runs with, as 'agentfsm runs resume --agent'; "
        "repeat it for several: a run started with one of them ('agentfsm run --agent') "
        "goes on with it, any other with the first, and a fork's page offers them all "
        f"(default: the demo agent, {DEFAULT_AGENT})",
    )
    studio.set_defaults(handler=_cmd_studio)

    diagrams_ = commands.add_parser(
        "diagrams",
        help="regenerate or check the machines' diagrams",
        description="Write the machines' diagrams (machine.mmd, machine.md, machine.dot, "
        "overview.dot, and machine.svg and overview.svg when Graphviz is installed, paths.md), "
        "all drawn from the machine tables: "
        "the standard machine's in the folder, each LangChain mode's in a sub-folder of its name "
        "(or, with --machine, your own machine's). "
        "With --check, write nothing and exit 1 when a file differs from what the table draws.",
    )
    diagrams_.add_argument(
        "--out", default="diagrams", metavar="DIR", help="the folder (default: diagrams)"
    )
    diagrams_.add_argument(
        "--check", action="store_true", help="only check that the files are up to date"
    )
    diagrams_.add_argument(
        "--machine",
        metavar="MODULE:ATTR",
        help="draw your own machine instead: a MachineTable or an Agent (or a list of them) "
        "in a module, e.g. myapp.machines:EDITOR (with several, each in a folder of its name)",
    )
    diagrams_.set_defaults(handler=_cmd_diagrams)

    run = commands.add_parser(
        "run",
        help="run your agent (--agent), or a small one on a provider's model, live",
        description="Run your own agent (--agent MODULE:ATTR), or a small agent with safe "
        "tools (add, multiply, current_time) on a provider's model, with a live view. Ctrl-C "
        "stops the run at once, even inside a tool, and prints the command that goes on. "
        "Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY "
        "for the providers' own hosts, and from AGENTFSM_API_KEY for a --base-url. The run is "
        "saved to the store (--db), so 'agentfsm runs' and 'agentfsm view' work on it.",
    )
    run.add_argument(
        "--provider",
        choices=["openai", "anthropic", "scripted"],
        help="who serves the built-in small agent's model (scripted: the built-in test "
        "model, no key); or --agent",
    )
    run.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="run your own agent instead: an Agent or a function returning one, importable "
        "from the current folder; the run records it, so 'agentfsm runs resume RUN_ID' "
        "goes on with it",
    )
    run.add_argument(
        "--model",
        metavar="NAME",
        help="the provider's model name (needed but for --provider scripted)",
    )
    run.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server's URL")
    run.add_argument("--stream", action="store_true", help="stream the reply as it is written")
    run.add_argument(
        "--max-runs",
        type=positive,
        default=None,
        metavar="N",
        help="model calls at most (default: 10; with --agent, the agent's own)",
    )
    run.add_argument("prompt", metavar="PROMPT", help="what to ask")
    _runs_cli.add_db_option(run)
    run.set_defaults(handler=_cmd_run)
    _runs_cli.add_parser(commands)
    _worker_cli.add_parser(commands)
    _check_cli.add_parser(commands)
    _eval_cli.add_parser(commands)
    _versions_cli.add_machines_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``agentfsm`` console script; the exit code."""
    parser = _parser()
    parser.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 2
    handler = cast(Callable[[argparse.Namespace], int], args.handler)
    try:
        return handler(args)
    except UsageError as exc:
        print(printable(f"agentfsm {args.command}: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"agentfsm {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`| head`): not an error of the command. Python
        # would fail again flushing stdout at exit, so stdout goes nowhere from now on.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0


def run_command() -> NoReturn:
    """The ``agentfsm`` process: :func:`main`, then its exit status.

    A process that used Temporal's client leaves without finalizing the interpreter (its
    output flushed first): the client's Rust threads outlive the command and may call into
    a finalizing interpreter, which aborts it (SIGABRT, after the command's own output)."""
    code = main()
    if any(name.startswith("temporalio.bridge") for name in sys.modules):
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    run_command()
