"""Terminal views of runs, built on rich: a live view as a run steps, a trace table, a summary.

The engine never prints; these views do, and only when asked. :func:`watch`
steps a run to its end while showing each transition as it happens (state,
trigger, what the model or the tools did, time per step) and the model's
streamed text, then prints a closing summary.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.measure import Measurement
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from .._machine import MachineTable
from .._modes.standard import STANDARD
from .._paths import compress_path
from .._printable import shown
from .._results import Failed, Interrupted, Paused, Terminal
from .._run import Run
from .._trace import Trace, Transition
from ._writers import describe_detail

__all__ = ["RunView", "summary", "trace_table", "watch"]

_OUTCOME_STYLE = {"ok": "green", "paused": "cyan", "interrupted": "yellow", "error": "red"}
#: The narrowest the detail column gets before the transitions are listed line by line.
_DETAIL_MIN = 16


class _Transitions:
    """Transitions as a table where it fits; where it does not, one line each.

    State names are never cut: at a width where the table would have to cut
    them, each transition is a line (its detail on the next), which wraps
    between words.
    """

    def __init__(
        self, transitions: Sequence[Transition], title: str | None, terminals: Sequence[str]
    ) -> None:
        self.transitions = transitions
        self.title = title
        self.terminals = terminals

    def _dest(self, t: Transition) -> Text:
        terminal = t.dest in self.terminals
        return shown(t.dest, _OUTCOME_STYLE.get(t.dest, "bold") if terminal else "")

    def table(self, *, probe: bool = False) -> Table:
        """The table; with ``probe``, every detail at its narrowest, to measure the rest."""
        table = Table(
            title=None if self.title is None else shown(self.title),
            title_justify="left",
            expand=False,
            pad_edge=False,
        )
        table.add_column("#", justify="right", style="dim", no_wrap=True)
        table.add_column("from", no_wrap=True)
        table.add_column("trigger", style="bold", no_wrap=True)
        table.add_column("to", no_wrap=True)
        table.add_column("ms", justify="right", no_wrap=True)
        table.add_column("detail", overflow="fold", min_width=_DETAIL_MIN)
        for i, t in enumerate(self.transitions, 1):
            table.add_row(
                str(i),
                shown(t.source),
                shown(t.trigger),
                self._dest(t),
                f"{t.elapsed * 1000:.1f}",
                "-" * _DETAIL_MIN if probe else shown(describe_detail(t)),
            )
        return table

    def lines(self) -> list[Text]:
        out = [] if self.title is None else [shown(self.title, "italic")]
        for i, t in enumerate(self.transitions, 1):
            line = Text.assemble(
                (f"{i:>3} ", "dim"),
                shown(t.source),
                " --",
                shown(t.trigger, "bold"),
                "--> ",
                self._dest(t),
                (f"  {t.elapsed * 1000:.1f} ms", "dim"),
            )
            out.append(line)
            detail = describe_detail(t)
            if detail:
                out.append(Text.assemble("      ", shown(detail, "dim")))
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unbounded = options.update_width(10_000)
        needed = Measurement.get(console, unbounded, self.table(probe=True)).maximum
        if needed <= options.max_width:
            yield self.table()
        else:
            yield from self.lines()


def trace_table(
    trace: Trace, *, title: str | None = None, table: MachineTable = STANDARD
) -> RenderableType:
    """A trace, one row per transition, terminals coloured by outcome (one line each when
    the terminal is too narrow for a table)."""
    return _Transitions(trace.transitions, title, table.terminals)


def _result_line(result: Terminal | None) -> Text | None:
    """What a host must know about how the run ended, beyond its terminal."""
    match result:
        case Failed(_, error):
            return shown(f"{error.type}: {error.message}", "red")
        case Interrupted(_, data):
            requests = (data or {}).get("action_requests") or ()
            names = ", ".join(str(r.get("tool_name")) for r in requests)
            return shown(
                f"waiting for a decision on {names}" if names else f"interrupt: {dict(data or {})}",
                "yellow",
            )
        case Paused(chain, _):
            reason = chain.custom_context.get("pause_reason")
            return shown(f"pause reason: {reason}" if reason is not None else "paused", "cyan")
    return None


def _count(tools: Any) -> int:
    """How many tools a step's detail lists (a detail read from a file may list none)."""
    return len(tools) if isinstance(tools, list | tuple) else 0


def summary(
    trace: Trace,
    result: Terminal | None = None,
    *,
    wall_time: float | None = None,
    table: MachineTable = STANDARD,
    tools_before: int = 0,
) -> RenderableType:
    """A closing summary: terminal, model calls, tools run, time, and the path in short.

    ``tools_before`` counts tools a host ran outside the trace, before its first step
    (a resume runs approved calls in its trace: they need no count here).
    """
    calls = sum(t.source == "calling" and not (t.detail or {}).get("requested") for t in trace)
    tools = sum(_count((t.detail or {}).get("tools")) for t in trace if t.source == "executing")
    seconds = wall_time if wall_time is not None else sum(t.elapsed for t in trace)
    terminal = trace.terminal or "(not ended)"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    grid.add_row("ended", shown(terminal, "bold " + _OUTCOME_STYLE.get(terminal, "")))
    line = _result_line(result)
    if line is not None:
        grid.add_row("", line)
    grid.add_row("model calls", str(calls))
    ran = f"{tools + tools_before}" + (f" ({tools_before} on resume)" if tools_before else "")
    grid.add_row("tools run", ran)
    grid.add_row("steps", str(len(trace)))
    grid.add_row("time", f"{seconds:.3f} s")
    grid.add_row("path", shown(compress_path(trace.states, table)))
    return grid


class RunView:
    """The live picture of one run: the transitions so far, the state at work, streamed text.

    A rich renderable: hand it to ``rich.live.Live`` and attach it to the run as a
    hook (``run.add_hook(view)``), so it follows the run however the run is driven;
    or call :meth:`begin` before each step and :meth:`add` after it. :attr:`callbacks`
    (a chain callback map) feeds the model's streamed text in.
    """

    def __init__(self, title: str | None = None, table: MachineTable = STANDARD) -> None:
        self.title = title
        self.table = table
        self.transitions: list[Transition] = []
        self.current: str | None = None
        self.streamed = ""
        self.model: str | None = None
        self._spinner = Spinner("dots", style="cyan")

    @property
    def callbacks(self) -> Mapping[str, Any]:
        """Chain callbacks that show streamed text (``LLMChain(..., callbacks=[...])``)."""
        return {"on_llm_new_delta": self.on_delta}

    def on_delta(self, chain: Any, delta: Any) -> None:
        content = getattr(delta, "content", "")
        if content:
            self.streamed += content
            self.model = getattr(getattr(chain, "llm", None), "name", None)

    def begin(self, state: str) -> None:
        """The run is about to do ``state``'s work."""
        self.current = state
        if state == "calling":
            self.streamed = ""

    def add(self, transition: Transition) -> None:
        self.transitions.append(transition)
        self.current = None

    def transition(self, run: Run, transition: Transition) -> None:
        """As a run hook: show ``transition``, and the state it leads to as at work."""
        self.add(transition)
        if not run.done:
            self.begin(transition.dest)

    def __rich__(self) -> RenderableType:
        parts: list[RenderableType] = [
            _Transitions(self.transitions, self.title, self.table.terminals)
        ]
        if self.current is not None:
            self._spinner.update(text=shown(f"{self.current} …", "cyan"))
            parts.append(self._spinner)
        if self.streamed:
            parts.append(
                Panel(
                    shown(self.streamed.strip()),
                    title=shown(self.model or "model"),
                    title_align="left",
                    border_style="dim",
                )
            )
        return Group(*parts)


async def watch(
    run: Run,
    console: Console | None = None,
    *,
    title: str | None = None,
    stream: bool = True,
    show_summary: bool = True,
) -> Terminal:
    """Step ``run`` to its end with a live view on ``console``; print a summary; the result.

    With ``stream`` the view adds an ``on_llm_new_delta`` handler to the run's
    chain, so a streaming model's text shows as it arrives.
    """
    console = console or Console()
    view = RunView(title, run.table)
    if stream:
        run.chain = run.chain.add_callback(view.callbacks)
    view.begin(run.state)
    run.add_hook(view)
    started = time.perf_counter()
    with Live(view, console=console, refresh_per_second=15, transient=False) as live:
        while not run.done:
            live.refresh()
            await run.step()
        live.refresh()
    assert run.result is not None
    # Live leaves its last line open when the console is not a terminal.
    console.line()
    if show_summary:
        console.print(
            summary(run.trace, run.result, wall_time=time.perf_counter() - started, table=run.table)
        )
    return run.result
