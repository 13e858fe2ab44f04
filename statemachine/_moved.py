"""The last release's import paths, answered for one more release with a warning.

Modules that became private rooms behind a face (``agentfsm.machine`` is now
``agentfsm._machine`` behind ``agentfsm``) are still importable by their old
names, and a face still answers a name it no longer exports. Each such name
raises a :class:`DeprecationWarning` naming where it lives now: its face, or
nowhere public when it became an internal.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.machinery
import inspect
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

#: The faces, in the order a name's new home is looked for.
FACES: Final = (
    "agentfsm",
    "agentfsm.steps",
    "agentfsm.providers",
    "agentfsm.store",
    "agentfsm.diagrams",
    "agentfsm.versions",
    "agentfsm.testing",
)

#: Old module -> the private module that holds its code now (or several, in order).
OLD_MODULES: Final = {
    "agentfsm.agent": "agentfsm._agent",
    "agentfsm.approval": "agentfsm._approval",
    "agentfsm.callbacks": "agentfsm._callbacks",
    "agentfsm.chain": "agentfsm._chain",
    "agentfsm.cli": "agentfsm._cli",
    "agentfsm.console": "agentfsm.diagrams._console",
    "agentfsm.diagram_files": "agentfsm.diagrams._files agentfsm._cli._main",
    "agentfsm.effects": "agentfsm._effects",
    "agentfsm.errors": "agentfsm._errors",
    "agentfsm.hooks": "agentfsm._hooks",
    "agentfsm.machine": "agentfsm._machine",
    "agentfsm.messages": "agentfsm._messages",
    "agentfsm.middleware": "agentfsm._middleware",
    "agentfsm.middleware.base": "agentfsm._middleware.base",
    "agentfsm.middleware.human_in_the_loop": "agentfsm._middleware.human_in_the_loop",
    "agentfsm.modes": "agentfsm._modes",
    "agentfsm.modes.langchain": "agentfsm._modes.langchain",
    "agentfsm.modes.standard": "agentfsm._modes.standard",
    "agentfsm.options": "agentfsm._options",
    "agentfsm.output": "agentfsm._output",
    "agentfsm.paths": "agentfsm._paths",
    "agentfsm.results": "agentfsm._results",
    "agentfsm.run": "agentfsm._run",
    "agentfsm.serialization": "agentfsm._serialization",
    "agentfsm.subagents": "agentfsm._subagents",
    "agentfsm.tools": "agentfsm._tools",
    "agentfsm.trace": "agentfsm._trace",
    "agentfsm.view": "agentfsm._view",
    "agentfsm.store.base": "agentfsm.store._base",
    "agentfsm.store.checkpoint": "agentfsm.store agentfsm.store._fork agentfsm._resume",
    "agentfsm.store.checkpointer": "agentfsm.store._checkpointer",
    "agentfsm.store.fork": "agentfsm.store._fork",
    "agentfsm.store.load": "agentfsm.store._load",
    "agentfsm.store.sqlite": "agentfsm.store._sqlite",
    "agentfsm.providers.anthropic": "agentfsm.providers._anthropic",
    "agentfsm.providers.base": "agentfsm._chat_model",
    "agentfsm.providers.fallback": "agentfsm.providers._fallback",
    "agentfsm.providers.openai": "agentfsm.providers._openai",
    "agentfsm.providers.openai_responses": "agentfsm.providers._responses",
    "agentfsm.providers.registry": "agentfsm.providers._registry",
    "agentfsm.providers.rules": "agentfsm.providers._rules",
    "agentfsm.providers.scripted": "agentfsm.providers._scripted",
    "agentfsm.providers.wrapper": "agentfsm.providers._wrapper",
}


def show_at(face: str, namespace: dict[str, Any]) -> None:
    """Set ``__module__`` of the face's classes and functions to the face, so reprs, docs
    and pickles show the public path rather than the private room that holds them."""
    compiled: dict[str, types.CodeType] = {}  # a face's classes share most of their hints
    for name in namespace["__all__"]:
        show(face, namespace[name], namespace, compiled)


def show(
    face: str,
    value: object,
    namespace: dict[str, Any],
    compiled: dict[str, types.CodeType] | None = None,
) -> None:
    """:func:`show_at` for one value (a class or function from a private room)."""
    if not isinstance(value, (type, types.FunctionType)):
        return
    if any(part.startswith("_") for part in value.__module__.split(".")):
        if isinstance(value, type) and not _annotations_resolved(
            value, namespace, {} if compiled is None else compiled
        ):
            return  # its hints name what only its own module can see
        value.__module__ = face


def _annotations_resolved(
    cls: type, face: dict[str, Any], compiled: dict[str, types.CodeType]
) -> bool:
    """Resolve the class's own string annotations where they were written.

    ``typing.get_type_hints`` (and so cattrs, attrs and hypothesis) reads a class's
    string annotations in the namespace of its ``__module__``: once that names the
    face, the private room's names are out of sight. Resolved here first (a name its
    room imports only for type checking is looked up in the face), they no longer
    need it. False when one cannot be resolved: that class keeps its room's name.
    """
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(hint, str) for hint in own.values()):
        return True
    room = vars(sys.modules[cls.__module__])
    hints = {}
    try:  # what get_type_hints does for the class's own hints, at a fraction of its cost
        for name, hint in own.items():
            if isinstance(hint, str) and hint.isidentifier():  # most are: no compiling
                found = face.get(hint, room.get(hint, _MISSING))
                hint = getattr(builtins, hint) if found is _MISSING else found
            elif isinstance(hint, str):
                code = compiled.get(hint)
                if code is None:
                    code = compiled[hint] = compile(hint, "<annotation>", "eval")
                hint = eval(code, room, face)
            hints[name] = hint
    except Exception:
        return False
    cls.__annotations__ = hints
    return True


def new_home(value: object, name: str) -> str | None:
    """The face that exports ``value`` under ``name`` now, if one does."""
    for face in FACES:
        module = sys.modules.get(face) or importlib.import_module(face)
        if name in getattr(module, "__all__", ()) and _lookup(module, name) is value:
            return face
    return None


def _warn(old: str, name: str, value: object) -> None:
    home = new_home(value, name)
    advice = f"import it from {home}" if home else "it is internal now and will be removed"
    warnings.warn(f"{old}.{name} is deprecated: {advice}", DeprecationWarning, stacklevel=3)


_MISSING: Final = object()


def _lookup(holder: types.ModuleType, name: str) -> Any:
    """``holder``'s own ``name`` (or one it exports lazily), never through its forwarding."""
    if name in vars(holder):
        return vars(holder)[name]
    if name in getattr(holder, "__all__", ()):
        return getattr(holder, name)
    return _MISSING


def forward(old: str, holders: Sequence[str], names: frozenset[str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers the last release's ``names`` from ``holders``."""

    def __getattr__(name: str) -> Any:
        if name in names:
            for holder in holders:
                value = _lookup(importlib.import_module(holder), name)
                if value is not _MISSING:
                    _warn(old, name, value)
                    return value
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__


class _OldModule:
    """Makes an old module path a module whose every name warns, then answers (a loader;
    not an ``importlib.abc`` subclass: that module costs ``import agentfsm`` a tenth)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        holders = [importlib.import_module(h) for h in OLD_MODULES[module.__name__].split()]
        module.__dict__["__all__"] = sorted({n for h in holders for n in getattr(h, "__all__", ())})
        module.__path__ = []  # old packages (middleware, modes) had modules of their own
        module.__getattr__ = _forward_all(module.__name__, holders)  # type: ignore[method-assign]


def _forward_all(old: str, holders: Sequence[types.ModuleType]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        if not name.startswith("__"):
            for holder in holders:
                value = _lookup(holder, name)
                if value is not _MISSING:
                    _warn(old, name, value)
                    return value
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__


class _OldPaths:
    """Finds the old module paths (and only them)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in OLD_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", _OldModule()))


class _Face(types.ModuleType):
    """A face whose exported names an old module path of the same name never replaces.

    Importing a submodule sets it as an attribute of its package: importing the old
    ``agentfsm.store.load`` would replace the face's :func:`~agentfsm.store.load`.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            isinstance(value, types.ModuleType)
            and value.__name__ in OLD_MODULES
            and name in getattr(self, "__all__", ())
        ):
            return
        super().__setattr__(name, value)


def install() -> None:
    """Put the finder in front once (importing ``agentfsm`` calls this), and keep each
    face's names from the old module paths of the same name."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())


def keep_names(face: str) -> None:
    """Make module ``face`` a :class:`_Face` (a face's last line calls this)."""
    sys.modules[face].__class__ = _Face
