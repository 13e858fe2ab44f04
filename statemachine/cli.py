"""The ``agentfsm`` command: ``demo``, ``show``, ``diagrams`` and ``run``.

``agentfsm demo`` runs a scripted agent with a live view, asks for approval
when it interrupts, and writes the run's diagram and trace; ``agentfsm show``
draws a saved trace; ``agentfsm diagrams`` regenerates the committed diagrams
of the machine, or with ``--check`` says which are stale; ``agentfsm run``
runs a small agent on a real provider. Bad arguments exit 2 with a one-line
message; a run that ends in error exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, cast

from rich.console import Console
from rich.json import JSON
from rich.panel import Panel
from rich.prompt import Confirm

from . import _runs_cli, diagram_files, diagrams
from .agent import Agent, AgentRun
from .errors import ChainError
from .machine import STANDARD
from .results import Failed
from .state import AgentState
from .trace import Trace

__all__ = ["main"]


class UsageError(Exception):
    """A bad argument found after parsing: exit 2 with this message."""


class _Parser(argparse.ArgumentParser):
    """argparse, with errors on one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ---------------------------------------------------------------- trace JSON


def dump_runs(traces: Sequence[Trace], **about: Any) -> dict[str, Any]:
    """The JSON of ``agentfsm demo``: each run's trace document (the first run, then resumes).

    Each element of ``runs`` is a :func:`agentfsm.serialization.dump_trace`
    document; ``about`` adds context (the prompt, the decision).
    """
    from .serialization import dump_trace

    return {**about, "runs": [dump_trace(t) for t in traces]}


def load_runs(data: Any) -> list[Trace]:
    """Traces from JSON: a demo file (``runs``), a list of trace documents, or one.

    Tools and models are not at hand, so they load as stand-ins: enough to draw.
    """
    from .serialization import load_trace

    if isinstance(data, Mapping) and "runs" in data:
        data = data["runs"]
    docs = data if isinstance(data, list) else [data]
    if not docs:
        raise ValueError("the file holds no runs")
    if not all(isinstance(d, Mapping) for d in docs):
        raise ValueError("expected trace documents (JSON objects)")
    return [load_trace(d, strict=False) for d in docs]


# ---------------------------------------------------------------- demo


def _decide(
    request: Mapping[str, Any], decision: str | None, console: Console
) -> Mapping[str, Any]:
    """One approval decision: from the flag, or asked at the terminal."""
    name = request.get("tool_name", "?")
    console.print(
        Panel(
            JSON.from_data(request.get("arguments", {})),
            title=f"approval needed: {request.get('display_text') or name} ({name})",
            title_align="left",
            border_style="yellow",
        )
    )
    if decision is None:
        try:
            approved = Confirm.ask(f"Approve {name}?", console=console)
        except EOFError:
            raise UsageError("no answer on stdin; pass --approve or --reject") from None
        decision = "approve" if approved else "reject"
    console.print(f"decision: [bold]{decision}[/bold] {name}")
    return {"type": decision}


def _unique(base: pathlib.Path, suffixes: Sequence[str]) -> pathlib.Path:
    """``base``, or ``base-2``, ``-3``... so that no file of the set exists yet."""
    candidate, n = base, 1
    while any(candidate.with_name(candidate.name + s).exists() for s in suffixes):
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


async def _demo_runs(
    agent: Agent, decision: str | None, console: Console
) -> tuple[list[Trace], AgentState]:
    from ._demo import DEMO_PROMPT
    from .console import watch

    console.rule(f"[bold]agentfsm demo[/bold]: {DEMO_PROMPT}")
    run: AgentRun = agent.start(AgentState.of(DEMO_PROMPT))
    await watch(run, console, title="run 1")
    traces = [run.trace]
    state = run.agent_state
    while state.status == "interrupted" and state.interrupt_data:
        requests = state.interrupt_data.get("action_requests") or ()
        decisions = [_decide(r, decision, console) for r in requests]
        run = await agent.start_resume(state, decisions)
        await watch(run, console, title=f"run {len(traces) + 1} (resumed)")
        traces.append(run.trace)
        state = run.agent_state
    return traces, state


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import DEMO_PROMPT, demo_agent

    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory")
    decision = "approve" if args.approve else "reject" if args.reject else None
    if decision is None and not sys.stdin.isatty():
        raise UsageError(
            "the demo asks for approval at the terminal, and stdin is not one; "
            "pass --approve or --reject"
        )
    console = Console()
    # The answer streams into the live view; it is not printed again.
    traces, state = asyncio.run(_demo_runs(demo_agent(), decision, console))
    out.mkdir(parents=True, exist_ok=True)
    base = _unique(out / f"agentfsm-demo-{time.strftime('%Y%m%d-%H%M%S')}", (".md", ".json"))
    markdown = base.with_name(base.name + ".md")
    trace_json = base.with_name(base.name + ".json")
    markdown.write_text(diagrams.run_markdown(traces, title="agentfsm demo"), encoding="utf-8")
    data = dump_runs(traces, prompt=DEMO_PROMPT, decision=decision or "asked")
    trace_json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"diagram: {markdown}")
    print(f"trace: {trace_json}")
    return 0 if state.status == "ok" else 1


# ---------------------------------------------------------------- show


def _cmd_show(args: argparse.Namespace) -> int:
    from .console import summary, trace_table
    from .serialization import parse_json

    path = pathlib.Path(args.trace)
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
        traces = load_runs(data)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read a trace: {exc}") from None
    console = Console()
    for i, trace in enumerate(traces, 1):
        title = f"run {i} of {len(traces)}" if len(traces) > 1 else "trace"
        console.print(trace_table(trace, title=f"{title}: entered at {trace.entry}"))
        console.print(summary(trace))
        console.print(f"path: {trace.path}", soft_wrap=True, highlight=False)
        console.line()
    console.rule("the run on the machine (Mermaid)")
    console.print(diagrams.run_mermaid(traces, STANDARD), markup=False, highlight=False)
    return 0


# ---------------------------------------------------------------- diagrams


def _cmd_diagrams(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory")
    files = diagram_files.diagram_files(STANDARD)
    no_svg = "machine.svg" not in files
    if args.check:
        stale = diagram_files.stale_files(out, files)
        if no_svg:
            print("machine.svg not checked: Graphviz (dot) is not installed")
        if stale:
            print(
                f"stale diagrams in {out}: {', '.join(stale)}; they differ from what the machine "
                f"table draws. Regenerate them with: agentfsm diagrams --out {out}",
                file=sys.stderr,
            )
            return 1
        print(f"diagrams in {out} are up to date ({len(files)} files checked)")
        return 0
    written = diagram_files.write_files(out, files)
    for name in files:
        print(f"{'wrote' if out / name in written else 'unchanged'} {out / name}")
    if no_svg:
        print("machine.svg not written: Graphviz (dot) is not installed")
    return 0


# ---------------------------------------------------------------- run


def _cmd_run(args: argparse.Namespace) -> int:
    from ._demo import calculator_agent
    from .console import watch

    try:
        from agentfsm.providers.registry import create_model
    except ImportError as exc:  # pragma: no cover - only while providers are incomplete
        print(f"agentfsm run: error: no model registry: {exc}", file=sys.stderr)
        return 1
    try:
        model = create_model(args.provider, args.model, base_url=args.base_url, stream=args.stream)
    except (ValueError, ChainError) as exc:
        print(f"agentfsm run: error: {_error_text(exc)}", file=sys.stderr)
        return 1
    console = Console()
    run = calculator_agent(model, max_runs=args.max_runs).start(AgentState.of(args.prompt))
    result = asyncio.run(watch(run, console, title=f"{args.provider}: {args.model}"))
    if isinstance(result, Failed):
        print(f"agentfsm run: error: {_error_text(result.error)}", file=sys.stderr)
        return 1
    state = run.agent_state
    if state.messages and state.messages[-1].role == "assistant" and not args.stream:
        console.print(Panel(state.messages[-1].text, title="answer", title_align="left"))
    return 0 if state.status == "ok" else 1


def _error_text(error: BaseException) -> str:
    if isinstance(error, ChainError):
        return f"{error.type}: {error.message}"
    return str(error)


# ---------------------------------------------------------------- the parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parser() -> _Parser:
    parser = _Parser(
        prog="agentfsm",
        description="An LLM agent's tool-calling loop as an explicit finite-state machine.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="run a scripted agent with a live view and human approval",
        description="Run the demo agent (scripted model, no network) with a live view. It asks "
        "to write a file, which needs approval: it asks at the terminal, unless --approve or "
        "--reject decides. Then it writes the runs' diagram (Markdown with Mermaid) and trace "
        "(JSON) and names them on stdout.",
    )
    choice = demo.add_mutually_exclusive_group()
    choice.add_argument("--approve", action="store_true", help="approve without asking")
    choice.add_argument("--reject", action="store_true", help="reject without asking")
    demo.add_argument(
        "--out", default=".", metavar="DIR", help="where to write the files (default: .)"
    )
    demo.set_defaults(handler=_cmd_demo)

    show = commands.add_parser(
        "show",
        help="draw a saved trace in the terminal",
        description="Draw a trace saved by 'agentfsm demo' (or any trace JSON): the trace "
        "table, the path, and the run drawn on the machine in Mermaid.",
    )
    show.add_argument("trace", metavar="TRACE.json", help="the trace file")
    show.set_defaults(handler=_cmd_show)

    diagrams_ = commands.add_parser(
        "diagrams",
        help="regenerate or check the machine's diagrams",
        description="Write the machine's diagrams (machine.mmd, machine.md, machine.dot, "
        "machine.svg when Graphviz is installed, paths.md), all drawn from the machine table. "
        "With --check, write nothing and exit 1 when a file differs from what the table draws.",
    )
    diagrams_.add_argument(
        "--out", default="diagrams", metavar="DIR", help="the folder (default: diagrams)"
    )
    diagrams_.add_argument(
        "--check", action="store_true", help="only check that the files are up to date"
    )
    diagrams_.set_defaults(handler=_cmd_diagrams)

    run = commands.add_parser(
        "run",
        help="run a small agent (arithmetic, the time) on a real model",
        description="Run a small agent with safe tools (add, multiply, current_time) on a "
        "provider's model, with a live view. Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY "
        "for the providers' own hosts, and from AGENTFSM_API_KEY for a --base-url.",
    )
    run.add_argument("--provider", required=True, choices=["openai", "anthropic", "scripted"])
    run.add_argument("--model", required=True, metavar="NAME", help="the provider's model name")
    run.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server's URL")
    run.add_argument("--stream", action="store_true", help="stream the reply as it is written")
    run.add_argument(
        "--max-runs", type=_positive, default=10, metavar="N", help="model calls at most (10)"
    )
    run.add_argument("prompt", metavar="PROMPT", help="what to ask")
    run.set_defaults(handler=_cmd_run)
    _runs_cli.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``agentfsm`` console script; the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 2
    handler = cast(Callable[[argparse.Namespace], int], args.handler)
    try:
        return handler(args)
    except UsageError as exc:
        print(f"agentfsm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"agentfsm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
