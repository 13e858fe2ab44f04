"""Diagrams drawn from a machine table: the machine, every path through it, one run on it.

Everything here is computed from a :class:`~agentfsm.MachineTable` (by default
:data:`~agentfsm.STANDARD`), never drawn by hand, so the published pictures cannot
drift from the machine the runs move along.

One idea: a table as a picture. The Mermaid and DOT writers share the drawing order,
the shared-edge notes, the child machines' composites and the colours, so a change to
how a machine is drawn is made once for every format here (Mermaid's syntax itself is
``agentfsm._mermaid``'s).

- the machine: :func:`machine_mermaid` (``stateDiagram-v2``, renders on GitHub),
  :func:`machine_dot` (Graphviz), :func:`machine_markdown` (Mermaid + edge table);
- every path from an entry to a terminal (:func:`agentfsm.diagrams.paths`): :func:`paths_markdown`;
- one run drawn on the machine: :func:`run_mermaid`, :func:`run_dot`;
- a trace as a table: :func:`trace_markdown`, a step in words: :func:`describe_detail`;
- DOT rendered to SVG by Graphviz: :func:`render_svg`.

A state whose work is a child machine (:attr:`MachineTable.children`) is drawn as a
composite state holding the child's own states (a Mermaid ``state X { ... }``, a DOT
``cluster``), nested as deep as the machines are; a run's child runs
(:attr:`Transition.children`) are counted inside it and listed under their step.

The committed ``diagrams/`` folder is ``_files``'s.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import textwrap
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._machine import Edge, MachineTable, UnknownMachineError, machine_named
from .._mermaid import Composite, Drawing, mermaid, mermaid_text
from .._modes.standard import STANDARD
from .._paths import compress_path, loop_edges, paths, shared_edges, state_label
from .._printable import printable
from .._trace import Trace, Transition

__all__ = [
    "describe_detail",
    "machine_dot",
    "machine_markdown",
    "machine_mermaid",
    "paths_markdown",
    "render_svg",
    "run_dot",
    "run_markdown",
    "run_mermaid",
    "trace_markdown",
]

_GENERATED = "Generated from the {name} machine's table; do not edit."

# Colours shared by the Mermaid and DOT drawings.
_TERMINAL_FILL = "#eef2ff"
_TERMINAL_STROKE = "#4338ca"
_VISITED_FILL = "#fde68a"
_VISITED_STROKE = "#b45309"
_ENDED_FILL = {"ok": "#bbf7d0", "paused": "#e0f2fe", "interrupted": "#fed7aa", "error": "#fecaca"}
_ENDED_STROKE = {"ok": "#166534", "paused": "#0369a1", "interrupted": "#c2410c", "error": "#b91c1c"}
_IDLE = "#9ca3af"


# ---------------------------------------------------------------- names and text


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False) or [""]


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell, control characters spelled out (it may
    come from a saved file)."""
    return printable(text).replace("|", "\\|").replace("\n", " ")


def _dot_id(state: str) -> str:
    return '"' + state.replace('"', "'") + '"'


def _entry_names(table: MachineTable) -> dict[str, list[str]]:
    """``{state: [situation, ...]}`` for the states runs enter at."""
    out: dict[str, list[str]] = {}
    for situation, state in table.entries.items():
        out.setdefault(state, []).append(situation)
    return out


# ---------------------------------------------------------------- the machine


def _shared_groups(table: MachineTable) -> dict[tuple[str, str, str], list[str]]:
    """``{(trigger, dest, why): [source, ...]}`` for the edges several states share."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for e in sorted(shared_edges(table), key=table.edges.index):
        groups.setdefault((e.trigger, e.dest, e.why), []).append(e.source)
    return groups


def _sources_text(table: MachineTable, sources: Sequence[str]) -> str:
    """``every working state but calling`` rather than a list of six names."""
    others = [s for s in table.working if s not in sources]
    if len(others) < len(sources):
        if not others:
            return "every working state"
        return "every working state but " + _and(map(state_label, others))
    return _and(map(state_label, sources))


def _and(words: Iterable[str]) -> str:
    items = list(words)
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def machine_mermaid(table: MachineTable = STANDARD, *, width: int = 26) -> str:
    """The machine as a Mermaid ``stateDiagram-v2``: entries from ``[*]``, terminals to ``[*]``.

    Edges are labelled with their trigger and why, wrapped at ``width``
    characters. Edges many states share (``paused`` from any working state)
    carry only their trigger; their why is said once, in a note on the terminal.
    """
    shared = shared_edges(table)

    def edge_label(e: Edge) -> str:
        if e in shared:
            return e.trigger
        return e.trigger + "".join("<br/>" + part for part in _wrap(mermaid_text(e.why), width))

    notes = [
        (dest, "<br/>".join(_wrap(mermaid_text(text), width)))
        for dest, text in _shared_notes(table)
    ]
    drawing = _mermaid_drawing(table, state_label, frozenset({table.name}), None)
    return mermaid(
        attrs.evolve(drawing, edge_label=edge_label),
        comments=[f"The {table.name} machine. " + _GENERATED.format(name=table.name)],
        class_defs={
            "terminal": f"fill:{_TERMINAL_FILL},stroke:{_TERMINAL_STROKE},stroke-width:2px"
        },
        notes=notes,
    )


def _shared_notes(table: MachineTable) -> list[tuple[str, str]]:
    """``(terminal, text)``: the why of the edges many states share, said once."""
    return [
        (dest, f"{trigger} from {_sources_text(table, sources)}, when {why}")
        for (trigger, dest, why), sources in _shared_groups(table).items()
    ]


def _dot_header(table: MachineTable, title: str) -> list[str]:
    return [
        f"digraph {_dot_id(table.name)} {{",
        "    graph [rankdir=TB, nodesep=0.4, ranksep=0.45, fontname=Helvetica, fontsize=14,",
        f"           labelloc=t, label={_dot_id(title)}];",
        '    node [shape=box, style="rounded,filled", fillcolor="#ffffff", color="#374151",',
        '          fontname=Helvetica, fontsize=12, margin="0.15,0.06"];',
        '    edge [fontname=Helvetica, fontsize=9, color="#4b5563", fontcolor="#1f2937"];',
        '    start [shape=circle, style=filled, fillcolor="#111827", label="", width=0.2];',
    ]


def _dot_html(title: str, lines: Sequence[str] = (), *, bold: bool = True, size: int = 0) -> str:
    """An HTML-like DOT label: a (bold) first line, then smaller lines."""
    head = f"<B>{html.escape(title, quote=False)}</B>" if bold else html.escape(title, quote=False)
    rest = [html.escape(line, quote=False) for line in lines]
    if size and rest:
        rest = [f'<FONT POINT-SIZE="{size}">{line}</FONT>' for line in rest]
    return "<" + "<BR/>".join([head, *rest]) + ">"


def _dot_nodes(table: MachineTable, styles: Mapping[str, Mapping[str, str]]) -> list[str]:
    out = []
    for state in table.states:
        attrs_: dict[str, str] = {"label": _dot_id(state_label(state))}
        if state in table.terminals:
            attrs_.update(
                peripheries="2", fillcolor=f'"{_TERMINAL_FILL}"', color=f'"{_TERMINAL_STROKE}"'
            )
        attrs_.update(styles.get(state, {}))
        body = ", ".join(f"{k}={v}" for k, v in attrs_.items())
        out.append(f"    {_dot_id(state)} [{body}];")
    out.append("    { rank=sink; " + " ".join(f"{_dot_id(t)};" for t in table.terminals) + " }")
    return out


def _dot_edge_roles(table: MachineTable) -> dict[Edge, str]:
    """How each edge weighs in the layout.

    ``spine``: forward between working states, kept straight; ``loop``: back
    to an earlier state, laid out beside the spine; ``shared``: the same edge
    from many states, which must not pull them about; ``exit``: to a terminal.
    """
    loop = set(loop_edges(table))
    shared = shared_edges(table)
    roles = {}
    for e in table.edges:
        if e in loop:
            roles[e] = "loop"
        elif e in shared:
            roles[e] = "shared"
        elif e.dest in table.working:
            roles[e] = "spine"
        else:
            roles[e] = "exit"
    return roles


def _drawing_order(table: MachineTable) -> list[Edge]:
    """The edges, spine first: layout engines place what they read first, so the loop
    comes out as a straight column."""
    rank = {"spine": 0, "loop": 1, "exit": 2, "shared": 3}
    roles = _dot_edge_roles(table)
    return sorted(table.edges, key=lambda e: rank[roles[e]])


_LAYOUT = {"spine": ", weight=8", "loop": ", weight=0", "shared": ", weight=0", "exit": ""}


def _dot_edge(e: Edge, role: str, style: str) -> str:
    if role == "loop":
        # Laid out forwards (dest above source) and drawn backwards, so the
        # loop runs up beside the spine instead of turning the spine over.
        return (
            f"    // {e.source} -> {e.dest}, laid out reversed\n"
            f"    {_dot_id(e.dest)} -> {_dot_id(e.source)} [{style}{_LAYOUT[role]}, dir=back];"
        )
    return f"    {_dot_id(e.source)} -> {_dot_id(e.dest)} [{style}{_LAYOUT[role]}];"


def _dot_entries(table: MachineTable, styles: Mapping[str, str]) -> list[str]:
    """Edges from the start dot; only the first places it, the others do not pull it."""
    return [
        f"    start -> {_dot_id(state)} [{styles[situation]}, weight={8 if i == 0 else 0}];"
        for i, (situation, state) in enumerate(table.entries.items())
    ]


def machine_dot(table: MachineTable = STANDARD, *, width: int = 30, why: bool = True) -> str:
    """The machine as Graphviz DOT, every edge labelled with its trigger and why.

    The forward edges are kept straight so the loop reads top to bottom. Edges
    many states share (``paused`` from any working state) are dashed and carry
    only their trigger; their why is said once, under the terminal's name.
    ``why=False`` draws the triggers alone, in a larger type: a drawing narrow
    enough to read at a page's width.
    """
    roles = _dot_edge_roles(table)
    notes: dict[str, list[str]] = {}
    for dest, text in _shared_notes(table):
        if why:
            notes.setdefault(dest, []).extend(_wrap(text, width))
        else:  # the shared edges are not drawn: the terminal says where they come from
            trigger = text.split(" from ", 1)[0]
            notes.setdefault(dest, []).append(f"{trigger} from any state")
    styles = {
        t: {"label": _dot_html(state_label(t), notes.get(t, ()), size=9 if why else 13)}
        for t in table.terminals
    }
    lines = _dot_header(table, f"The {table.name} machine")
    if not why:  # read at a page's width: the type as large as the page's own
        lines = [
            line.replace("fontsize=14", "fontsize=20")
            .replace("fontsize=12", "fontsize=18")
            .replace("fontsize=9", "fontsize=15")
            for line in lines
        ]
    lines += _dot_nodes(table, styles)
    lines += _dot_entries(table, {s: f"label={_dot_id(s)}, style=bold" for s in table.entries})
    for e in table.edges:
        role = roles[e]
        if role == "shared" and not why:
            continue
        if role == "shared":
            style = f'label={_dot_html(e.trigger)}, style=dashed, color="{_IDLE}"'
        else:
            style = f"label={_dot_html(e.trigger, _wrap(e.why, width) if why else ())}"
        lines.append(_dot_edge(e, role, style))
    lines += _dot_clusters(table, state_label, str, "    ", frozenset({table.name}), None)
    lines.append("}")
    return "\n".join(lines) + "\n"


def machine_markdown(table: MachineTable = STANDARD) -> str:
    """A Markdown page: the machine in a ``mermaid`` block, then its entries and edges."""
    lines = [
        f"# The {table.name} machine",
        "",
        _GENERATED.format(name=table.name),
        "",
        "Runs enter from `[*]` at the state their chain's situation calls for, move along the "
        "edges below, and end in one of the terminals "
        + ", ".join(f"`{t}`" for t in table.terminals)
        + ". Every path is listed in [paths.md](paths.md). Below, the machine's triggers "
        "([overview.svg](overview.svg)); [machine.svg](machine.svg) gives each edge's why too.",
        "",
        f"![The {table.name} machine](overview.svg)",
        "",
        "The same machine in Mermaid:",
        "",
        "```mermaid",
        machine_mermaid(table).rstrip("\n"),
        "```",
        "",
        "## Entries",
        "",
        "| situation | enters at |",
        "|---|---|",
    ]
    lines += [f"| {_cell(s)} | `{state}` |" for s, state in table.entries.items()]
    lines += [
        "",
        "## Edges",
        "",
        "| from | trigger | to | why |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| `{e.source}` | `{e.trigger}` | `{e.dest}` | {_cell(e.why)} |" for e in table.edges
    ]
    lines += _children_markdown(table)
    return "\n".join(lines) + "\n"


def _children_markdown(table: MachineTable) -> list[str]:
    """The section saying which states run which child machines (none without children)."""
    if not table.children:
        return []
    lines = [
        "",
        "## Child machines",
        "",
        "A state below runs a whole machine as its work, drawn inside the state above; each "
        "child machine's own drawing is in its folder.",
        "",
        "| state | runs | its states | its terminals |",
        "|---|---|---|---|",
    ]
    for state, children in table.children.items():
        for child in {c.name: c for c in children}.values():
            lines.append(
                f"| `{state}` | [`{child.name}`]({child.name}/machine.md) | "
                + ", ".join(f"`{s}`" for s in child.working)
                + " | "
                + ", ".join(f"`{t}`" for t in child.terminals)
                + " |"
            )
    return lines


# ---------------------------------------------------------------- every path


def _times(n: int) -> str:
    return {0: "zero times", 1: "once", 2: "twice"}.get(n, f"{n} times")


def paths_markdown(table: MachineTable = STANDARD, *, loops: int = 1) -> str:
    """Every path as Markdown: a count per entry and terminal, then one table per entry."""
    found = paths(table, loops=loops)
    loop = loop_edges(table)
    loop_text = ", ".join(f"`{e.source}` -> `{e.dest}` (`{e.trigger}`)" for e in loop)
    lines = [
        f"# Every path of the {table.name} machine",
        "",
        _GENERATED.format(name=table.name),
        "",
        f"{len(found)} paths lead from an entry to a terminal. A path goes round the loop "
        f"({loop_text or 'none'}) at most {_times(loops)}, and visits no "
        "state twice between loops; a longer run repeats a lap shown here. Each path's situation "
        "is the why of the edge that ends each lap. A path is written as `assert_path` takes it.",
        "",
        "| entry | " + " | ".join(f"`{t}`" for t in table.terminals) + " | all |",
        "|---|" + "---:|" * (len(table.terminals) + 1),
    ]
    for situation in table.entries:
        mine = [p for p in found if p.entry == situation]
        counts = [sum(p.terminal == t for p in mine) for t in table.terminals]
        lines.append(
            f"| {_cell(situation)} | " + " | ".join(map(str, counts)) + f" | {len(mine)} |"
        )
    number = 0
    for situation, state in table.entries.items():
        lines += [
            "",
            f"## {situation} (enters at `{state}`)",
            "",
            "| # | ends | situation | path |",
            "|---:|---|---|---|",
        ]
        for p in (p for p in found if p.entry == situation):
            number += 1
            lines.append(f"| {number} | `{p.terminal}` | {_cell(p.situation)} | `{p.text}` |")
    if table.children:
        lines += ["", "## Child machines", ""]
        lines += [
            f"- `{state}` runs the `{child.name}` machine as its work: "
            f"{len(paths(child, loops=loops))} paths of its own, listed in "
            f"[{child.name}/paths.md]({child.name}/paths.md); the paths above go through "
            f"`{state}` whichever of them a child run takes."
            for state, children in table.children.items()
            for child in {c.name: c for c in children}.values()
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- one run on the machine


def _traces(traces: Trace | Iterable[Trace]) -> list[Trace]:
    return [traces] if isinstance(traces, Trace) else list(traces)


def _counts(traces: Sequence[Trace]) -> tuple[Counter[tuple[str, str, str]], Counter[str]]:
    edges: Counter[tuple[str, str, str]] = Counter()
    states: Counter[str] = Counter()
    for trace in traces:
        edges.update(trace.edges)
        states.update(trace.states)
    return edges, states


def run_mermaid(traces: Trace | Iterable[Trace], table: MachineTable = STANDARD) -> str:
    """The machine with the states and edges ``traces`` visited highlighted and counted.

    Edge labels read ``trigger x3`` for edges taken three times; visited states
    carry their visit count; the terminals reached are filled by outcome.
    Several traces (a run and its resume) are drawn on one machine.
    """
    runs = _traces(traces)
    ended = [t for t in table.terminals if t in _RunMarks(runs).ended]

    def class_defs(used: Collection[str]) -> dict[str, str]:
        more = {c[len("ended_") :] for c in used if c.startswith("ended_")} - set(ended)
        return {
            "visited": f"fill:{_VISITED_FILL},stroke:{_VISITED_STROKE},stroke-width:2px",
            "idle": f"fill:#f9fafb,stroke:{_IDLE},color:#6b7280",
        } | {
            f"ended_{t}": f"fill:{_ENDED_FILL.get(t, _VISITED_FILL)},"
            f"stroke:{_ENDED_STROKE.get(t, _VISITED_STROKE)},stroke-width:3px"
            for t in [*ended, *sorted(more)]
        }

    drawing = _mermaid_drawing(table, state_label, frozenset({table.name}), runs)
    return mermaid(drawing, class_defs=class_defs)


def run_dot(traces: Trace | Iterable[Trace], table: MachineTable = STANDARD) -> str:
    """The machine in DOT with the path of ``traces`` drawn thick and coloured, counts on edges."""
    runs = _traces(traces)
    marks = _RunMarks(runs)
    styles = {state: _run_dot_style(state, marks) for state in table.states}
    roles = _dot_edge_roles(table)
    names = _entry_names(table)
    lines = _dot_header(table, f"A run on the {table.name} machine")
    lines += _dot_nodes(table, styles)
    lines += _dot_entries(
        table,
        {
            situation: _dot_edge_style(
                situation, marks.entered[state] if names[state][0] == situation else 0
            )
            for situation, state in table.entries.items()
        },
    )
    for e in table.edges:
        style = _dot_edge_style(e.trigger, marks.taken[(e.source, e.trigger, e.dest)])
        lines.append(_dot_edge(e, roles[e], style))
    lines += _dot_clusters(
        table, state_label, str, "    ", frozenset({table.name}), _child_runs(runs)
    )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _run_dot_style(state: str, marks: _RunMarks) -> dict[str, str]:
    """How a run drawing shows ``state``: filled by outcome, visited with its count, or idle."""
    visits = marks.visits[state]
    label = _dot_html(state_label(state), [f"x{visits}"], bold=False, size=9)
    if state in marks.ended:
        return {
            "label": label,
            "fillcolor": f'"{_ENDED_FILL.get(state, _VISITED_FILL)}"',
            "color": f'"{_ENDED_STROKE.get(state, _VISITED_STROKE)}"',
            "penwidth": "2.5",
        }
    if visits:
        return {
            "label": label,
            "fillcolor": f'"{_VISITED_FILL}"',
            "color": f'"{_VISITED_STROKE}"',
            "penwidth": "2",
        }
    return {"color": f'"{_IDLE}"', "fontcolor": f'"{_IDLE}"'}


def _dot_edge_style(label: str, count: int) -> str:
    if not count:
        return f'label={_dot_id(label)}, color="{_IDLE}", fontcolor="{_IDLE}", style=dashed'
    width = 1.5 + min(count, 6) * 0.5
    return (
        f'label={_dot_id(f"{label} x{count}")}, color="{_VISITED_STROKE}", '
        f'fontcolor="{_VISITED_STROKE}", penwidth={width:g}'
    )


# ---------------------------------------------------------------- machines inside machines


def _child_runs(traces: Iterable[Trace]) -> dict[str, list[Trace]]:
    """``{state: [child trace, ...]}``: the child runs the transitions out of each state made."""
    out: dict[str, list[Trace]] = {}
    for trace in traces:
        for t in trace:
            if t.children:
                out.setdefault(t.source, []).extend(t.children)
    return out


def _child_machines(
    table: MachineTable, state: str, runs: Sequence[Trace], seen: frozenset[str]
) -> list[tuple[MachineTable, list[Trace]]]:
    """The child machines drawn inside ``state``, once each by name, with their runs.

    The declared ones (:attr:`MachineTable.children`) first, then any other
    declared machine a run's child trace names (a subagent's). A machine already
    drawn around this one (``seen``) is drawn again inside it only for the runs it
    made there (an agent's subagent on the same machine): those end, a table does not.
    """
    found: dict[str, MachineTable] = {}
    for child in table.children.get(state, ()):
        found.setdefault(child.name, child)
    for trace in runs:
        if trace.machine not in found:
            try:
                found[trace.machine] = machine_named(trace.machine, trace.machine_version)
            except UnknownMachineError:
                continue
    drawn = []
    for name, child in found.items():
        mine = [t for t in runs if t.machine == name]
        if mine or name not in seen:
            drawn.append((child, mine))
    return drawn


def _child_id(parent_id: str, child: MachineTable) -> str:
    """The drawing id of ``child`` inside the state drawn as ``parent_id``.

    A top-level state's id has no ``_`` (:func:`~agentfsm.paths.state_label`), and a
    state draws each child machine once, so ``Researching_Research_Searching`` names
    one state of one drawing, however deep.
    """
    return f"{parent_id}_{state_label(child.name)}"


def _ids_under(prefix: str) -> Callable[[str], str]:
    """The drawing ids of a child machine's states, under its :func:`_child_id`."""
    return lambda state: f"{prefix}_{state_label(state)}"


class _RunMarks:
    """Counts of one machine's runs, and the class each drawn state gets (run drawings)."""

    def __init__(self, runs: Sequence[Trace]) -> None:
        self.taken, self.visits = _counts(runs)
        self.entered = Counter(t.entry for t in runs)
        self.ended = {t.terminal for t in runs if t.terminal is not None}

    def mermaid_class(self, state: str) -> str:
        if state in self.ended:
            return f"ended_{state}"
        return "visited" if self.visits[state] else "idle"


def _mermaid_drawing(
    table: MachineTable,
    ids: Callable[[str], str],
    seen: frozenset[str],
    runs: Sequence[Trace] | None,
    *,
    inside: bool = False,
) -> Drawing[Edge]:
    """``table`` for :func:`~agentfsm._mermaid.mermaid`, child machines as composites.

    With ``runs`` (run drawings), states and edges carry their counts and states are
    classed visited, idle or ended by outcome; a child machine is drawn for the runs
    it made there. A child machine (``inside``), whose ids are prefixed, labels
    every state.
    """
    marks = _RunMarks(runs) if runs is not None else None
    names = _entry_names(table)
    nested = _child_runs(runs) if runs is not None else {}

    def label(state: str) -> str | None:
        if marks is not None and marks.visits[state]:
            return f"{state_label(state)} x{marks.visits[state]}"
        return state_label(state) if inside else None

    def state_class(state: str) -> str | None:
        if marks is not None:
            if not inside and state in marks.ended and state not in table.terminals:
                return None  # a run stopped short: the top drawing marks only its ends
            return marks.mermaid_class(state)
        return "terminal" if state in table.terminals else None

    def entry_label(situation: str, state: str) -> str:
        text = mermaid_text(situation)
        if marks is not None and marks.entered[state] and names[state][0] == situation:
            text += f" x{marks.entered[state]}"
        return text

    def edge_label(e: Edge) -> str:
        count = marks.taken[(e.source, e.trigger, e.dest)] if marks is not None else 0
        return f"{e.trigger} x{count}" if count else e.trigger

    def children(state: str) -> list[Composite]:
        if state not in table.working:
            return []
        drawn = []
        for child, child_runs in _child_machines(table, state, nested.get(state, ()), seen):
            prefix = _child_id(ids(state), child)
            inner = _mermaid_drawing(
                child,
                _ids_under(prefix),
                seen | {child.name},
                child_runs if runs is not None else None,
                inside=True,
            )
            drawn.append(
                Composite(
                    id=prefix, comment=f"{state} runs the {child.name} machine", drawing=inner
                )
            )
        return drawn

    return Drawing(
        states=table.states,
        terminals=table.terminals,
        entries=table.entries,
        edges=_drawing_order(table),
        id=ids,
        label=label,
        entry_label=entry_label,
        edge_label=edge_label,
        state_class=state_class,
        children=children,
    )


def _dot_clusters(
    table: MachineTable,
    ids: Callable[[str], str],
    node: Callable[[str], str],
    indent: str,
    seen: frozenset[str],
    runs: Mapping[str, Sequence[Trace]] | None,
) -> list[str]:
    """A ``cluster`` around each state of ``table`` that runs child machines: the
    state's own node, then one cluster per child machine with its states and edges."""
    lines: list[str] = []
    for state in table.working:
        children = _child_machines(table, state, (runs or {}).get(state, ()), seen)
        if not children:
            continue
        names = _and(child.name for child, _ in children)
        lines += [
            f"{indent}subgraph {_dot_id('cluster_' + ids(state))} {{",
            f"{indent}    label={_dot_id(f'{state} runs {names}')}; labeljust=l; fontsize=11;",
            f'{indent}    style="rounded,dashed"; color="{_TERMINAL_STROKE}";',
            f"{indent}    {_dot_id(node(state))};",
        ]
        for child, child_runs in children:
            prefix = _child_id(ids(state), child)
            lines += _dot_child(
                child,
                prefix,
                indent + "    ",
                seen | {child.name},
                child_runs if runs is not None else None,
            )
        lines.append(f"{indent}}}")
    return lines


def _dot_child(
    child: MachineTable,
    prefix: str,
    indent: str,
    seen: frozenset[str],
    runs: Sequence[Trace] | None,
) -> list[str]:
    """``child`` as a cluster of its own, its node ids prefixed by ``prefix``."""
    ids = _ids_under(prefix)
    marks = _RunMarks(runs) if runs is not None else None
    start = _dot_id(prefix + "_start")
    lines = [
        f"{indent}subgraph {_dot_id('cluster_' + prefix)} {{",
        f"{indent}    label={_dot_id(f'the {child.name} machine')}; style=rounded; "
        f'color="{_IDLE}"; fontsize=10;',
        f'{indent}    {start} [shape=circle, style=filled, fillcolor="#111827", label="", '
        "width=0.15];",
    ]
    for state in child.states:
        attrs_: dict[str, str] = {"label": _dot_id(state_label(state))}
        if state in child.terminals:
            attrs_.update(
                peripheries="2", fillcolor=f'"{_TERMINAL_FILL}"', color=f'"{_TERMINAL_STROKE}"'
            )
        if marks is not None:
            attrs_.update(_run_dot_style(state, marks))
        body = ", ".join(f"{k}={v}" for k, v in attrs_.items())
        lines.append(f"{indent}    {_dot_id(ids(state))} [{body}];")
    names = _entry_names(child)
    for situation, state in child.entries.items():
        if marks is None:
            style = f"label={_dot_id(situation)}, style=bold"
        else:
            first = names[state][0] == situation
            style = _dot_edge_style(situation, marks.entered[state] if first else 0)
        lines.append(f"{indent}    {start} -> {_dot_id(ids(state))} [{style}];")
    for e in _drawing_order(child):
        if marks is None:
            style = f"label={_dot_id(e.trigger)}"
        else:
            style = _dot_edge_style(e.trigger, marks.taken[(e.source, e.trigger, e.dest)])
        lines.append(f"{indent}    {_dot_id(ids(e.source))} -> {_dot_id(ids(e.dest))} [{style}];")
    nested = _child_runs(runs) if runs is not None else None
    lines += _dot_clusters(child, ids, ids, indent + "    ", seen, nested)
    lines.append(f"{indent}}}")
    return lines


# ---------------------------------------------------------------- traces as text


def describe_detail(transition: Transition) -> str:
    """What a step did, in a few words: the model and the tools it asked for, the tools run.

    A detail read from a file may hold anything: a value of another type than a run
    records is written as it is, never a reason to fail."""
    detail = transition.detail
    if not detail:
        return ""
    parts: list[str] = []
    rest = dict(detail)
    if "model" in rest:
        calls = rest.pop("tool_calls", None)
        text = str(rest.pop("model"))
        if calls:
            text += " -> " + _names(calls)
        elif calls is not None:
            text += " -> answer"
        parts.append(text)
    if "tools" in rest:
        tools = _names(rest.pop("tools"))
        errors = rest.pop("errors", 0)
        if tools:
            parts.append(f"ran {tools}" + (f" ({errors} failed)" if errors else ""))
    if "rejected" in rest:
        parts.append("rejected " + ", ".join(map(str, rest.pop("rejected"))))
    if "inserted" in rest:
        parts.append(f"+{rest.pop('inserted')} messages")
    parts += [f"{k}={_short(v)}" for k, v in rest.items()]
    return "; ".join(parts)


def _names(value: Any) -> str:
    """A detail's list of names, comma-separated; a value that is no list as it is."""
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return str(value)


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def trace_markdown(trace: Trace) -> str:
    """A trace as a Markdown table: one row per transition, with time and what the step did."""
    lines = [
        f"Entered at `{trace.entry}`; path `{compress_path(trace.states)}`.",
        "",
        "| # | from | trigger | to | ms | detail |",
        "|---:|---|---|---|---:|---|",
    ]
    for i, t in enumerate(trace, 1):
        lines.append(
            f"| {i} | `{t.source}` | `{t.trigger}` | `{t.dest}` | {t.elapsed * 1000:.1f} "
            f"| {_cell(describe_detail(t))} |"
        )
    for i, t in enumerate(trace, 1):
        if t.children:
            lines += ["", f"Step {i} (`{t.source}` --`{t.trigger}`--> `{t.dest}`) ran:", ""]
            lines += _child_listing(t.children, "")
    return "\n".join(lines) + "\n"


def _path_text(trace: Trace) -> str:
    """A child run's path in short, on its own machine when that is declared here."""
    try:
        table = machine_named(trace.machine, trace.machine_version)
    except UnknownMachineError:
        return trace.path
    return compress_path(trace.states, table)


def _child_listing(children: Sequence[Trace], indent: str) -> list[str]:
    """Child runs as a nested Markdown list: each run, then its moves (and their children)."""
    lines = []
    for child in children:
        lines.append(
            f"{indent}- the `{child.machine}` machine: entered at `{child.entry}`; path "
            f"`{_path_text(child)}`; ended `{child.terminal or 'not yet'}`"
        )
        for t in child:
            said = describe_detail(t)
            lines.append(
                f"{indent}    - `{t.source}` --`{t.trigger}`--> `{t.dest}` "
                f"({t.elapsed * 1000:.1f} ms)" + (f": {_cell(said)}" if said else "")
            )
            lines += _child_listing(t.children, indent + "        ")
    return lines


def run_markdown(
    traces: Trace | Iterable[Trace], table: MachineTable = STANDARD, *, title: str = "A run"
) -> str:
    """A Markdown page for a run (or a run and its resumes): drawings in Mermaid, then traces.

    With several runs, the first drawing shows them all on one machine and each
    run's section has its own.
    """
    runs = _traces(traces)

    def block(drawn: Sequence[Trace]) -> list[str]:
        return ["```mermaid", run_mermaid(drawn, table).rstrip("\n"), "```"]

    lines = [f"# {title}", ""]
    if len(runs) > 1:
        lines += [f"All {len(runs)} runs on the {table.name} machine:", "", *block(runs)]
    for i, trace in enumerate(runs, 1):
        heading = f"Run {i}" if len(runs) > 1 else "The run"
        lines += ["", f"## {heading}: ended `{trace.terminal}`", ""]
        lines += [*block([trace]), ""]
        lines.append(trace_markdown(trace).rstrip())
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- SVG


def render_svg(dot_source: str) -> str | None:
    """``dot_source`` rendered by Graphviz, or None when ``dot`` is not installed.

    The version comment Graphviz writes is stripped, so the file depends only
    on the drawing (and on Graphviz's layout).
    """
    dot = shutil.which("dot")
    if dot is None:
        return None
    svg = subprocess.run(
        [dot, "-Tsvg"], input=dot_source, capture_output=True, text=True, check=True
    ).stdout
    return re.sub(r"<!-- Generated by graphviz[^>]*-->\n", "", svg)
