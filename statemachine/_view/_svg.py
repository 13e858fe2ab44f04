"""The machine drawn as SVG for the run page: every state and edge, each with an id.

The layout comes from the table alone, so it needs no Graphviz: working states
down a column in table order (forward edges straight down), edges that go back
or skip ahead as arcs on the left, terminals down a column on the right,
entries as arrows from the left margin. Each edge is ``<g id="edge-K">`` (``K``
its index in the table), each state ``<g id="state-NAME">``, each entry
``<g id="entry-NAME">``, so the page's script can light up what a step took.
The whole run's counts are written on what it took.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable
from typing import Final

from .._machine import Edge, MachineTable
from .._paths import state_label

__all__ = ["machine_svg"]

_NODE_W: Final = 150
_NODE_H: Final = 34
_ROW: Final = 78
_TOP: Final = 40
_SPINE_X: Final = 330
_TERMINAL_X: Final = 660
_WIDTH: Final = 760

_Point = tuple[float, float]


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _positions(table: MachineTable) -> dict[str, _Point]:
    """Centre of every state: working states down one column, terminals down another."""
    at = {s: (float(_SPINE_X), float(_TOP + i * _ROW)) for i, s in enumerate(table.working)}
    step = max(len(table.working) - 1, 1) * _ROW / max(len(table.terminals), 1)
    step = max(step, _NODE_H + 12.0)  # a small machine's terminals never overlap
    for j, t in enumerate(table.terminals):
        at[t] = (float(_TERMINAL_X), _TOP + step * (j + 0.5))
    return at


def _bezier(t: float, *points: _Point) -> _Point:
    """A point of the cubic Bézier curve through ``points`` (four of them)."""
    weights = ((1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3)
    return (
        sum(w * p[0] for w, p in zip(weights, points, strict=True)),
        sum(w * p[1] for w, p in zip(weights, points, strict=True)),
    )


def _curve(*points: _Point) -> str:
    (ax, ay), (bx, by), (cx, cy), (dx, dy) = points
    return f"M{ax:.0f},{ay:.0f} C{bx:.0f},{by:.0f} {cx:.0f},{cy:.0f} {dx:.0f},{dy:.0f}"


def _edge(e: Edge, order: dict[str, int], at: dict[str, _Point]) -> tuple[str, _Point, str]:
    """An edge's path, where its label goes and the label's anchor."""
    (x1, y1), (x2, y2) = at[e.source], at[e.dest]
    half_w, half_h = _NODE_W / 2, _NODE_H / 2
    if e.source in order and e.dest in order:
        gap = order[e.dest] - order[e.source]
        if gap == 1:
            path = f"M{x1:.0f},{y1 + half_h:.0f} L{x2:.0f},{y2 - half_h - 2:.0f}"
            return path, (x1 + 7, (y1 + y2) / 2 + 4), "start"
        # Back (the loop) or skipping ahead: an arc on the left, wider the further it goes.
        bend = x1 - half_w - 40 - 16 * abs(gap)
        points = ((x1 - half_w, y1), (bend, y1), (bend, y2), (x2 - half_w - 2, y2))
        x, y = _bezier(0.5, *points)
        return _curve(*points), (x + 5, y + 4), "start"
    mid = (x1 + half_w + x2 - half_w) / 2
    points = ((x1 + half_w, y1), (mid, y1), (mid, y2), (x2 - half_w - 2, y2))
    # A third of the way along, where the edges leaving one state have not met others yet.
    x, y = _bezier(0.3, *points)
    return _curve(*points), (x, y - 3), "middle"


def machine_svg(
    table: MachineTable,
    taken: Counter[tuple[str, str, str]],
    visits: Counter[str],
    entered: Counter[str],
    *,
    edge_label: Callable[[Edge, int], str] | None = None,
    edge_class: Callable[[Edge], str | None] | None = None,
) -> str:
    """The machine, with ``taken`` counted on its edges, ``visits`` on its states and
    ``entered`` on its entries (by the state entered). ``edge_label(edge, count)`` writes
    an edge's label instead (an eval's frequency per run), ``edge_class(edge)`` adds a
    class to it (a change between two evals)."""
    at = _positions(table)
    order = {s: i for i, s in enumerate(table.working)}
    height = int(max(y for _, y in at.values()) + _NODE_H / 2 + 24)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="machine" viewBox="0 0 {_WIDTH} {height}" '
        f'role="img" aria-label="{_esc(f"the {table.name} machine")}">',
        "<defs>",
        *(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
            'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto">'
            f'<path d="M0,0 L10,5 L0,10 z" class="head-{kind}"/></marker>'
            for kind in ("idle", "taken", "current")
        ),
        "</defs>",
    ]
    shared = Counter((e.trigger, e.dest) for e in table.edges)
    for k, e in enumerate(table.edges):
        path, (lx, ly), anchor = _edge(e, order, at)
        count = taken[(e.source, e.trigger, e.dest)]
        classes = (
            ["edge"] + ["taken"] * bool(count) + ["shared"] * (shared[(e.trigger, e.dest)] > 1)
        )
        label = f"{e.trigger} x{count}" if count else e.trigger
        if edge_label is not None:
            label = edge_label(e, count)
        extra = edge_class(e) if edge_class is not None else None
        if extra:
            classes.append(extra)
        out.append(
            f'<g class="{" ".join(classes)}" id="edge-{k}">'
            f"<title>{_esc(f'{e.source} --{e.trigger}--> {e.dest}: {e.why}')}</title>"
            f'<path d="{path}"/>'
            f'<text x="{lx:.0f}" y="{ly:.0f}" text-anchor="{anchor}">{_esc(label)}</text></g>'
        )
    first: dict[str, str] = {}
    for situation, state in table.entries.items():
        first.setdefault(state, situation)
    for situation, state in table.entries.items():
        x, y = at[state]
        count = entered[state] if first[state] == situation else 0
        label = f"{situation} x{count}" if count else situation
        out.append(
            f'<g class="entry{" taken" if count else ""}" id="entry-{_esc(state)}">'
            f'<circle cx="12" cy="{y:.0f}" r="5"/>'
            f'<path d="M18,{y:.0f} L{x - _NODE_W / 2 - 2:.0f},{y:.0f}"/>'
            f'<text x="8" y="{y - 7:.0f}">{_esc(label)}</text></g>'
        )
    for state, (x, y) in at.items():
        terminal = state in table.terminals
        count = visits[state]
        classes = ["state"] + ["terminal", f"end-{state}"] * terminal + ["visited"] * bool(count)
        left, top = x - _NODE_W / 2, y - _NODE_H / 2
        shape = f'<rect x="{left:.0f}" y="{top:.0f}" width="{_NODE_W}" height="{_NODE_H}" rx="9"/>'
        if terminal:
            shape += (
                f'<rect class="inner" x="{left + 3:.0f}" y="{top + 3:.0f}" '
                f'width="{_NODE_W - 6}" height="{_NODE_H - 6}" rx="7"/>'
            )
        name = state_label(state) + (f" x{count}" if count else "")
        text = f'<text x="{x:.0f}" y="{y + 4.5:.0f}" text-anchor="middle">{_esc(name)}</text>'
        children = table.children.get(state)
        if children:
            # A state whose work is a child machine: named under the state's own name.
            classes.append("composite")
            runs = "runs " + ", ".join(dict.fromkeys(c.name for c in children))
            text = (
                f"<title>{_esc(f'{state} {runs}')}</title>"
                f'<text x="{x:.0f}" y="{y:.0f}" text-anchor="middle">{_esc(name)}</text>'
                f'<text class="runs" x="{x:.0f}" y="{y + 11:.0f}" text-anchor="middle">'
                f"{_esc(runs)}</text>"
            )
        out.append(
            f'<g class="{_esc(" ".join(classes))}" id="state-{_esc(state)}">{shape}{text}</g>'
        )
    out.append("</svg>")
    return "\n".join(out)
