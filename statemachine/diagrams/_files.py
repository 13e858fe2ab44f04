"""The committed ``diagrams/`` folder: what it holds, which files are stale, writing them.

The files are drawn by :mod:`agentfsm.diagrams` from the machine tables: the
standard machine's at the top of the folder, each LangChain mode's machine in a
sub-folder of its name (``while_needs_response/machine.mmd``), and a machine's child
machines (states whose work is a whole machine) in sub-folders of theirs.
``agentfsm diagrams`` writes them and ``agentfsm diagrams --check`` (run by CI)
fails when one differs from what the tables draw.
"""

from __future__ import annotations

import pathlib

from .._machine import MachineTable
from .._modes.standard import STANDARD
from ._writers import machine_dot, machine_markdown, machine_mermaid, paths_markdown, render_svg

__all__ = ["diagram_files", "stale_files", "write_files"]


def diagram_files(table: MachineTable = STANDARD, *, svg: bool = True) -> dict[str, str]:
    """The files of the ``diagrams/`` folder, by name: what ``agentfsm diagrams`` writes.

    ``overview.dot`` draws the triggers alone, narrow enough to read at a page's width.
    ``machine.svg`` and ``overview.svg`` are included only when ``svg`` is true and
    Graphviz is installed.
    """
    files = {
        "machine.mmd": machine_mermaid(table),
        "machine.md": machine_markdown(table),
        "machine.dot": machine_dot(table),
        "overview.dot": machine_dot(table, why=False),
        "paths.md": paths_markdown(table),
    }
    if svg:
        for name in ("machine", "overview"):
            rendered = render_svg(files[f"{name}.dot"])
            if rendered is not None:
                files[f"{name}.svg"] = rendered
    for child in _descendants(table):
        for name, text in diagram_files(child, svg=svg).items():
            files.setdefault(f"{child.name}/{name}", text)
    return files


def _descendants(table: MachineTable) -> list[MachineTable]:
    """The child machines ``table``'s states run (:attr:`MachineTable.children`), once each
    by name: their files go in a folder of their name, which the parent's pages link to."""
    found: dict[str, MachineTable] = {}
    for children in table.children.values():
        for child in children:
            if child.name != table.name:
                found.setdefault(child.name, child)
    return list(found.values())


def _same(path: pathlib.Path, text: str) -> bool:
    return path.is_file() and path.read_text(encoding="utf-8") == text


def stale_files(folder: pathlib.Path, files: dict[str, str]) -> list[str]:
    """The names (paths in ``folder``) of ``files`` that are missing there or differ."""
    return [name for name, text in files.items() if not _same(folder / name, text)]


def write_files(folder: pathlib.Path, files: dict[str, str]) -> list[pathlib.Path]:
    """Write the files of ``files`` that differ (creating ``folder`` and its sub-folders);
    the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in stale_files(folder, files):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[name], encoding="utf-8")
        written.append(path)
    return written
