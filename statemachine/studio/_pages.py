"""The index page: every run of the store as a table, written on the server.

Every value from a run goes through :func:`html.escape`; the page runs no script
and its policy lets it load nothing but its own style.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import shlex
from collections.abc import Mapping
from importlib.resources import files
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["document", "index_page", "policy"]


def _asset(name: str) -> str:
    return files(__package__ or __name__).joinpath(name).read_text(encoding="utf-8")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def policy(style: str) -> str:
    return (
        f"default-src 'none'; style-src {_hash(style)}; img-src data:; "
        "base-uri 'none'; form-action 'self'"
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


def _select(name: str, label: str, options: list[str], chosen: str) -> str:
    items = [f'<option value=""{"" if chosen else " selected"}>any {label}</option>']
    for option in options:
        mark = " selected" if option == chosen else ""
        items.append(f'<option value="{_e(option)}"{mark}>{_e(option)}</option>')
    return f'<label>{_e(label)} <select name="{name}">{"".join(items)}</select></label>'


def document(title: str, style: str, body: str, *, body_class: str = "") -> str:
    """A studio page written on the server: ``body`` under its own style and policy."""
    classes = f' class="{_e(body_class)}"' if body_class else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(policy(style))}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} · agentfsm studio</title>
<style>{style}</style>
</head>
<body{classes}>
{body}
</body>
</html>
"""


def _row(run: Mapping[str, Any]) -> str:
    link = "/runs/" + quote(str(run["run_id"]), safe="")
    summary = run["problem"] or run["summary"] or ""
    return (
        f'<tr class="{_e(run["status"])}" data-run="{_e(run["run_id"])}">'
        f'<td class="pick"><input type="checkbox" form="compare-runs" name="run" '
        f'value="{_e(run["run_id"])}" aria-label="pick {_e(run["run_id"])} to compare"></td>'
        f'<td><a href="{_e(link)}">{_e(run["run_id"])}</a></td>'
        f'<td><span class="badge {_e(run["status"])}">{_e(run["status"])}</span></td>'
        f"<td>{_e(run['machine'] or '?')}</td>"
        f"<td>{_e(run['state'])}</td>"
        f"<td>{_e(_when(run['created']))}</td>"
        f"<td class='num'>{_e(_duration(run['duration']))}</td>"
        f"<td class='num'>{run['steps']}</td>"
        f"<td class='num'>{run['model_calls']}</td>"
        f"<td class='num'>{run['tokens']}</td>"
        f'<td class="summary">{_e(summary)}</td>'
        "</tr>"
    )


def index_page(listing: Mapping[str, Any], filters: Mapping[str, str], *, store: str) -> str:
    """The index of ``listing`` (from :meth:`Catalog.page`) with the ``filters`` it used."""
    style = _asset("studio.css")
    statuses = ["interrupted", "paused", "running", "ok", "error"]
    counts = listing["statuses"]
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
    tally = " · ".join(f"{_e(s)} {counts[s]}" for s in statuses if counts.get(s))
    body = f"""<header>
  <h1>agentfsm studio</h1>
  <div class="sub">{_e(store)} · {listing["all"]} runs · {tally} · <a href="/evals">evals</a></div>
</header>
<form id="filters" method="get" action="/">
  {_select("status", "status", statuses, filters.get("status", ""))}
  {_select("machine", "machine", list(listing["machines"]), filters.get("machine", ""))}
  {_select("tool", "tool", list(listing["tools"]), filters.get("tool", ""))}
  <label>text <input type="search" name="q" value="{_e(filters.get("q", ""))}"
    placeholder="search messages"></label>
  <button type="submit">Show</button>
</form>
<div class="scroll">
<table id="runs">
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
<nav id="pager">{listing["total"]} shown · {" · ".join(pager)}</nav>"""
    return document("runs", style, body)
