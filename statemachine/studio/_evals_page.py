"""The evals pages: the store's saved evals, one eval drawn on its machine, two compared.

Written on the server like the index: every value from a report (names, labels,
prompts, answers: text from a dataset file or a model) goes through :func:`html.escape`,
the pages run no script, and their policy loads nothing but their own style. An eval's
machine is drawn as a run's is, each edge labelled with how often a run took it; a
comparison's drawing labels each edge ``A -> B`` per run and colours the ones that
changed significantly (up or down).
"""

from __future__ import annotations

import datetime
import html
from collections import Counter
from collections.abc import Sequence
from urllib.parse import quote, urlencode

from .._evals._compare import EvalComparison
from .._evals._report import EvalReport
from .._machine import Edge, MachineTable, UnknownMachineError, machine_named
from .._paths import compress_path
from .._view._svg import machine_svg
from ..store import SQLiteStore
from ._pages import _asset, document

__all__ = ["eval_compare_page", "eval_of", "eval_page", "evals_page"]

_STYLE = """
.machine .edge.up path { stroke: #b91c1c; stroke-width: 3; }
.machine .edge.up text { fill: #b91c1c; font-weight: 700; }
.machine .edge.down path { stroke: #1d4ed8; stroke-width: 3; }
.machine .edge.down text { fill: #1d4ed8; font-weight: 700; }
.evals td.num, .evals th.num { text-align: right; font-variant-numeric: tabular-nums; }
.evals tr.regression { background: #fef2f2; } .evals tr.changed { background: #fffbeb; }
.evals .verdict.ok { color: #166534; } .evals .verdict.bad { color: #b91c1c; }
.evals .drawing { max-width: 760px; }
"""


def eval_of(store: SQLiteStore, eval_id: str) -> tuple[EvalReport, MachineTable | None]:
    """The saved eval ``eval_id`` and the machine its runs ran on, when it is declared here."""
    report = EvalReport.load(store, eval_id)
    try:
        return report, machine_named(report.machine, version=report.machine_version)
    except (UnknownMachineError, ValueError):
        return report, None


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _link(eval_id: str) -> str:
    return "/evals/" + quote(eval_id, safe="")


def _when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _style() -> str:
    return _asset("studio.css") + _STYLE


def _header(title: str, back: str = '<a class="back" href="/evals">← all evals</a>') -> str:
    return f"<header>\n  {back}\n  <h1>{_e(title)}</h1>\n</header>"


def evals_page(rows: Sequence[tuple[str, str, str, float]], problem: str = "") -> str:
    """Every saved eval, newest first, and a form that compares two."""
    body = [_header("Evals", '<a class="back" href="/">← all runs</a>')]
    if problem:
        body.append(f'<p class="problem">{_e(problem)}</p>')
    if not rows:
        body.append(
            '<p class="sub">No eval saved yet: <code>agentfsm eval run</code> saves one.</p>'
        )
        return document("evals", _style(), "\n".join(body), body_class="evals")
    options = "".join(f'<option value="{_e(r[0])}">{_e(r[1])} · {_e(r[0])}</option>' for r in rows)
    body.append(
        '<form id="pick" method="get" action="/evals/compare">'
        f'<label>A <select name="a">{options}</select></label> '
        f'<label>B <select name="b">{options}</select></label> '
        '<button type="submit">Compare</button></form>'
    )
    lines = "\n".join(
        f'<tr><td><a href="{_e(_link(i))}">{_e(i)}</a></td><td>{_e(n)}</td><td>{_e(d)}</td>'
        f"<td>{_e(_when(c))}</td></tr>"
        for i, n, d, c in rows
    )
    body.append(
        '<table id="evals"><thead><tr><th>eval</th><th>configuration</th><th>dataset</th>'
        f"<th>when</th></tr></thead><tbody>\n{lines}\n</tbody></table>"
    )
    return document("evals", _style(), "\n".join(body), body_class="evals")


def _drawing(report: EvalReport, table: MachineTable) -> str:
    runs = max(1, len(report.outcomes))
    taken = Counter(report.edge_totals())
    entered = report.entries()

    def label(edge: Edge, count: int) -> str:
        return f"{edge.trigger} {count / runs:.2f}/run" if count else edge.trigger

    return _classed(machine_svg(table, taken, report.visits(), entered, edge_label=label))


def _classed(svg: str) -> str:
    """The drawing under the studio's machine style (``.machine``), as the run page's is."""
    return svg.replace('id="machine"', 'class="machine" id="machine"', 1)


def eval_page(report: EvalReport, table: MachineTable | None) -> str:
    """One eval: its numbers, its machine with each edge's frequency, its expectations'
    pass rates, its paths."""
    n = len(report.outcomes)
    overall = report.overall
    low, high = overall.interval
    mean, t_low, t_high = report.tokens()
    latency = report.latency()
    cost = report.cost()
    terminals = ", ".join(f"{k} {v} ({v / n:.0%})" for k, v in sorted(report.terminals().items()))
    facts = [
        ("dataset", report.dataset),
        ("model", report.model),
        ("machine", f"{report.machine} v{report.machine_version}"),
        ("runs", f"{len(report.cases)} cases x {report.runs} = {n}"),
        (
            "met every expectation",
            f"{overall.passed}/{n} {overall.value:.0%} [{low:.0%}, {high:.0%}]",
        ),
        ("terminals", terminals),
        ("tokens per run", f"{mean:.0f} [{t_low:.0f}, {t_high:.0f}]"),
        ("cost", "not reported" if cost is None else f"{cost:.6g}"),
        ("seconds per run", f"mean {latency['mean']:.3f}, p95 {latency['p95']:.3f}"),
        ("when", _when(report.created)),
    ]
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    expectations = []
    for case in report.cases:
        for i, label in enumerate(case.expectations):
            rate = case.rate(i, report.confidence)
            r_low, r_high = rate.interval
            expectations.append(
                f"<tr><td>{_e(case.name)}</td><td>{_e(label)}</td>"
                f'<td class="num">{rate.passed}/{rate.runs}</td>'
                f'<td class="num">{rate.value:.0%} [{r_low:.0%}, {r_high:.0%}]</td></tr>'
            )
    paths = []
    for index, count in report.path_counts().most_common(10):
        states = report.states(index)
        text = compress_path(states, table) if table is not None else " ".join(states)
        paths.append(f'<tr><td class="num">{count} ({count / n:.0%})</td><td>{_e(text)}</td></tr>')
    drawing = (
        _drawing(report, table)
        if table is not None
        else f'<p class="problem">the {_e(report.machine)} machine is not declared here</p>'
    )
    body = f"""{_header(f"{report.name} on {report.dataset}")}
<p class="sub">{_e(report.id)}</p>
<table id="facts">{rows}</table>
<h2>The machine, each edge's runs per run</h2>
<div class="drawing">{drawing}</div>
<h2>Expectations</h2>
<table id="expectations"><thead><tr><th>case</th><th>expectation</th><th class="num">passed</th>
<th class="num">rate [{report.confidence:.0%} interval]</th></tr></thead>
<tbody>{"".join(expectations)}</tbody></table>
<h2>Paths</h2>
<table id="eval-paths"><thead><tr><th class="num">runs</th><th>path</th></tr></thead>
<tbody>{"".join(paths)}</tbody></table>"""
    return document(f"eval {report.id}", _style(), body, body_class="evals")


def eval_compare_page(comparison: EvalComparison, table: MachineTable | None) -> str:
    """Two evals compared: the verdict, the candidate's machine with each edge's
    ``A -> B`` runs per run (significant changes coloured), and every tested row."""
    a, b = comparison.a, comparison.b
    edges = {r.what: r for r in comparison.rows if r.kind == "edge"}
    if table is not None:

        def label(edge: Edge, count: int) -> str:
            row = edges.get(f"{edge.source} --{edge.trigger}--> {edge.dest}")
            return edge.trigger if row is None else f"{edge.trigger} {row.a:.2f}→{row.b:.2f}"

        def classed(edge: Edge) -> str | None:
            row = edges.get(f"{edge.source} --{edge.trigger}--> {edge.dest}")
            if row is None or not row.significant:
                return None
            return "up" if row.delta > 0 else "down"

        taken = Counter(a.edge_totals()) + Counter(b.edge_totals())
        drawing = _classed(
            machine_svg(table, taken, b.visits(), b.entries(), edge_label=label, edge_class=classed)
        )
    else:
        drawing = f'<p class="problem">the {_e(b.machine)} machine is not declared here</p>'
    rows = []
    for row in comparison.rows:
        what = f"{row.case}: {row.what}" if row.case else row.what
        if row.kind == "edge":
            values = (
                f'{row.a:.2f}</td><td class="num">{row.b:.2f}</td><td class="num">{row.delta:+.2f}'
            )
        else:
            values = (
                f'{row.a:.0%}</td><td class="num">{row.b:.0%}</td>'
                f'<td class="num">{row.delta * 100:+.0f} pts'
            )
        mark = "regression" if row.regression else "changed" if row.significant else ""
        p = "" if row.p_adjusted is None else f"{row.p_adjusted:.3g}"
        rows.append(
            f'<tr class="{mark}"><td>{_e(row.kind)}</td><td>{_e(what)}</td>'
            f'<td class="num">{values}</td><td class="num">{p}</td><td>{mark}</td></tr>'
        )
    kind = "ok" if comparison.ok else "bad"
    swap = "/evals/compare?" + urlencode({"a": b.id, "b": a.id})
    body = f"""{_header(f"{a.name} → {b.name} on {a.dataset}")}
<p class="sub">A <a href="{_e(_link(a.id))}">{_e(a.id)}</a>
 · B <a href="{_e(_link(b.id))}">{_e(b.id)}</a> · <a href="{_e(swap)}">swap</a></p>
<p id="verdict" class="verdict {kind}">{_e(comparison.verdict)}</p>
<h2>The machine: each edge's runs per run, A → B (red: up, blue: down, significantly)</h2>
<div class="drawing">{drawing}</div>
<table id="rows"><thead><tr><th>kind</th><th>what</th><th class="num">A</th><th class="num">B</th>
<th class="num">change</th><th class="num">p (adjusted)</th><th></th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>"""
    return document(f"compare {a.id} and {b.id}", _style(), body, body_class="evals")
