"""Checks of what a user passes in: a wrong option is named before anything runs.

Each check returns the value (normalized) or raises ``TypeError`` (wrong kind)
or ``ValueError`` (right kind, wrong value) naming the option, so a typo fails
at ``Agent(...)`` or ``agent.start(...)`` and not as a failed run later.
"""

from __future__ import annotations

import collections.abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .chain import CALLBACK_NAMES, Callbacks
from .tools import Tool

if TYPE_CHECKING:
    from agentfsm.providers.base import ChatModel

__all__ = [
    "check_callbacks",
    "check_max_runs",
    "check_model",
    "check_optional",
    "check_sequence",
    "check_tools",
]

_T = TypeVar("_T")


def _kind(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})" if len(repr(value)) <= 60 else type(value).__name__


def check_model(model: Any) -> ChatModel:
    """A chat model: an object with ``async complete(messages, tools, on_delta=...)`` and a name."""
    if not callable(getattr(model, "complete", None)) or not isinstance(
        getattr(model, "name", None), str
    ):
        raise TypeError(
            f"model must be a ChatModel (an object with a name and an async "
            f"complete(messages, tools, on_delta=...)), got {_kind(model)}; "
            "see agentfsm.providers"
        )
    return model  # type: ignore[no-any-return]


def check_sequence(option: str, value: Any) -> tuple[Any, ...]:
    """A list or tuple of items (a single item or a string is a mistake)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | tuple):
        raise TypeError(f"{option} must be a list, got {_kind(value)}")
    return tuple(value)


def check_tools(tools: Any) -> tuple[Tool, ...]:
    """Tools made with ``@tool``, each name once."""
    if isinstance(tools, Tool):
        raise TypeError(f"tools must be a list of tools, got the single tool {tools.name!r}")
    out = check_sequence("tools", tools)
    for index, item in enumerate(out):
        if not isinstance(item, Tool):
            hint = "; decorate it with @tool" if callable(item) else ""
            raise TypeError(f"tools[{index}] must be a Tool, got {_kind(item)}{hint}")
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise ValueError(f"Tool names must be unique, got: {names}")
    return out


def check_callbacks(callbacks: Any) -> tuple[Callbacks, ...]:
    """Mappings of known callback names to callables."""
    out = check_sequence("callbacks", callbacks)
    for index, handlers in enumerate(out):
        if not isinstance(handlers, Mapping):
            raise TypeError(
                f"callbacks[{index}] must be a mapping of callback names to functions, "
                f"got {_kind(handlers)}"
            )
        unknown = sorted(set(handlers) - CALLBACK_NAMES)
        if unknown:
            raise ValueError(
                f"callbacks[{index}]: unknown callback name(s) {unknown}. "
                f"Known: {sorted(CALLBACK_NAMES)}"
            )
        for name, handler in handlers.items():
            if not callable(handler):
                raise TypeError(
                    f"callbacks[{index}][{name!r}] must be callable, got {_kind(handler)}"
                )
    return out


def check_max_runs(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_runs must be a positive integer, got: {value!r}")
    return value


def check_optional(option: str, value: _T, kind: Any) -> _T:
    """``value`` is None or of ``kind`` (``Callable`` checks callability)."""
    if value is None:
        return value
    if kind is collections.abc.Callable:
        if not callable(value):
            raise TypeError(f"{option} must be callable (or None), got {_kind(value)}")
    elif not isinstance(value, kind):
        raise TypeError(f"{option} must be {kind.__name__} (or None), got {_kind(value)}")
    return value
