"""Mermaid drawings of machines, written in one place.

Every Mermaid picture of a machine (the machine, a run on it, a check's
counterexample, a test session's coverage, the change between two versions) is
:func:`mermaid` of a :class:`Drawing`: the states, entries and edges to draw, and
callbacks saying how each is labelled and classed. The syntax lives here only, so a
fix to it (escaping, nesting, styling) reaches every picture at once.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

__all__ = ["Composite", "Drawing", "mermaid", "mermaid_text"]


class _Ends(Protocol):
    @property
    def source(self) -> str: ...

    @property
    def dest(self) -> str: ...


E = TypeVar("E", bound=_Ends)

_INDENT = "    "
_NO_CLASSES: Mapping[str, str] = types.MappingProxyType({})


def mermaid_text(text: str) -> str:
    """Text Mermaid's state-diagram parser takes literally in a label.

    ``:`` starts a description, ``;`` ends a statement, ``#`` starts an entity
    code, and braces, quotes and angle brackets confuse the lexer or the HTML
    renderer; each gets a harmless stand-in.
    """
    for bad, good in (
        (":", " -"),
        (";", ","),
        ("#", "no. "),
        ("{", "("),
        ("}", ")"),
        ("[", "("),
        ("]", ")"),
        ('"', "'"),
        ("<", "lt "),
        (">", "gt "),
        ("\n", " "),
    ):
        text = text.replace(bad, good)
    return re.sub(r"\s+", " ", text).strip()


def _nothing(_: Any) -> None:
    return None


def _situation(situation: str, state: str) -> str:
    return situation


def _no_children(state: str) -> Sequence[Composite]:
    return ()


def _arrow(edge: Any) -> str:
    return "-->"


@attrs.frozen(kw_only=True)
class Drawing(Generic[E]):
    """One machine to draw and how: what it has, and a callback per kind of label.

    ``edges`` are drawn in the order given (layout engines place what they read
    first). A callback answering None leaves the thing plain.
    """

    states: Sequence[str]
    terminals: Sequence[str]
    #: ``{situation: state}``: drawn as edges from ``[*]`` (state diagrams only).
    entries: Mapping[str, str]
    edges: Sequence[E]
    edge_label: Callable[[E], str]
    #: A state's id in the drawing (a child machine's are prefixed by its parent's).
    id: Callable[[str], str] = str
    #: A state's label when it is not its id; a flowchart labels every node, by its id
    #: when this says None.
    label: Callable[[str], str | None] = _nothing
    entry_label: Callable[[str, str], str] = _situation
    #: The class (style) of a state.
    state_class: Callable[[str], str | None] = _nothing
    #: The child machines drawn inside a state, as composite states.
    children: Callable[[str], Sequence[Composite]] = _no_children
    #: A flowchart edge's arrow (``-.->`` for a dashed one).
    arrow: Callable[[E], str] = _arrow
    #: A flowchart edge's ``linkStyle``.
    edge_style: Callable[[E], str | None] = _nothing


@attrs.frozen(kw_only=True)
class Composite:
    """A child machine drawn inside a state: its box's id (when the state holds
    several), a comment naming it, and its own drawing."""

    id: str
    comment: str
    drawing: Drawing[Any]


def mermaid(
    drawing: Drawing[Any],
    *,
    flowchart: bool = False,
    comments: Sequence[str] = (),
    class_defs: Mapping[str, str] | Callable[[Collection[str]], Mapping[str, str]] = _NO_CLASSES,
    notes: Iterable[tuple[str, str]] = (),
    class_defs_last: bool = False,
) -> str:
    """``drawing`` as a Mermaid ``stateDiagram-v2``, or a ``flowchart TD`` with ``flowchart``.

    ``class_defs`` (``{class: style}``, or a callback given every class the states
    got) are written after the comments, or last with ``class_defs_last``; in a
    flowchart before the class lines. ``notes`` are ``(state, text)`` pairs. The
    top machine's states are classed in the order of ``class_defs``, then its child
    machines' states.
    """
    own: dict[str, list[str]] = {}
    nested: dict[str, list[str]] = {}
    if flowchart:
        body, links = _flowchart(drawing, own)
    else:
        body, links = _states(drawing, _INDENT, own, nested), []
    defs = class_defs({*own, *nested}) if callable(class_defs) else class_defs
    def_lines = [f"{_INDENT}classDef {name} {style}" for name, style in defs.items()]
    lines = ["flowchart TD" if flowchart else "stateDiagram-v2"]
    lines += [f"{_INDENT}%% {comment}" for comment in comments]
    if not (flowchart or class_defs_last):
        lines += def_lines
    lines += body
    lines += [f"{_INDENT}note right of {drawing.id(state)} : {text}" for state, text in notes]
    if flowchart:
        lines += def_lines
    order = {name: i for i, name in enumerate(defs)}
    for name in sorted(own, key=lambda name: order.get(name, len(order))):
        ids = sorted(own[name]) if flowchart else own[name]
        lines.append(f"{_INDENT}class {(',' if flowchart else ', ').join(ids)} {name}")
    lines += [f"{_INDENT}class {', '.join(ids)} {name}" for name, ids in nested.items()]
    if class_defs_last:
        lines += def_lines
    return "\n".join(lines + links) + "\n"


def _classed(drawing: Drawing[Any], state: str, classes: dict[str, list[str]]) -> None:
    name = drawing.state_class(state)
    if name is not None:
        classes.setdefault(name, []).append(drawing.id(state))


def _states(
    drawing: Drawing[Any],
    indent: str,
    own: dict[str, list[str]],
    nested: dict[str, list[str]],
) -> list[str]:
    """The body of a state diagram: labels, entries, edges, exits, then composites."""
    d = drawing
    lines = []
    for state in d.states:
        label = d.label(state)
        if label is not None:
            lines.append(f'{indent}state "{label}" as {d.id(state)}')
        _classed(d, state, own)
    lines += [
        f"{indent}[*] --> {d.id(state)} : {d.entry_label(situation, state)}"
        for situation, state in d.entries.items()
    ]
    lines += [f"{indent}{d.id(e.source)} --> {d.id(e.dest)} : {d.edge_label(e)}" for e in d.edges]
    lines += [f"{indent}{d.id(t)} --> [*]" for t in d.terminals]
    for state in d.states:
        composites = d.children(state)
        if not composites:
            continue
        lines.append(f"{indent}state {d.id(state)} {{")
        for child in composites:
            inner = indent + _INDENT
            if len(composites) > 1:
                lines.append(f"{inner}state {child.id} {{")
                inner += _INDENT
            lines.append(f"{inner}%% {child.comment}")
            lines += _states(child.drawing, inner, nested, nested)
            if len(composites) > 1:
                lines.append(f"{indent}{_INDENT}}}")
        lines.append(f"{indent}}}")
    return lines


def _flowchart(drawing: Drawing[Any], own: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """The nodes and edges of a flowchart, and the ``linkStyle`` lines of its edges."""
    d = drawing
    lines = []
    for state in d.states:
        node, label = d.id(state), d.label(state)
        text = node if label is None else label
        shape = f"([{text}])" if state in d.terminals else f"[{text}]"
        lines.append(f"{_INDENT}{node}{shape}")
        _classed(d, state, own)
    links = []
    for n, e in enumerate(d.edges):
        lines.append(f"{_INDENT}{d.id(e.source)} {d.arrow(e)}|{d.edge_label(e)}| {d.id(e.dest)}")
        style = d.edge_style(e)
        if style is not None:
            links.append(f"{_INDENT}linkStyle {n} {style}")
    return lines, links
