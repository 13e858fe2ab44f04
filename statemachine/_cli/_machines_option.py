"""``--machines MODULE``: import the modules that declare a user's own machines.

A saved run names its machine; the machine is found only once the module that
declares it is imported. ``view``, ``studio`` and ``runs`` ``show``, ``fork``,
``compare`` and ``export`` take the modules
as ``--machines MODULE`` (repeatable) or ``AGENTFSM_MACHINES`` (comma-separated),
importable from the current folder (put on ``sys.path`` after the installed packages).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .._machine import UnknownMachineError

__all__ = ["ENV", "add_machines_option", "import_machines"]

#: The environment variable naming machine modules, comma-separated.
ENV = "AGENTFSM_MACHINES"


def add_machines_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--machines MODULE`` (repeatable) to ``parser``."""
    parser.add_argument(
        "--machines",
        metavar="MODULE",
        action="append",
        default=None,
        help=f"import MODULE, which declares machines runs ran on (repeatable; also ${ENV})",
    )


def import_machines(modules: Sequence[str] | None) -> list[str]:
    """Import ``modules`` and those of ``$AGENTFSM_MACHINES``; the names imported.

    A module that cannot be imported is an :class:`UnknownMachineError`: the
    machines it would declare stay unknown."""
    names = [m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()]
    names += [m for m in modules or () if m not in names]
    if names and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise UnknownMachineError(
                f"cannot import {name!r} for --machines: {type(exc).__name__}: {exc}"
            ) from exc
    return names
