"""The compare page: two runs' paths on their machines side by side, and where they part.

Written on the server like the index: every value from a run goes through
:func:`html.escape`, the page runs no script, and its policy lets it load nothing
but its own style. Each run's machine is drawn as the run page draws it, its ids
namespaced (``a-``, ``b-``) so the two drawings do not share one; the edge of the
first step where the runs part is marked on both.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from .._compare import Comparison, Row, Step
from .._machine import MachineTable
from .._view._svg import machine_svg
from ..store import SavedRun
from ._pages import _asset, document

__all__ = ["compare_form", "compare_page"]

_ID = re.compile(r'\bid="')


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _run_link(run_id: str, step: int | None = None) -> str:
    return "/runs/" + quote(run_id, safe="") + ("" if step is None else f"#step-{step}")


def _drawing(side: str, saved: SavedRun, table: MachineTable) -> str:
    """The run's machine with its path counted on it, every id prefixed with ``side-``."""
    taken: Counter[tuple[str, str, str]] = Counter()
    visits: Counter[str] = Counter()
    for trace in saved.traces:
        taken.update(trace.edges)
        visits.update(trace.states)
    entered = Counter(t.entry for t in saved.traces)
    svg = machine_svg(table, taken, visits, entered)
    svg = svg.replace('id="machine"', 'class="machine" id="machine"', 1)
    return _ID.sub(f'id="{side}-', svg)


def _marks(side: str, step: Step | None, table: MachineTable) -> str:
    """Style that marks ``step``'s edge and destination on the ``side`` drawing."""
    if step is None:
        return ""
    edges = {(e.source, e.trigger, e.dest): k for k, e in enumerate(table.edges)}
    k = edges.get((step.source, step.trigger, step.dest))
    out = []
    if k is not None:
        out.append(
            f"#{side}-edge-{k} path {{ stroke: var(--current); stroke-width: 4; "
            f"marker-end: url(#{side}-arrow-current); }}\n"
            f"#{side}-edge-{k} text {{ fill: var(--current); font-weight: 700; display: inline; }}"
        )
    state = re.sub(r"[^A-Za-z0-9_-]", "", step.dest)
    if state == step.dest:
        out.append(
            f"#{side}-state-{state} rect {{ fill: var(--current-fill); stroke: var(--current); "
            "stroke-width: 2.6; }"
        )
    return "\n".join(out)


def _arrows(side: str) -> str:
    """The drawing's arrowheads, by its own marker ids."""
    return (
        f"#{side}-machine .edge path, #{side}-machine .entry path "
        f"{{ marker-end: url(#{side}-arrow-idle); }}\n"
        f"#{side}-machine .edge.taken path, #{side}-machine .entry.taken path "
        f"{{ marker-end: url(#{side}-arrow-taken); }}"
    )


def _side(name: str, info: Mapping[str, Any], drawing: str) -> str:
    run_id = str(info["run_id"])
    parent = info["forked_from"]
    forked = (
        f'<div class="sub">forked from <a href="{_e(_run_link(parent[0], parent[1]))}">'
        f"{_e(parent[0])}</a> at step {int(parent[1])}</div>"
        if parent
        else ""
    )
    return (
        f'<section class="side" id="side-{name}">'
        f'<h2>{name.upper()} <a href="{_e(_run_link(run_id))}">{_e(run_id)}</a> '
        f'<span class="badge {_e(info["status"])}">{_e(info["status"])}</span></h2>'
        f'<div class="sub">{_e(info["machine"])} · at {_e(info["state"])} · '
        f"{int(info['steps'])} steps</div>{forked}"
        f"{drawing}</section>"
    )


def _cell(run_id: str, step: Step | None) -> str:
    if step is None:
        return '<td class="none">—</td>'
    return (
        f'<td><a href="{_e(_run_link(run_id, step.number))}">{_e(step.source)} '
        f'<span class="trigger">{_e(step.trigger)}</span> → {_e(step.dest)}</a></td>'
    )


_SIGNS = {"same": "=", "conversation": "~", "edge": "≠", "missing": "≠"}
_WHAT = {
    "same": "the same step",
    "conversation": "the same edge, another conversation",
    "edge": "another edge",
    "missing": "only one run took a step here",
}


def _row(comparison: Comparison, row: Row) -> str:
    parted = row.number == comparison.parted
    classes = [row.likeness] + ["parted"] * parted
    ident = ' id="parted"' if parted else ""
    return (
        f'<tr class="{" ".join(classes)}"{ident} data-step="{row.number}" '
        f'title="{_e(_WHAT[row.likeness])}">'
        f'<td class="num">{row.number}</td><td class="sign">{_SIGNS[row.likeness]}</td>'
        f"{_cell(comparison.a.run_id, row.a)}{_cell(comparison.b.run_id, row.b)}</tr>"
    )


def compare_form(run_ids: Sequence[str], chosen: Mapping[str, str], problem: str = "") -> str:
    """The page that asks which two runs to compare (``problem``: why it asks again)."""
    options = "".join(f'<option value="{_e(r)}"></option>' for r in run_ids)
    said = f'<p class="problem">{_e(problem)}</p>' if problem else ""
    body = f"""<header>
  <a class="back" href="/">← all runs</a>
  <h1>Compare two runs</h1>
</header>
{said}
<form id="pick" method="get" action="/compare">
  <label>A <input name="a" list="run-ids" value="{_e(chosen.get("a", ""))}" required></label>
  <label>B <input name="b" list="run-ids" value="{_e(chosen.get("b", ""))}" required></label>
  <datalist id="run-ids">{options}</datalist>
  <button type="submit">Compare</button>
</form>"""
    return document("compare", _asset("studio.css"), body, body_class="compare")


def compare_page(
    comparison: Comparison,
    sides: tuple[SavedRun, SavedRun],
    tables: tuple[MachineTable, MachineTable],
) -> str:
    """The page of ``comparison`` between ``sides``, drawn on their ``tables``."""
    data = comparison.as_json()
    parted = comparison.rows[comparison.parted - 1] if comparison.parted else None
    marks = [_arrows("a"), _arrows("b")]
    if parted is not None:
        marks += [_marks("a", parted.a, tables[0]), _marks("b", parted.b, tables[1])]
    style = _asset("studio.css") + "\n" + "\n".join(m for m in marks if m)
    rows = "\n".join(_row(comparison, r) for r in comparison.rows)
    jump = ' · <a href="#parted">to that step</a>' if parted is not None else ""
    kind = "parted" if parted is not None else "same"
    body = f"""<header>
  <a class="back" href="/">← all runs</a>
  <h1>{_e(comparison.a.run_id)} and {_e(comparison.b.run_id)}</h1>
  <div id="parts" class="{kind}">{_e(comparison.why)}{jump}</div>
</header>
<div class="sides">
{_side("a", data["a"], _drawing("a", sides[0], tables[0]))}
{_side("b", data["b"], _drawing("b", sides[1], tables[1]))}
</div>
<div class="scroll">
<table id="paths">
<thead><tr><th>step</th><th></th><th>A · {_e(comparison.a.run_id)}</th>
<th>B · {_e(comparison.b.run_id)}</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
</div>
<p class="sub legend">= the same step · ~ the same edge, another conversation ·
≠ another edge, or a step only one run took</p>"""
    title = f"compare {comparison.a.run_id} and {comparison.b.run_id}"
    return document(title, style, body, body_class="compare")
