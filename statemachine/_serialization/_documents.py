"""The versioned document: ``{"format": "agentfsm/1", "type": ..., "value": ...}``.

:func:`dump` and :func:`load` (and their text forms) write and read one value
as a document; :func:`check_format` refuses one of a format this version does
not read, a newer one with the advice to upgrade.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias, TypeVar

import cattrs

from .._chain import Callbacks, LLMChain
from .._errors import ChainError, FormatError, UnknownToolError
from .._messages import (
    ContentPart,
    Message,
    MessageDelta,
    MessageExpansion,
    ToolCall,
    ToolResult,
)
from .._results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult
from .._state import AgentState
from .._tools import Tool
from .._trace import Trace, Transition
from ._binding import Binder, Models
from ._converter import converter, error_in, error_out
from ._json import parse_json
from ._packing import Packer, Unpacker, mapping

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Serializable",
    "check_format",
    "dump",
    "dump_trace",
    "dumps",
    "load",
    "load_trace",
    "loads",
]

#: The format every document is written in.
FORMAT: Final = "agentfsm/1"
FORMAT_VERSION: Final = 1
_PREFIX: Final = "agentfsm/"

_T = TypeVar("_T")

Serializable: TypeAlias = (
    Message
    | ContentPart
    | ToolCall
    | ToolResult
    | MessageExpansion
    | MessageDelta
    | ChainError
    | AgentState
    | LLMChain
    | Trace
    | Transition
    | PipelineResult
)


def check_format(data: Any, *, newest: int = FORMAT_VERSION) -> None:
    """Refuse anything but a document of a format this version reads (``agentfsm/1`` up
    to ``agentfsm/{newest}``)."""
    reads = f"{_PREFIX}{newest}"
    fmt = data.get("format") if isinstance(data, Mapping) else None
    if not isinstance(fmt, str) or not fmt.startswith(_PREFIX):
        raise FormatError(
            f"Not an agentfsm document: expected an object with 'format': {reads!r}, "
            f"got format {fmt!r}."
        )
    version = fmt[len(_PREFIX) :]
    if not (version.isascii() and version.isdigit() and len(version) < 10) or int(version) < 1:
        raise FormatError(f"Unknown document format {fmt!r}; this version reads {reads!r}.")
    if int(version) > newest:
        raise FormatError(
            f"The document is in format {fmt!r}, written by a newer agentfsm; this version "
            f"reads {reads!r}. Upgrade agentfsm to load it."
        )


# ---------------------------------------------------------------- binding


# ---------------------------------------------------------------- documents

_PLAIN: Final[Mapping[str, type]] = {
    cls.__name__: cls
    for cls in (
        Message,
        ContentPart,
        ToolCall,
        ToolResult,
        MessageExpansion,
        MessageDelta,
        AgentState,
    )
}
_RESULTS: Final[Mapping[str, type]] = {
    cls.__name__: cls for cls in (Continue, Ok, Paused, Interrupted, Failed)
}
_KINDS: Final[Mapping[str, type]] = {
    **_PLAIN,
    **_RESULTS,
    "ChainError": ChainError,
    "LLMChain": LLMChain,
    "Trace": Trace,
    "Transition": Transition,
}


def _kind(obj: object) -> str:
    for name, cls in _KINDS.items():
        if isinstance(obj, cls):
            return name
    raise TypeError(f"agentfsm does not serialize {type(obj).__name__} values")


def dump(obj: Serializable) -> dict[str, Any]:
    """``obj`` as a JSON-ready document: ``{"format": "agentfsm/1", "type": ..., "value": ...}``."""
    kind = _kind(obj)
    doc: dict[str, Any] = {"format": FORMAT, "type": kind}
    if kind in _PLAIN:
        doc["value"] = converter.unstructure(obj, _PLAIN[kind])
        return doc
    if isinstance(obj, ChainError):
        doc["value"] = error_out(obj)
        return doc
    packer = Packer()
    value: dict[str, Any]
    if isinstance(obj, LLMChain):
        value = packer.chain(obj)
    elif isinstance(obj, Trace):
        value = packer.trace(obj)
    elif isinstance(obj, Transition):
        value = packer.transition(obj)
    else:
        assert isinstance(obj, Continue | Ok | Paused | Interrupted | Failed)
        value = packer.result(obj)
    doc["messages"] = packer.message_docs()
    doc["contexts"] = packer.context_docs()
    doc["value"] = value
    return doc


def dumps(obj: Serializable, *, indent: int | None = None) -> str:
    """``obj`` as JSON text (see :func:`dump`)."""
    return json.dumps(dump(obj), indent=indent, ensure_ascii=False)


def _accepts(expected: Any, cls: type) -> bool:
    if isinstance(expected, types.UnionType) or typing.get_origin(expected) is typing.Union:
        return any(_accepts(option, cls) for option in typing.get_args(expected))
    return isinstance(expected, type) and issubclass(cls, expected)


def _expected_name(expected: Any) -> str:
    return getattr(expected, "__name__", None) or str(expected)


@typing.overload
def load(
    data: Mapping[str, Any],
    type: type[_T],
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> _T: ...
@typing.overload
def load(
    data: Mapping[str, Any],
    type: types.UnionType,
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> Any: ...
def load(
    data: Mapping[str, Any],
    type: type[_T] | types.UnionType,
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> _T | Any:
    """The value of a document :func:`dump` wrote, its model, tools and callbacks bound.

    ``type`` is the class expected (``Message``, ``LLMChain``, ``Trace``, ``Ok``...;
    a union such as ``Terminal`` is accepted too). A model not in ``models`` is an
    :class:`UnboundModel`; a tool not in ``tools`` raises :class:`UnknownToolError`
    unless ``strict=False``. Raises :class:`FormatError` on anything else amiss.
    """
    check_format(data)
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise FormatError(f"Unknown document type {kind!r}; known: {sorted(_KINDS)}.")
    if not _accepts(type, _KINDS[kind]):
        raise FormatError(f"The document holds a {kind}, not a {_expected_name(type)}.")
    binder = Binder(models, tools, callbacks, strict)
    try:
        value = data["value"]
        if kind in _PLAIN:
            return typing.cast(_T, converter.structure(value, _PLAIN[kind]))
        if kind == "ChainError":
            return typing.cast(_T, error_in(value, ChainError))
        unpacker = Unpacker(data.get("messages", ()), data.get("contexts", ()), binder)
        out: object
        if kind == "LLMChain":
            out = unpacker.chain(value)
        elif kind == "Trace":
            out = unpacker.trace(value)
        elif kind == "Transition":
            out = unpacker.transition(value)
        else:
            out = unpacker.result({**mapping(value, "a result"), "type": kind})
        return typing.cast(_T, out)
    except (FormatError, UnknownToolError):
        raise
    except cattrs.BaseValidationError as exc:
        raise FormatError(
            f"Malformed {kind} document: " + "; ".join(cattrs.transform_error(exc))
        ) from exc
    except RecursionError:
        raise FormatError(f"Malformed {kind} document: nested too deeply to read") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise FormatError(f"Malformed {kind} document: {what}") from exc


@typing.overload
def loads(
    text: str | bytes,
    type: type[_T],
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> _T: ...
@typing.overload
def loads(
    text: str | bytes,
    type: types.UnionType,
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> Any: ...
def loads(
    text: str | bytes,
    type: type[_T] | types.UnionType,
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> _T | Any:
    """The value of JSON text :func:`dumps` wrote (see :func:`load`)."""
    data = parse_json(text)
    return load(data, type, models=models, tools=tools, callbacks=callbacks, strict=strict)


def dump_trace(trace: Trace) -> dict[str, Any]:
    """A trace as a JSON-ready document, each message stored once."""
    return dump(trace)


def load_trace(
    data: Mapping[str, Any],
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> Trace:
    """A trace from a :func:`dump_trace` document; ``strict=False`` shows one without its tools."""
    return load(data, Trace, models=models, tools=tools, callbacks=callbacks, strict=strict)
