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
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

from ..machine import MachineTable
from ..modes.standard import STANDARD
from ..results import Terminal
from ..store import SavedRun
from ..trace import Trace
from ._model import page_data
from ._svg import machine_svg

__all__ = ["page", "saved_run_page", "traces_page"]


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
) -> str:
    """The HTML page of a run made of ``traces`` (its segments, in order) on ``table``."""
    data = page_data(traces, table, title=title, run_id=run_id, result=result)
    taken: Counter[tuple[str, str, str]] = Counter()
    visits: Counter[str] = Counter()
    for trace in traces:
        taken.update(trace.edges)
        visits.update(trace.states)
    entered = Counter(t.entry for t in traces)
    style, script = _asset("page.css"), _asset("page.js")
    policy = (
        f"default-src 'none'; style-src {_sha256(style)}; script-src {_sha256(script)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
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
</body>
</html>
"""


def traces_page(traces: Sequence[Trace], *, title: str, table: MachineTable = STANDARD) -> str:
    """The page of traces read from a file (a run and its resumes)."""
    return page(traces, title=title, table=table)


def saved_run_page(saved: SavedRun, *, table: MachineTable = STANDARD) -> str:
    """The page of a run loaded from a store, with how it ended."""
    return page(
        saved.traces,
        title=f"run {saved.run_id}",
        table=table,
        run_id=saved.run_id,
        result=saved.result,
    )
