"""Machines and runs drawn: Mermaid, DOT and Markdown, the terminal, a run's page.

Everything is drawn from a machine's table, so a run's path is always a path of
the published drawing. ``machine_*`` draw a whole machine, ``run_*`` the path a run
took over it, :func:`paths` lists every path of a machine with the situation
that takes it; :func:`diagram_files` is what ``agentfsm diagrams`` writes;
:func:`watch`/:func:`summary`/:func:`trace_table` show runs in a terminal;
:func:`page` is a run's self-contained HTML page.
"""

from .._moved import forward, show_at
from .._paths import compress_path, paths
from .._view import page
from ._console import summary, trace_table, watch
from ._files import diagram_files, stale_files, write_files
from ._writers import (
    machine_dot,
    machine_markdown,
    machine_mermaid,
    paths_markdown,
    run_dot,
    run_markdown,
    run_mermaid,
    trace_markdown,
)

__all__ = [
    "compress_path",
    "diagram_files",
    "machine_dot",
    "machine_markdown",
    "machine_mermaid",
    "page",
    "paths",
    "paths_markdown",
    "run_dot",
    "run_markdown",
    "run_mermaid",
    "stale_files",
    "summary",
    "trace_markdown",
    "trace_table",
    "watch",
    "write_files",
]

#: The last release's names this face no longer exports, kept one more release.
__getattr__ = forward(
    __name__,
    ("agentfsm.diagrams._writers", "agentfsm.diagrams._console"),
    frozenset({"RunView", "describe_detail", "render_svg"}),
)
show_at(__name__, globals())
