"""One run as one self-contained HTML page: the machine, a timeline, and time travel.

``agentfsm view`` writes it. The page holds everything it shows (styles,
script, the drawing, the run's data): it opens from a file with no network,
and its Content-Security-Policy lets nothing else load or run. The run's data
sits in a ``<script type="application/json">`` block with ``<``, ``>`` and
``&`` escaped, and the script puts every string from it on the page as text,
so text from a model, a tool or a file shows as written and never acts.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import Any

from .._machine import MachineTable, machine_named
from .._modes.standard import STANDARD
from .._results import Terminal
from .._trace import Trace
from ..store import SavedRun
from ._clock import wall_clock
from ._model import page_data, unanswered_calls
from ._svg import machine_svg

__all__ = [
    "page",
    "page_data",
    "render_page",
    "saved_run_data",
    "saved_run_page",
    "traces_page",
    "unanswered_calls",
    "wall_clock",
]


def _asset(name: str) -> str:
    return files(__name__).joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _script_json(data: Any) -> str:
    """JSON that cannot end the ``<script>`` block it sits in, nor open an HTML comment."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def page(
    traces: Sequence[Trace],
    *,
    title: str,
    table: MachineTable = STANDARD,
    run_id: str | None = None,
    result: Terminal | None = None,
    clock: Sequence[float | None] = (),
) -> str:
    """The HTML page of a run made of ``traces`` (its segments, in order) on ``table``.

    ``clock`` is each step's wall-clock time (seconds since the epoch), when known.
    """
    data = page_data(traces, table, title=title, run_id=run_id, result=result, clock=clock)
    return render_page(data, traces, table=table)


def render_page(
    data: Mapping[str, Any],
    traces: Sequence[Trace],
    *,
    table: MachineTable,
    addon: str = "",
    addon_data: Any = None,
    connect: bool = False,
) -> str:
    """The page of ``data`` (from :func:`~agentfsm.view._model.page_data`).

    ``addon`` is one more script (its data in a ``#addon-data`` block), allowed by the
    page's policy by its hash; ``connect`` lets scripts talk to the page's own server.
    """
    title = str(data["title"])
    taken: Counter[tuple[str, str, str]] = Counter()
    visits: Counter[str] = Counter()
    for trace in traces:
        taken.update(trace.edges)
        visits.update(trace.states)
    entered = Counter(t.entry for t in traces)
    style, script = _asset("page.css"), _asset("page.js")
    scripts = _sha256(script) + (" " + _sha256(addon) if addon else "")
    policy = (
        f"default-src 'none'; style-src {_sha256(style)}; script-src {scripts}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
        + ("; connect-src 'self'" if connect else "")
    )
    extra = (
        f'<script type="application/json" id="addon-data">{_script_json(addon_data)}</script>\n'
        f"<script>{addon}</script>\n"
        if addon
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{html.escape(policy)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · agentfsm</title>
<style>{style}</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <div id="facts"></div>
  <div id="act"></div>
</header>
<main>
  <section id="diagram" aria-label="the machine">
{machine_svg(table, taken, visits, entered)}
  <p class="hint">← → (or j k) step · Home End · click a row</p>
  </section>
  <section id="timeline" aria-label="transitions"><ol id="steps"></ol></section>
  <section id="step" aria-live="polite"></section>
</main>
<script type="application/json" id="run-data">{_script_json(data)}</script>
<script>{script}</script>
{extra}</body>
</html>
"""


def traces_page(traces: Sequence[Trace], *, title: str, table: MachineTable = STANDARD) -> str:
    """The page of traces read from a file (a run and its resumes)."""
    return page(traces, title=title, table=table)


def saved_run_data(
    saved: SavedRun, table: MachineTable, clock: Sequence[float | None] = ()
) -> dict[str, Any]:
    """The data of a saved run's page (its live updates are drawn from the same)."""
    return page_data(
        saved.traces,
        table,
        title=f"run {saved.run_id}",
        run_id=saved.run_id,
        result=saved.result,
        clock=clock,
    )


def saved_run_page(
    saved: SavedRun, *, table: MachineTable | None = None, clock: Sequence[float | None] = ()
) -> str:
    """The page of a run loaded from a store, with how it ended, on the machine it ran on
    (and the run it was forked from, if it was)."""
    table = table or machine_named(saved.trace.machine)
    data = saved_run_data(saved, table, clock)
    if saved.forked_from is not None:
        parent, step = saved.forked_from
        data["forked_from"] = {"run_id": parent, "step": step}
    return render_page(data, saved.traces, table=table)
