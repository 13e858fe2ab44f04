"""Tools: typed Python functions the model may call, and what they may return.

``@tool`` turns a plain or ``async`` function into a :class:`Tool` whose JSON
schema comes from its type hints and whose description is its docstring. A
tool returns plain content (a ``str``, content parts, or any JSON value) or a
:class:`ToolOutput` carrying state updates or an interrupt; a tool that wants to
insert messages returns ``MessageExpansion.expand(...)``. Calling a tool never
raises into the run: every failure becomes an error :class:`ToolResult` the
model can read and act on.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import contextvars
import dataclasses
import datetime
import difflib
import enum
import functools
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal, overload

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, ClassValidationError

from .messages import Content, ContentPart, ToolCall, ToolResult

__all__ = ["Tool", "ToolContext", "ToolOutput", "tool"]


@attrs.frozen
class ToolContext:
    """What a tool may read of the run: declare a parameter annotated ``ToolContext``."""

    state: Mapping[str, Any]
    custom_context: Mapping[str, Any]
    tool_call_id: str
    #: For a sync tool with a ``timeout``: set once the call ran out of time. Python
    #: cannot stop the tool's thread; check it before a side effect to skip it.
    timed_out: threading.Event | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen
class ToolOutput:
    """A tool's answer with more than content.

    ``state_updates`` are deep-merged into the agent state, in call order, before
    later tools of the same run read it. ``interrupt`` (a mapping, possibly
    empty) stops the run as :class:`~agentfsm.results.Interrupted` once this
    turn's tools have run.
    """

    content: Content = ""
    state_updates: Mapping[str, Any] | None = None
    interrupt: Mapping[str, Any] | None = None
    is_error: bool = False


# ---------------------------------------------------------------- schema
#
# The schema the model sees and the check its arguments pass are made from
# the same type hints: plain JSON types are checked in place (the common,
# fast case); anything structured (containers with item types, attrs classes,
# dataclasses, TypedDicts, enums, datetimes, unions) is structured by cattrs
# into the Python value the tool declared, refusing what the schema refuses.


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


class _Unsupported(TypeError):
    """A hint with no JSON form; ``from_function`` names the tool and parameter."""


def _strip(hint: Any) -> Any:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint


def _is_plain(hint: Any) -> bool:
    """A hint the in-place check covers exactly: a JSON scalar, a Literal, or Any (or None)."""
    hint = _strip(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_strip(a) for a in typing.get_args(hint) if a is not _NONE]
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
        schema = _schema_for(hint, seen)
        if name in defaults and _is_json(defaults[name]):
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
        raise _Unsupported(f"{cls.__name__} refers to itself; recursive types have no schema")
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


def _schema_for(hint: Any, seen: tuple[type, ...] = ()) -> dict[str, Any]:
    """The JSON schema of one annotation; a type with no JSON form raises ``_Unsupported``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = _schema_for(args[0], seen)
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
            _schema_for(options[0], seen)
            if len(options) == 1
            else {"anyOf": [_schema_for(a, seen) for a in options]}
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
        raise _Unsupported(f"{hint!r} has no JSON schema")
    if issubclass(base, bool):
        return {"type": "boolean"}
    if base in _PLAIN:
        return {"type": _JSON_TYPES[base]}
    if issubclass(base, tuple) and args and args[-1] is not Ellipsis:
        items = [_schema_for(a, seen) for a in args]
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
            **({"items": _schema_for(args[0], seen)} if args else {}),
        }
    if base in (list, tuple) or base is Sequence or base is collections.abc.MutableSequence:
        return {"type": "array", **({"items": _schema_for(args[0], seen)} if args else {})}
    if base is dict or base in (Mapping, collections.abc.MutableMapping):
        if args and _strip(args[0]) is not str:
            raise _Unsupported(f"{hint!r} has keys that are not strings; JSON object keys are")
        return {
            "type": "object",
            **({"additionalProperties": _schema_for(args[1], seen)} if args else {}),
        }
    found = _class_schema(base, seen)
    if found is None:
        raise _Unsupported(
            f"{getattr(base, '__qualname__', base)} has no JSON schema; use a JSON type, an "
            "attrs class, a dataclass, a TypedDict, an Enum, a Literal or a datetime"
        )
    return found


def _is_json(value: Any) -> bool:
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


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _strict(kinds: tuple[type, ...], name: str, cast: Callable[[Any], Any] | None = None) -> Any:
    def structure(value: Any, _: Any) -> Any:
        if type(value) not in kinds:
            raise _Mismatch(f"must be {name}, got {_shown(value)}")
        return value if cast is None else cast(value)

    return structure


def _iso(kind: type, name: str) -> Any:
    def structure(value: Any, _: Any) -> Any:
        if type(value) is str:
            try:
                return kind.fromisoformat(value)  # type: ignore[attr-defined]
            except ValueError:
                pass
        raise _Mismatch(f"must be an ISO 8601 {name} string, got {_shown(value)}")

    return structure


def _choice(values: Sequence[Any], out: Sequence[Any]) -> Any:
    def structure(value: Any, _: Any) -> Any:
        for given, result in zip(values, out, strict=True):
            if value == given and type(value) is type(given):
                return result
        raise _Mismatch(
            f"must be one of {', '.join(_shown(v) for v in values)}, got {_shown(value)}"
        )

    return structure


def _union(hint: Any) -> Any:
    options = typing.get_args(hint)
    described = _describe(_schema_for(hint))

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
        raise _Mismatch(f"must be {described}, got {_shown(value)}")

    return structure


def _typeddict(cls: type) -> Any:
    """TypedDicts structured as their schema says (string hints and NotRequired included)."""
    hints, required = _typeddict_keys(cls)

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _Mismatch(f"must be object, got {_shown(value)}")
        extra = [k for k in value if k not in hints]
        if extra:
            raise cattrs.ForbiddenExtraKeysError("", cls, set(extra))
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
    """The one strict converter of tool arguments, built on first use (import stays cheap)."""
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
    if isinstance(exc, _Mismatch):
        return str(exc)
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"has unknown field(s) {sorted(exc.extra_fields)}"
    if isinstance(exc, KeyError):
        return "is missing (required)"
    if isinstance(exc, TypeError) and "iterable" in str(exc):
        return "must be an array"
    return f"is invalid ({type(exc).__name__}: {exc})"


def _structure_problems(name: str, value: Any, hint: Any) -> tuple[Any, list[str]]:
    """``value`` structured as ``hint``, or the problems, each naming its path."""
    try:
        return _converter().structure(value, hint), []
    except RecursionError:
        return None, [f"parameter {name!r} is nested too deeply"]
    except Exception as exc:
        lines = cattrs.transform_error(exc, path=name, format_exception=_format_error)
        problems = []
        for line in lines:
            text, _, path = line.rpartition(" @ ")
            problems.append(f"parameter {path!r} {text}")
        return None, problems


_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$", re.MULTILINE)
_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Description and per-parameter text of a Google-style docstring."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    match = _ARGS_SECTION.search(doc)
    if not match:
        return doc.strip(), {}
    params: dict[str, str] = {}
    for line in doc[match.end() :].splitlines():
        arg = _ARG_LINE.match("    " + line.strip()) if line.strip() else None
        if arg:
            params[arg.group(1)] = arg.group(2).strip()
        elif line.strip() and not line.startswith((" ", "\t")):
            break
    return doc[: match.start()].strip(), params


# ---------------------------------------------------------------- validation


def _type_ok(value: Any, schema: Mapping[str, Any]) -> bool:
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


def _checker(schema: Mapping[str, Any]) -> Callable[[Any], bool]:
    """A fast test of one value against a property's schema (``_type_ok`` as a closure)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if "enum" in schema or not all(k in _KIND_TYPES for k in kinds):
        return lambda value: _type_ok(value, schema)
    if not kinds:
        return lambda value: True
    allowed = frozenset(t for k in kinds for t in _KIND_TYPES[k])
    return lambda value: type(value) in allowed


def _describe(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_describe(option) for option in schema["anyOf"])
    kind = schema.get("type", "any")
    if "format" in schema:
        return f"a {schema['format']} string"
    if kind == "object" and "properties" in schema:
        return "an object with " + ", ".join(schema["properties"])
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


# ---------------------------------------------------------------- Tool


def _is_context(hint: Any) -> bool:
    """``ToolContext``, optional or not: a parameter the run fills, not the model."""
    return hint is ToolContext or ToolContext in typing.get_args(hint)


def _unset_function(**_: Any) -> Any:  # pragma: no cover - placeholder for data-only tools
    raise RuntimeError("this tool has no function")


@attrs.frozen
class Tool:
    """A function the model may call, with the JSON schema it is offered under."""

    name: str
    description: str
    function: Callable[..., Any] = attrs.field(default=_unset_function, eq=False, repr=False)
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    timeout: float | None = None
    display_text: str | None = None
    context_param: str | None = None
    is_async: bool = attrs.field(default=False)
    #: Parameters cattrs structures before the call (containers, classes, enums, datetimes...).
    structured: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    _required: frozenset[str] = attrs.field(init=False, eq=False, repr=False)
    _properties: Mapping[str, Mapping[str, Any]] = attrs.field(init=False, eq=False, repr=False)
    _open: bool = attrs.field(init=False, eq=False, repr=False)
    _checks: Mapping[str, Callable[[Any], bool]] = attrs.field(init=False, eq=False, repr=False)
    _stragglers: _Stragglers = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        props = dict(self.parameters.get("properties") or {})
        object.__setattr__(self, "_properties", props)
        object.__setattr__(self, "_required", frozenset(self.parameters.get("required") or ()))
        object.__setattr__(self, "_open", self.parameters.get("additionalProperties") is True)
        object.__setattr__(self, "_checks", {k: _checker(v) for k, v in props.items()})
        object.__setattr__(self, "_stragglers", _Stragglers())
        if not self.is_async and inspect.iscoroutinefunction(self.function):
            object.__setattr__(self, "is_async", True)

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        display_text: str | None = None,
    ) -> Tool:
        """Read name, description and schema off a typed function."""
        label = name or getattr(function, "__name__", repr(function))
        try:
            hints = typing.get_type_hints(function, include_extras=True)
            signature = inspect.signature(function)
        except (TypeError, ValueError, NameError) as exc:
            raise TypeError(f"Cannot make a tool of {label}: {exc}") from exc
        doc, param_docs = _parse_docstring(function.__doc__)
        properties: dict[str, Any] = {}
        required: list[str] = []
        structured: dict[str, Any] = {}
        context_param = None
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                kind = (
                    f"*{param.name}"
                    if param.kind is param.VAR_POSITIONAL
                    else f"**{param.name}"
                    if param.kind is param.VAR_KEYWORD
                    else f"the positional-only parameter {param.name!r}"
                )
                raise TypeError(
                    f"Tool {label!r} takes {kind}: the model calls a tool with a JSON object "
                    "of named arguments, so every parameter must be a plain named one"
                )
            hint = hints.get(param.name, Any)
            if _is_context(hint):
                context_param = param.name
                continue
            try:
                schema = _schema_for(hint)
            except _Unsupported as exc:
                raise TypeError(f"Tool {label!r}, parameter {param.name!r}: {exc}") from None
            if not _is_plain(hint):
                structured[param.name] = _strip(hint)
            if param.name in param_docs and "description" not in schema:
                schema["description"] = param_docs[param.name]
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
            elif _is_json(param.default):
                schema["default"] = param.default
            properties[param.name] = schema
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            parameters["required"] = required
        return cls(
            name=name or function.__name__,
            description=description if description is not None else doc,
            function=function,
            parameters=parameters,
            timeout=timeout,
            display_text=display_text,
            context_param=context_param,
            is_async=inspect.iscoroutinefunction(function),
            structured=structured,
        )

    def _fits(self, arguments: Mapping[str, Any]) -> bool:
        """The quick yes of the common case; a no is explained by ``_bind``."""
        checks = self._checks
        for key, value in arguments.items():
            check = checks.get(key)
            if check is None:
                if not self._open:
                    return False
            elif not check(value):
                return False
        return all(name in arguments for name in self._required)

    def argument_error(self, arguments: Mapping[str, Any]) -> str | None:
        """Why ``arguments`` do not fit the schema, in words the model can act on."""
        return self._bind(arguments)[1]

    def _bind(self, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The keyword arguments of the call (structured values in place), or why not."""
        structured = self.structured
        if self._fits(arguments) and not structured:
            return dict(arguments), None
        given = set(arguments)
        missing = sorted(self._required - given)
        unknown = [] if self._open else sorted(given - self._properties.keys())
        problems = []
        if missing:
            problems.append(f"missing required parameter(s) {missing}")
        if len(unknown) > _MAX_LISTED:
            problems.append(f"{len(unknown) - _MAX_LISTED} more unknown parameters")
            unknown = unknown[:_MAX_LISTED]
        for key in unknown:
            guess = difflib.get_close_matches(key, list(self._properties), n=1)
            hint = f" (did you mean {guess[0]!r}?)" if guess else ""
            problems.append(f"unknown parameter {key!r}{hint}")
        kwargs = dict(arguments)
        for key, value in arguments.items():
            schema = self._properties.get(key)
            if key in structured:
                kwargs[key], found = _structure_problems(key, value, structured[key])
                problems.extend(found)
            elif schema is not None and not _type_ok(value, schema):
                problems.append(
                    f"parameter {key!r} must be {_describe(schema)}, got {_shown(value)}"
                )
        if not problems:
            return kwargs, None
        return kwargs, (
            f"Invalid arguments for tool {self.name!r}: " + "; ".join(problems) + ". "
            f"Required: {sorted(self._required)}. Accepted: {list(self._properties)}."
        )

    async def invoke(self, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run one call; every failure becomes an error result, never an exception.

        Cancellation is not a failure of the tool: it propagates.
        """
        if call.invalid_arguments is not None:
            return _error(
                call,
                f"Invalid JSON in arguments for tool {self.name!r}: "
                f"{_clipped(call.invalid_arguments)}. Send the arguments as a JSON object.",
            )
        kwargs, problem = self._bind(call.arguments)
        if problem is not None:
            return _error(call, problem)
        in_thread = not self.is_async and self.timeout is not None
        if in_thread:
            if self._stragglers.count >= MAX_STRAGGLERS:
                return _error(
                    call,
                    f"ERROR: tool {self.name!r} was not started: {MAX_STRAGGLERS} earlier calls "
                    "are still running past their timeout. Try again later or do without it.",
                )
            context = attrs.evolve(context, timed_out=threading.Event())
        if self.context_param is not None:
            kwargs[self.context_param] = context
        try:
            if self.is_async:
                awaitable: Awaitable[Any] = self.function(**kwargs)
                if self.timeout is not None:
                    awaitable = asyncio.wait_for(awaitable, self.timeout)
                value = await awaitable
            elif in_thread:
                value = await self._in_thread(kwargs, context)
            else:
                value = self.function(**kwargs)
        except TimeoutError as exc:
            if self.timeout is not None and not str(exc):
                late = (
                    " It runs in a thread Python cannot stop, so it may still finish and "
                    "its effects may still happen; its result will be discarded."
                    if in_thread
                    else ""
                )
                return _error(
                    call,
                    f"ERROR: TimeoutError: tool {self.name!r} did not finish "
                    f"within {self.timeout:g}s.{late}",
                )
            return _error(call, f"ERROR: {type(exc).__name__}: {exc}")
        except Exception as exc:
            return _error(call, f"ERROR: {type(exc).__name__}: {exc}")
        return _to_result(call, value)

    async def _in_thread(self, kwargs: dict[str, Any], context: ToolContext) -> Any:
        """Run a sync tool in a thread of its own, waiting at most ``timeout``.

        Its own daemon thread, not the loop's shared executor: a tool that
        never returns must not starve other work (DNS lookups, other tools)
        nor keep the process alive at exit. On timeout ``context.timed_out``
        is set for a tool that checks it before its side effect.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        stragglers = self._stragglers
        copied = contextvars.copy_context()

        def settle(error: BaseException | None, value: Any) -> None:
            if done.done():
                return
            if error is None:
                done.set_result(value)
            else:
                done.set_exception(error)

        timed_out = context.timed_out
        assert timed_out is not None
        ended = [False]

        def work() -> None:
            error: BaseException | None = None
            value = None
            try:
                value = copied.run(self.function, **kwargs)
            except BaseException as exc:  # handed to the waiting call, which reports it
                error = exc
            finally:
                stragglers.end(ended, timed_out)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(settle, error, value)

        threading.Thread(target=work, name=f"agentfsm tool {self.name}", daemon=True).start()
        try:
            return await asyncio.wait_for(asyncio.shield(done), self.timeout)
        except (TimeoutError, asyncio.CancelledError):
            stragglers.abandon(ended, timed_out)
            raise


class _Stragglers:
    """Threads of timed-out calls of one tool that still run: bounded by ``MAX_STRAGGLERS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def abandon(self, ended: list[bool], timed_out: threading.Event) -> None:
        """The caller stopped waiting: a thread still running counts until it ends."""
        with self._lock:
            timed_out.set()
            if not ended[0]:
                self.count += 1

    def end(self, ended: list[bool], timed_out: threading.Event) -> None:
        with self._lock:
            ended[0] = True
            if timed_out.is_set():
                self.count -= 1


#: Calls of one sync tool that may still run past their timeout before new calls are refused.
MAX_STRAGGLERS: Final = 8


#: Unknown parameters named one by one (each with a did-you-mean) in an error result.
_MAX_LISTED: Final = 10


def _clipped(text: str, limit: int = 500) -> str:
    """At most ``limit`` characters of a model's text echoed back to it."""
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]} ...[{len(text) - limit} characters]... {text[-limit // 2 :]}"


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call.call_id, call.name, message, is_error=True)


def _to_result(call: ToolCall, value: Any) -> ToolResult:
    """Normalize what a tool returned into the result of ``call``."""
    if isinstance(value, ToolResult):
        return attrs.evolve(value, tool_call_id=call.call_id, name=call.name)
    if isinstance(value, ToolOutput):
        return ToolResult(
            call.call_id,
            call.name,
            value.content,
            is_error=value.is_error,
            is_interrupt=value.interrupt is not None,
            interrupt_data=dict(value.interrupt) if value.interrupt is not None else None,
            state_updates=value.state_updates,
        )
    kind = type(value)
    if kind is str:
        return ToolResult(call.call_id, call.name, value)
    if kind is int or kind is float:
        return ToolResult(call.call_id, call.name, repr(value))
    if isinstance(value, str):
        return ToolResult(call.call_id, call.name, value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, ContentPart) for v in value):
        return ToolResult(call.call_id, call.name, tuple(value))
    try:
        data = _json_value(value, "$", 0)
        text = data if isinstance(data, str) else json.dumps(data)
    except _NoJSON as exc:
        return _error(call, f"ERROR: tool {call.name!r} returned {exc}")
    except (TypeError, ValueError) as exc:
        return _error(call, f"ERROR: tool {call.name!r} returned a value that is not JSON: {exc}")
    return ToolResult(call.call_id, call.name, text)


class _NoJSON(ValueError):
    """A tool's return value with no defined JSON form."""


_MAX_DEPTH = 100
_NO_JSON_HINT = (
    "; return a str, a JSON value, an attrs class or dataclass instance, or a ToolOutput"
)


def _json_value(value: Any, path: str, depth: int) -> Any:
    """What a tool returned, as JSON data: the one conversion, documented in the README.

    Sets become sorted lists (in iteration order when unsortable), bytes UTF-8
    text, enums their value, dates and times ISO 8601 strings, attrs and
    dataclass instances objects of their fields. Anything else is refused,
    naming where it sits, so no ``repr`` reaches the model.
    """
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if depth > _MAX_DEPTH:
        raise _NoJSON(f"a value nested deeper than {_MAX_DEPTH} levels (at {path})")
    depth += 1
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool):
                raise _NoJSON(f"an object key of type {type(key).__name__} (at {path})")
            out[key] = _json_value(item, f"{path}[{key!r}]", depth)
        return out
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{path}[{i}]", depth) for i, v in enumerate(value)]
    if isinstance(value, set | frozenset):
        try:
            items = sorted(value)
        except TypeError:
            items = list(value)
        return [_json_value(v, f"{path}[{i}]", depth) for i, v in enumerate(items)]
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise _NoJSON(f"bytes that are not UTF-8 text (at {path}){_NO_JSON_HINT}") from None
    if isinstance(value, enum.Enum):
        return _json_value(value.value, path, depth)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if attrs.has(type(value)):
        fields = {f.name: getattr(value, f.name) for f in attrs.fields(type(value))}
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    else:
        raise _NoJSON(
            f"a value with no JSON form ({type(value).__name__} at {path}){_NO_JSON_HINT}"
        )
    return {k: _json_value(v, f"{path}.{k}", depth) for k, v in fields.items()}


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    display_text: str | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    display_text: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a typed function: ``@tool`` or ``@tool(timeout=5)``."""

    def make(fn: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            fn, name=name, description=description, timeout=timeout, display_text=display_text
        )

    return make(function) if function is not None else make
