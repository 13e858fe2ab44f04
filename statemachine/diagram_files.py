"""The committed ``diagrams/`` folder: what it holds, which files are stale, writing them.

The files are drawn by :mod:`agentfsm.diagrams` from the machine table;
``agentfsm diagrams`` writes them and ``agentfsm diagrams --check`` (run by CI)
fails when one differs from what the table draws.
"""

from __future__ import annotations

import pathlib

from .diagrams import machine_dot, machine_markdown, machine_mermaid, paths_markdown, render_svg
from .machine import MachineTable
from .modes.standard import STANDARD

__all__ = ["diagram_files", "stale_files", "write_files"]


def diagram_files(table: MachineTable = STANDARD, *, svg: bool = True) -> dict[str, str]:
    """The files of the ``diagrams/`` folder, by name: what ``agentfsm diagrams`` writes.

    ``machine.svg`` is included only when ``svg`` is true and Graphviz is installed.
    """
    files = {
        "machine.mmd": machine_mermaid(table),
        "machine.md": machine_markdown(table),
        "machine.dot": machine_dot(table),
        "paths.md": paths_markdown(table),
    }
    if svg:
        rendered = render_svg(files["machine.dot"])
        if rendered is not None:
            files["machine.svg"] = rendered
    return files


def _same(path: pathlib.Path, text: str) -> bool:
    return path.is_file() and path.read_text(encoding="utf-8") == text


def stale_files(folder: pathlib.Path, files: dict[str, str]) -> list[str]:
    """The names of ``files`` that are missing from ``folder`` or differ there."""
    return [name for name, text in files.items() if not _same(folder / name, text)]


def write_files(folder: pathlib.Path, files: dict[str, str]) -> list[pathlib.Path]:
    """Write the files of ``files`` that differ (creating ``folder``); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in stale_files(folder, files):
        (folder / name).write_text(files[name], encoding="utf-8")
        written.append(folder / name)
    return written
