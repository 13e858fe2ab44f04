"""The index page: every run of the store as a table, written on the server.

Every value from a run goes through :func:`html.escape`. The page's one script keeps
the table live: it is sent the rows as the server writes them (:func:`index_change`,
text only) and puts them on the page as text; the page's policy lets it load nothing
but its own style and that script, and talk to nothing but its own server.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import shlex
from collections.abc import Mapping
from importlib.resources import files
from typing import Any, Final
from urllib.parse import quote, urlencode

__all__ = [
    "DECIDED_AS",
    "cells",
    "decided_words",
    "document",
    "index_change",
    "index_page",
    "policy",
    "select",
]


def _asset(name: str) -> str:
    return files(__package__ or __name__).joinpath(name).read_text(encoding="utf-8")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def policy(style: str, script: str = "") -> str:
    scripts = f"; script-src {_hash(script)}; connect-src 'self'" if script else ""
    return (
        f"default-src 'none'; style-src {_hash(style)}; img-src data:; "
        f"base-uri 'none'; form-action 'self'{scripts}"
    )


def _when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def select(name: str, label: str, options: list[str], chosen: str) -> str:
    """A filter's choice: any, or one of ``options`` (``chosen`` selected)."""
    items = [f'<option value=""{"" if chosen else " selected"}>any {label}</option>']
    for option in options:
        mark = " selected" if option == chosen else ""
        items.append(f'<option value="{_e(option)}"{mark}>{_e(option)}</option>')
    return f'<label>{_e(label)} <select name="{name}">{"".join(items)}</select></label>'


def document(title: str, style: str, body: str, *, body_class: str = "", script: str = "") -> str:
    """A studio page written on the server: ``body`` under its own style and policy
    (and ``script``, the one script the policy then allows)."""
    classes = f' class="{_e(body_class)}"' if body_class else ""
    if script:
        body += f"\n<script>{script}</script>"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(policy(style, script))}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} · agentfsm studio</title>
<style>{style}</style>
</head>
<body{classes}>
{body}
</body>
</html>
"""


def cells(run: Mapping[str, Any]) -> dict[str, str]:
    """One run's row of the index, as the text of its cells (and its link)."""
    return {
        "run_id": str(run["run_id"]),
        "link": "/runs/" + quote(str(run["run_id"]), safe=""),
        "status": str(run["status"]),
        "machine": str(run["machine"] or "?"),
        "state": str(run["state"]),
        "started": _when(run["created"]),
        "duration": _duration(run["duration"]),
        "steps": str(run["steps"]),
        "model_calls": str(run["model_calls"]),
        "tokens": str(run["tokens"]),
        "summary": str(run["problem"] or run["summary"] or ""),
    }


def _row(run: Mapping[str, Any]) -> str:
    c = {k: _e(v) for k, v in cells(run).items()}
    return (
        f'<tr class="{c["status"]}" data-run="{c["run_id"]}">'
        f'<td class="pick"><input type="checkbox" form="compare-runs" name="run" '
        f'value="{c["run_id"]}" aria-label="pick {c["run_id"]} to compare"></td>'
        f'<td><a href="{c["link"]}">{c["run_id"]}</a></td>'
        f'<td><span class="badge {c["status"]}">{c["status"]}</span></td>'
        f"<td>{c['machine']}</td>"
        f"<td>{c['state']}</td>"
        f"<td>{c['started']}</td>"
        f"<td class='num'>{c['duration']}</td>"
        f"<td class='num'>{c['steps']}</td>"
        f"<td class='num'>{c['model_calls']}</td>"
        f"<td class='num'>{c['tokens']}</td>"
        f'<td class="summary">{c["summary"]}</td>'
        "</tr>"
    )


_STATUSES = ("interrupted", "paused", "waiting", "running", "ok", "error")


def _tally(listing: Mapping[str, Any]) -> str:
    counts = listing["statuses"]
    return " · ".join(
        [f"{listing['all']} runs"] + [f"{s} {counts[s]}" for s in _STATUSES if counts.get(s)]
    )


def index_change(listing: Mapping[str, Any]) -> dict[str, Any]:
    """What a live index is sent of ``listing``: its rows' text, and its counts."""
    return {
        "runs": [cells(r) for r in listing["runs"]],
        "tally": _tally(listing),
        "shown": f"{listing['total']} shown",
        "all": listing["all"],
        "empty": "No runs match." if listing["all"] else "No runs yet.",
    }


def index_page(
    listing: Mapping[str, Any], filters: Mapping[str, str], *, store: str, mark: str = ""
) -> str:
    """The index of ``listing`` (from :meth:`Catalog.page`) with the ``filters`` it used;
    with ``mark`` (:func:`~agentfsm.studio._live.index_mark` of the runs it lists), live."""
    style = _asset("studio.css")
    statuses = list(_STATUSES)
    rows = "\n".join(_row(r) for r in listing["runs"]) or (
        '<tr><td colspan="11" class="empty">No runs match.</td></tr>'
        if listing["all"]
        else '<tr><td colspan="11" class="empty">No runs yet. Save one to this store: '
        f"<code>agentfsm demo --later --db {_e(shlex.quote(store))}</code> (a run waiting for your "
        f"approval), or <code>agentfsm run --agent MODULE:ATTR --db {_e(shlex.quote(store))} PROMPT"
        "</code>; this page shows it as it runs.</td></tr>"
    )

    def page_link(number: int, text: str) -> str:
        query = urlencode({**{k: v for k, v in filters.items() if v}, "page": number})
        return f'<a href="/?{_e(query)}">{_e(text)}</a>'

    pager = [f"page {listing['page']} of {listing['pages']}"]
    if listing["page"] > 1:
        pager.insert(0, page_link(listing["page"] - 1, "← newer"))
    if listing["page"] < listing["pages"]:
        pager.append(page_link(listing["page"] + 1, "older →"))
    events = ""
    if mark:
        query = {**{k: v for k, v in filters.items() if v}, "page": listing["page"], "mark": mark}
        events = f' data-events="{_e("/api/events?" + urlencode(query))}"'
    body = f"""<header>
  <h1>agentfsm studio</h1>
  <div class="sub">{_e(store)} · <span id="tally">{_e(_tally(listing))}</span> ·
    <a href="/evals">evals</a> <span id="live" class="live"></span></div>
</header>
<form id="filters" method="get" action="/">
  {select("status", "status", statuses, filters.get("status", ""))}
  {select("machine", "machine", list(listing["machines"]), filters.get("machine", ""))}
  {select("tool", "tool", list(listing["tools"]), filters.get("tool", ""))}
  <label>text <input type="search" name="q" value="{_e(filters.get("q", ""))}"
    placeholder="search messages"></label>
  <button type="submit">Show</button>
</form>
<div class="scroll">
<table id="runs"{events}>
<thead><tr><th></th><th>run</th><th>status</th><th>machine</th><th>state</th><th>started</th>
<th>duration</th><th>steps</th><th>model calls</th><th>tokens</th><th>summary</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
</div>
<form id="compare-runs" method="get" action="/compare">
  <button type="submit">Compare the two picked runs</button>
</form>
<nav id="pager"><span id="shown">{listing["total"]} shown</span> · {" · ".join(pager)}</nav>"""
    return document("runs", style, body, script=_asset("index.js") if mark else "")


#: A decision's type in the words a page tells it with ("decided elsewhere: edited ...").
DECIDED_AS: Final = {"approve": "approved", "edit": "edited", "reject": "rejected"}


def decided_words(decided: Mapping[str, Any]) -> str:
    """A decision that came first, as a page tells the user whose click lost:
    ``decided in another window: approved write_file (call_2)``."""
    what = f"{decided['tool']} ({decided['call_id']})"
    if decided["decision"] is None:
        return f"{what} was decided {decided['where']}"
    return f"decided {decided['where']}: {decided['decision']} {what}"
