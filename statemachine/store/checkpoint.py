"""Deprecated: the names this module held live in the modules that hold their ideas.

``agentfsm.store`` exports them all but two (:func:`migrate_run` is in
:mod:`agentfsm.store.fork`, ``execute_options`` on the agent side, in
``agentfsm._resume``). Each name taken from here still works, with a
:class:`DeprecationWarning` that says where it is now.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .._resume import execute_options, restore_run, start_run
    from .checkpointer import Checkpointer, checkpoint
    from .fork import fork_run, migrate_run
    from .load import SavedRun, load_run

__all__ = [
    "Checkpointer",
    "SavedRun",
    "checkpoint",
    "execute_options",
    "fork_run",
    "load_run",
    "migrate_run",
    "restore_run",
    "start_run",
]

#: Where each name is imported from now.
_FACE: Final = {
    "Checkpointer": "agentfsm.store",
    "SavedRun": "agentfsm.store",
    "checkpoint": "agentfsm.store",
    "execute_options": "agentfsm._resume",
    "fork_run": "agentfsm.store",
    "load_run": "agentfsm.store",
    "migrate_run": "agentfsm.store.fork",
    "restore_run": "agentfsm.store",
    "start_run": "agentfsm.store",
}


def __getattr__(name: str) -> Any:
    face = _FACE.get(name)
    if face is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"agentfsm.store.checkpoint is deprecated: import {name} from {face}",
        DeprecationWarning,
        stacklevel=2,
    )
    from .. import _resume
    from . import checkpointer, fork, load

    for module in (load, checkpointer, fork, _resume):
        if name in module.__all__:
            return getattr(module, name)
    raise AssertionError(f"{name} is in no module")  # pragma: no cover
