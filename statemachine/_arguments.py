"""Tool arguments: the JSON schema of a parameter's type hint, and the check that matches it.

The schema the model sees and the check its arguments pass are made from the
same hints. Plain JSON parameters are checked in place (the common, fast
case, :func:`checker`); anything structured (containers with item types, attrs
classes, dataclasses, TypedDicts, enums, datetimes, unions) is structured by
one strict cattrs converter into the Python value the tool declared
(:func:`structure`), refusing what the schema refuses and naming the path of
each bad value.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from ._errors import AgentfsmError

if typing.TYPE_CHECKING:
    import cattrs

__all__ = [
    "Unsupported",
    "checker",
    "describe",
    "is_json",
    "is_plain",
    "schema_for",
    "shown",
    "strip_annotated",
    "structure",
    "type_ok",
]

# ---------------------------------------------------------------- schema


_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}
_PLAIN = (str, int, float, bool)
_FORMATS: dict[type, str] = {
    datetime.datetime: "date-time",
    datetime.date: "date",
    datetime.time: "time",
}
_NONE = type(None)


class Unsupported(AgentfsmError, TypeError):
    """A hint with no JSON form; ``from_function`` names the tool and parameter."""


def strip_annotated(hint: Any) -> Any:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint


def is_plain(hint: Any) -> bool:
    """A hint the in-place check covers exactly: a JSON scalar, a Literal, or Any (or None)."""
    hint = strip_annotated(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [strip_annotated(a) for a in typing.get_args(hint) if a is not _NONE]
        return len(options) == 1 and options[0] in _PLAIN
    return (
        hint in _PLAIN
        or hint is Any
        or hint is _NONE
        or hint is inspect.Parameter.empty
        or origin is Literal
    )


def _literal_schema(values: Sequence[Any]) -> dict[str, Any]:
    kinds = {_JSON_TYPES.get(type(v)) for v in values}
    schema: dict[str, Any] = {"enum": list(values)}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


def _fields_schema(
    hints: Mapping[str, Any], required: Sequence[str], defaults: Mapping[str, Any], seen: Any
) -> dict[str, Any]:
    properties = {}
    for name, hint in hints.items():
        schema = schema_for(hint, seen)
        if name in defaults and is_json(defaults[name]):
            schema["default"] = defaults[name]
        properties[name] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    out["additionalProperties"] = False
    return out


_FACTORY: Final[type] = type(attrs.Factory(list))


def _typeddict_keys(cls: type) -> tuple[dict[str, Any], set[str]]:
    """A TypedDict's value types and required keys, read from its (possibly string) hints."""
    hints = typing.get_type_hints(cls, include_extras=True)
    required = set()
    for key, hint in hints.items():
        marker = typing.get_origin(hint)
        total = getattr(cls, "__total__", True)
        if marker is typing.Required or (marker is not typing.NotRequired and total):
            required.add(key)
        if marker in (typing.Required, typing.NotRequired):
            hints[key] = typing.get_args(hint)[0]
    return hints, required


def _class_schema(cls: type, seen: tuple[type, ...]) -> dict[str, Any] | None:
    """The object schema of an attrs class, dataclass or TypedDict; None for other classes."""
    if cls in seen:
        raise Unsupported(f"{cls.__name__} refers to itself; recursive types have no schema")
    seen = (*seen, cls)
    if attrs.has(cls):
        fields = [f for f in attrs.fields(cls) if f.init]
        hints = typing.get_type_hints(cls, include_extras=True)
        schema = _fields_schema(
            {f.name: hints.get(f.name, Any) for f in fields},
            [f.name for f in fields if f.default is attrs.NOTHING],
            {f.name: f.default for f in fields if not isinstance(f.default, _FACTORY)},
            seen,
        )
    elif dataclasses.is_dataclass(cls):
        dfields = [f for f in dataclasses.fields(cls) if f.init]
        hints = typing.get_type_hints(cls, include_extras=True)
        schema = _fields_schema(
            {f.name: hints.get(f.name, Any) for f in dfields},
            [
                f.name
                for f in dfields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ],
            {f.name: f.default for f in dfields if f.default is not dataclasses.MISSING},
            seen,
        )
    elif typing.is_typeddict(cls):
        hints, required = _typeddict_keys(cls)
        schema = _fields_schema(hints, sorted(required, key=list(hints).index), {}, seen)
    else:
        return None
    doc = cls.__dict__.get("__doc__")
    if doc and not doc.startswith(cls.__name__ + "("):  # not the generated signature
        schema["description"] = inspect.cleandoc(doc).split("\n\n")[0]
    return schema


def schema_for(hint: Any, seen: tuple[type, ...] = ()) -> dict[str, Any]:
    """The JSON schema of one annotation; a type with no JSON form raises ``Unsupported``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = schema_for(args[0], seen)
        for meta in args[1:]:
            if isinstance(meta, str):
                schema["description"] = meta
        return schema
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint is _NONE or hint is None:
        return {"type": "null"}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not _NONE]
        schema = (
            schema_for(options[0], seen)
            if len(options) == 1
            else {"anyOf": [schema_for(a, seen) for a in options]}
        )
        if len(options) < len(args):
            if isinstance(schema.get("type"), str) and "enum" not in schema:
                schema["type"] = [schema["type"], "null"]
            else:
                schema = {"anyOf": [*schema.get("anyOf", [schema]), {"type": "null"}]}
        return schema
    if origin is Literal:
        return _literal_schema(args)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _literal_schema([m.value for m in hint])
    if hint in _FORMATS:
        return {"type": "string", "format": _FORMATS[hint]}
    base = origin or hint
    if not isinstance(base, type):
        raise Unsupported(f"{hint!r} has no JSON schema")
    if issubclass(base, bool):
        return {"type": "boolean"}
    if base in _PLAIN:
        return {"type": _JSON_TYPES[base]}
    if issubclass(base, tuple) and args and args[-1] is not Ellipsis:
        items = [schema_for(a, seen) for a in args]
        return {
            "type": "array",
            "prefixItems": items,
            "minItems": len(items),
            "maxItems": len(items),
        }
    if base in (set, frozenset) or _is_abc(base, collections.abc.Set):
        return {
            "type": "array",
            "uniqueItems": True,
            **({"items": schema_for(args[0], seen)} if args else {}),
        }
    if base in (list, tuple) or base is Sequence or base is collections.abc.MutableSequence:
        return {"type": "array", **({"items": schema_for(args[0], seen)} if args else {})}
    if base is dict or base in (Mapping, collections.abc.MutableMapping):
        if args and strip_annotated(args[0]) is not str:
            raise Unsupported(f"{hint!r} has keys that are not strings; JSON object keys are")
        return {
            "type": "object",
            **({"additionalProperties": schema_for(args[1], seen)} if args else {}),
        }
    found = _class_schema(base, seen)
    if found is None:
        raise Unsupported(
            f"{getattr(base, '__qualname__', base)} has no JSON schema; use a JSON type, an "
            "attrs class, a dataclass, a TypedDict, an Enum, a Literal or a datetime"
        )
    return found


def is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _is_abc(base: type, abc: type) -> bool:
    try:
        return issubclass(base, abc)
    except TypeError:
        return False


# ---------------------------------------------------------------- structuring


class _Mismatch(ValueError):
    """A value the schema refuses; its text follows the path: ``must be integer, got "2"``."""


def shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _strict(kinds: tuple[type, ...], name: str, cast: Callable[[Any], Any] | None = None) -> Any:
    def structure(value: Any, _: Any) -> Any:
        if type(value) not in kinds:
            raise _Mismatch(f"must be {name}, got {shown(value)}")
        return value if cast is None else cast(value)

    return structure


def _iso(kind: type, name: str) -> Any:
    def structure(value: Any, _: Any) -> Any:
        if type(value) is str:
            try:
                return kind.fromisoformat(value)  # type: ignore[attr-defined]
            except ValueError:
                pass
        raise _Mismatch(f"must be an ISO 8601 {name} string, got {shown(value)}")

    return structure


def _choice(values: Sequence[Any], out: Sequence[Any]) -> Any:
    def structure(value: Any, _: Any) -> Any:
        for given, result in zip(values, out, strict=True):
            if value == given and type(value) is type(given):
                return result
        raise _Mismatch(f"must be one of {', '.join(shown(v) for v in values)}, got {shown(value)}")

    return structure


def _union(hint: Any) -> Any:
    options = typing.get_args(hint)
    described = describe(schema_for(hint))

    def structure(value: Any, _: Any) -> Any:
        if value is None and _NONE in options:
            return None
        real = [o for o in options if o is not _NONE]
        if len(real) == 1:
            return _converter().structure(value, real[0])
        for option in real:
            try:
                return _converter().structure(value, option)
            except Exception:
                continue
        raise _Mismatch(f"must be {described}, got {shown(value)}")

    return structure


def _typeddict(cls: type) -> Any:
    """TypedDicts structured as their schema says (string hints and NotRequired included)."""
    hints, required = _typeddict_keys(cls)

    def structure(value: Any, _: Any) -> Any:
        # import time: cattrs loads with the first tool call
        from cattrs.errors import (
            AttributeValidationNote,
            ClassValidationError,
            ForbiddenExtraKeysError,
        )

        if not isinstance(value, Mapping):
            raise _Mismatch(f"must be object, got {shown(value)}")
        extra = [k for k in value if k not in hints]
        if extra:
            raise ForbiddenExtraKeysError("", cls, set(extra))
        out, errors = {}, []
        for key, hint in hints.items():
            try:
                if key not in value:
                    if key in required:
                        raise KeyError(key)
                    continue
                out[key] = _converter().structure(value[key], hint)
            except Exception as exc:
                exc.__notes__ = [AttributeValidationNote(f"Structuring {key}", key, hint)]
                errors.append(exc)
        if errors:
            raise ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        return out

    return structure


@functools.cache
def _converter() -> cattrs.Converter:
    """The one strict converter of tool arguments, built on first use: cattrs is imported
    then, so importing agentfsm stays cheap."""
    # import time: cattrs loads with the first tool call
    import cattrs

    conv = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
    conv.register_structure_hook(str, _strict((str,), "string"))
    conv.register_structure_hook(int, _strict((int,), "integer"))
    conv.register_structure_hook(float, _strict((int, float), "number", float))
    conv.register_structure_hook(bool, _strict((bool,), "boolean"))
    conv.register_structure_hook(_NONE, _strict((_NONE,), "null"))
    for kind, name in _FORMATS.items():
        conv.register_structure_hook(kind, _iso(kind, name))
    conv.register_structure_hook_factory(
        lambda t: typing.get_origin(t) is Literal,  # type: ignore[comparison-overlap]
        lambda t: _choice(typing.get_args(t), typing.get_args(t)),
    )
    conv.register_structure_hook_factory(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum),
        lambda t: _choice([m.value for m in t], list(t)),
    )
    conv.register_structure_hook_factory(
        lambda t: typing.get_origin(t) in (typing.Union, types.UnionType),  # type: ignore[comparison-overlap]
        _union,
    )
    conv.register_structure_hook_factory(typing.is_typeddict, _typeddict)
    return conv


def _format_error(exc: BaseException, _: Any) -> str:
    # import time: cattrs loads with the first tool call
    from cattrs.errors import ForbiddenExtraKeysError

    if isinstance(exc, _Mismatch):
        return str(exc)
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"has unknown field(s) {sorted(exc.extra_fields)}"
    if isinstance(exc, KeyError):
        return "is missing (required)"
    if isinstance(exc, TypeError) and "iterable" in str(exc):
        return "must be an array"
    return f"is invalid ({type(exc).__name__}: {exc})"


def structure(name: str, value: Any, hint: Any) -> tuple[Any, list[str]]:
    """``value`` structured as ``hint``, or the problems, each naming its path."""
    try:
        return _converter().structure(value, hint), []
    except RecursionError:
        return None, [f"parameter {name!r} is nested too deeply"]
    except Exception as exc:
        # import time: cattrs loads with the first tool call
        from cattrs import transform_error

        lines = transform_error(exc, path=name, format_exception=_format_error)
        problems = []
        for line in lines:
            text, _, path = line.rpartition(" @ ")
            problems.append(f"parameter {path!r} {text}")
        return None, problems


# ---------------------------------------------------------------- validation


def type_ok(value: Any, schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind is None:
        return True
    kinds = kind if isinstance(kind, list) else [kind]
    return any(_is_kind(value, k) for k in kinds)


_KIND_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def _is_kind(value: Any, kind: str) -> bool:
    """``value`` is of JSON ``kind`` (a bool is not a number); unknown kinds accept anything."""
    types_ = _KIND_TYPES.get(kind)
    if types_ is None:
        return True
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, types_)


def checker(schema: Mapping[str, Any]) -> Callable[[Any], bool]:
    """A fast test of one value against a property's schema (``type_ok`` as a closure)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if "enum" in schema or not all(k in _KIND_TYPES for k in kinds):
        return lambda value: type_ok(value, schema)
    if not kinds:
        return lambda value: True
    allowed = frozenset(t for k in kinds for t in _KIND_TYPES[k])
    return lambda value: type(value) in allowed


def describe(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(describe(option) for option in schema["anyOf"])
    kind = schema.get("type", "any")
    if "format" in schema:
        return f"a {schema['format']} string"
    if kind == "object" and "properties" in schema:
        return "an object with " + ", ".join(schema["properties"])
    return " or ".join(kind) if isinstance(kind, list) else str(kind)
