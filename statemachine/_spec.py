"""``MODULE:ATTR`` on the command line: the one way the commands import what they are named."""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any


def import_attribute(
    spec: str, what: str, error: Callable[[str], Exception], *, from_cwd: bool = True
) -> Any:
    """The value ``spec`` (``module:attribute``, dotted) names, for the option ``what``.

    With ``from_cwd`` a module in the current folder is importable: the folder goes on ``sys.path``
    after the installed packages, never in front of them, so a file lying there
    cannot shadow one of them. A mistake raises ``error(message)``.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise error(f"{what} takes MODULE:ATTR, got {spec!r}")
    if from_cwd and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"cannot import {module_name!r} for {what}: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(value, part):
            close = difflib.get_close_matches(part, [n for n in dir(value) if n[:2] != "__"], 1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise error(f"{module_name!r} has no attribute {attribute!r} for {what}{hint}")
        value = getattr(value, part)
    return value
