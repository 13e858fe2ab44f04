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

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from .diagrams import compress_path, describe_detail
from .machine import STANDARD, MachineTable
from .results import Failed, Interrupted, Paused, Terminal
from .run import Run
from .trace import Trace, Transition

__all__ = ["RunView", "summary", "trace_table", "watch"]

_OUTCOME_STYLE = {"ok": "green", "paused": "cyan", "interrupted": "yellow", "error": "red"}


def _table(title: str | None) -> Table:
    table = Table(title=title, title_justify="left", expand=False, pad_edge=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("from")
    table.add_column("trigger", style="bold")
    table.add_column("to")
    table.add_column("ms", justify="right")
    table.add_column("detail", overflow="fold")
    return table


def _add_row(table: Table, number: int, t: Transition, terminals: Sequence[str]) -> None:
    dest = Text(t.dest, style=_OUTCOME_STYLE.get(t.dest, "bold") if t.dest in terminals else "")
    table.add_row(
        str(number), t.source, t.trigger, dest, f"{t.elapsed * 1000:.1f}", describe_detail(t)
    )


def trace_table(trace: Trace, *, title: str | None = None, table: MachineTable = STANDARD) -> Table:
    """A trace as a rich table: one row per transition, terminals coloured by outcome."""
    out = _table(title)
    for i, t in enumerate(trace, 1):
        _add_row(out, i, t, table.terminals)
    return out


def _result_line(result: Terminal | None) -> Text | None:
    """What a host must know about how the run ended, beyond its terminal."""
    match result:
        case Failed(_, error):
            return Text(f"{error.type}: {error.message}", style="red")
        case Interrupted(_, data):
            requests = (data or {}).get("action_requests") or ()
            names = ", ".join(str(r.get("tool_name")) for r in requests)
            return Text(
                f"waiting for a decision on {names}" if names else f"interrupt: {dict(data or {})}",
                style="yellow",
            )
        case Paused(chain, _):
            reason = chain.custom_context.get("pause_reason")
            return Text(f"pause reason: {reason}" if reason is not None else "paused", style="cyan")
    return None


def summary(
    trace: Trace,
    result: Terminal | None = None,
    *,
    wall_time: float | None = None,
    table: MachineTable = STANDARD,
) -> RenderableType:
    """A closing summary: terminal, model calls, tools run, time, and the path in short."""
    calls = sum(t.source == "calling" and not (t.detail or {}).get("requested") for t in trace)
    tools = sum(len((t.detail or {}).get("tools", ())) for t in trace if t.source == "executing")
    seconds = wall_time if wall_time is not None else sum(t.elapsed for t in trace)
    terminal = trace.terminal or "(not ended)"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    grid.add_row("ended", Text(terminal, style="bold " + _OUTCOME_STYLE.get(terminal, "")))
    line = _result_line(result)
    if line is not None:
        grid.add_row("", line)
    grid.add_row("model calls", str(calls))
    grid.add_row("tools run", str(tools))
    grid.add_row("steps", str(len(trace)))
    grid.add_row("time", f"{seconds:.3f} s")
    grid.add_row("path", compress_path(trace.states, table))
    return grid


class RunView:
    """The live picture of one run: the transitions so far, the state at work, streamed text.

    A rich renderable: hand it to ``rich.live.Live`` and call :meth:`begin` before
    each step and :meth:`add` after it. :attr:`callbacks` (a chain callback map)
    feeds the model's streamed text in.
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

    def __rich__(self) -> RenderableType:
        table = _table(self.title)
        for i, t in enumerate(self.transitions, 1):
            _add_row(table, i, t, self.table.terminals)
        parts: list[RenderableType] = [table]
        if self.current is not None:
            self._spinner.update(text=Text(f"{self.current} …", style="cyan"))
            parts.append(self._spinner)
        if self.streamed:
            parts.append(
                Panel(
                    Text(self.streamed.strip()),
                    title=self.model or "model",
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
    started = time.perf_counter()
    with Live(view, console=console, refresh_per_second=15, transient=False) as live:
        while not run.done:
            view.begin(run.state)
            live.refresh()
            view.add(await run.step())
            live.refresh()
    assert run.result is not None
    # Live leaves its last line open when the console is not a terminal.
    console.line()
    if show_summary:
        console.print(
            summary(run.trace, run.result, wall_time=time.perf_counter() - started, table=run.table)
        )
    return run.result
