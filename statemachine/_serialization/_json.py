"""JSON text: read with one clear error, written compactly and fast.

A run writes a reply, a tool message and a handful of rows per model call, so
the shapes it makes are written here as text directly, the converter's output
to the byte, and anything unusual goes through the converter.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final

from .._errors import FormatError
from .._messages import Message, Role, ToolCall, ToolResult
from ._converter import converter

__all__ = ["compact_any", "compact_json", "message_text", "parse_json"]

_encoder: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _compact_encoder() -> Callable[[Any], str]:
    """Compact JSON text of plain data, the C encoder built once (``json.dumps`` with
    options builds one per call). It does not look for cycles: the callers' data has none
    or is retried through :func:`compact_any`'s checked path."""
    try:
        # (markers, default, encoder, indent, key/item separators, sort_keys, skipkeys, allow_nan)
        encode = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
            None,
            _encoder.default,
            json.encoder.encode_basestring,
            None,
            ":",
            ",",
            False,
            False,
            True,
        )
        probe: Any = {"a": [1, 2.5, None, True, "é\n"]}
        if "".join(encode(probe, 0)) == _encoder.encode(probe):
            return lambda value: "".join(encode(value, 0))
    except Exception:  # no C accelerator, or another signature: the checked encoder
        pass
    return _encoder.encode


#: Compact JSON text (``separators=(",", ":")``, ``ensure_ascii=False``).
compact_json: Final = _compact_encoder()


def compact_any(value: Mapping[str, Any]) -> str:
    """A mapping of ``Any`` values as compact JSON: plain JSON data as is (the converter
    would hand it back unchanged), anything else (or a cycle) through the converter."""
    try:
        return compact_json(value)
    except (TypeError, ValueError, RecursionError):
        return _encoder.encode(converter.unstructure(dict(value)))


def message_text(message: Message) -> str:
    """A message's document as compact JSON text, the converter's to the byte.

    A run writes a reply and a tool message per model call, so the shapes a run makes
    (text, tool calls, plain tool results, metadata of JSON values) are written here
    directly; any other part (content parts, thinking, expansions, interrupts, values
    that are not JSON) sends the whole message through the converter.
    """
    content = message.content
    if (content is not None and content.__class__ is not str) or message.thinking:
        return _converted_message(message)
    try:
        text = '{"role":' + _ROLES[message.role]
        if content is not None:
            text += ',"content":' + _string(content)
        if message.tool_calls:
            text += ',"tool_calls":[' + ",".join([_call_text(c) for c in message.tool_calls]) + "]"
        if message.tool_results:
            results = [_result_text(r) for r in message.tool_results]
            text += ',"tool_results":[' + ",".join(results) + "]"
        if message.status != "complete":
            text += ',"status":' + compact_json(message.status)
        if message.metadata:
            text += ',"metadata":' + compact_json(message.metadata)
    except (_Unusual, KeyError, TypeError, ValueError, RecursionError):
        return _converted_message(message)
    return text + "}"


class _Unusual(Exception):
    """A part :func:`_message_text` leaves to the converter."""


def _converted_message(message: Message) -> str:
    return compact_json(converter.unstructure(message, Message))


#: A string as JSON text, as :data:`compact_json` writes it, for a fraction of its cost;
#: anything but a string is a TypeError (and the message goes through the converter).
_string: Final[Callable[[str], str]] = json.encoder.encode_basestring


def _call_text(call: ToolCall) -> str:
    text = '{"call_id":' + _string(call.call_id) + ',"name":' + _string(call.name)
    if call.arguments:
        text += ',"arguments":' + compact_json(call.arguments)
    if call.invalid_arguments is not None:
        text += ',"invalid_arguments":' + compact_json(call.invalid_arguments)
    return text + "}"


def _result_text(result: ToolResult) -> str:
    content = result.content
    if (
        (content is not None and content.__class__ is not str)
        or result.is_interrupt
        or result.interrupt_data is not None
        or result.state_updates is not None
        or result.expansion is not None
    ):
        raise _Unusual
    text = (
        '{"tool_call_id":'
        + _string(result.tool_call_id)
        + ',"name":'
        + _string(result.name)
        + ',"content":'
        + ("null" if content is None else _string(content))
    )
    if result.is_error is True:
        return text + ',"is_error":true}'
    if result.is_error is not False:
        raise _Unusual
    return text + "}"


_ROLES: Final = {role: compact_json(role) for role in typing.get_args(Role)}


def parse_json(text: str | bytes | bytearray) -> Any:
    """JSON text as data; anything but JSON (or JSON nested too deeply) is a FormatError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise FormatError("Not readable: the JSON is nested too deeply") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, bad UTF-8, not text
        raise FormatError(f"Not JSON: {exc}") from exc
