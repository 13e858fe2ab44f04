"""Diagrams drawn from the machine table (Mermaid)."""

from __future__ import annotations

from .machine import MachineTable
from .trace import Trace


def run_mermaid(trace: Trace, table: MachineTable) -> str:
    """The machine with the edges ``trace`` took marked and counted."""
    taken: dict[tuple[str, str, str], int] = {}
    for edge in trace.edges:
        taken[edge] = taken.get(edge, 0) + 1
    lines = ["stateDiagram-v2", f"    [*] --> {trace.entry}"]
    for e in table.edges:
        count = taken.get((e.source, e.trigger, e.dest), 0)
        label = f"{e.trigger} x{count}" if count else e.trigger
        lines.append(f"    {e.source} --> {e.dest}: {label}")
    return "\n".join(lines) + "\n"
