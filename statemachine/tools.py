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
import difflib
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, overload

import attrs

from .messages import Content, ContentPart, ToolCall, ToolResult

__all__ = ["Tool", "ToolContext", "ToolOutput", "tool"]


@attrs.frozen
class ToolContext:
    """What a tool may read of the run: declare a parameter annotated ``ToolContext``."""

    state: Mapping[str, Any]
    custom_context: Mapping[str, Any]
    tool_call_id: str


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


_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def _schema_for(hint: Any) -> dict[str, Any]:
    """The JSON schema of one annotation; unknown types accept anything."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = _schema_for(args[0])
        for meta in args[1:]:
            if isinstance(meta, str):
                schema["description"] = meta
        return schema
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        schema = (
            _schema_for(options[0])
            if len(options) == 1
            else {"anyOf": [_schema_for(a) for a in options]}
        )
        if len(options) < len(args) and "type" in schema:
            schema["type"] = [schema["type"], "null"]
        return schema
    if origin is Literal:
        values = list(args)
        kinds = {_JSON_TYPES.get(type(v)) for v in values}
        schema = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    base = origin or hint
    if isinstance(base, type):
        if issubclass(base, bool):
            return {"type": "boolean"}
        for py, js in _JSON_TYPES.items():
            if issubclass(base, py):
                schema = {"type": js}
                if js == "array" and args:
                    schema["items"] = _schema_for(args[0])
                return schema
        if base in (Sequence, typing.Sequence) or _is_abc(base, Sequence):
            return {"type": "array", **({"items": _schema_for(args[0])} if args else {})}
        if _is_abc(base, Mapping):
            return {"type": "object"}
    return {}


def _is_abc(base: type, abc: type) -> bool:
    try:
        return issubclass(base, abc)
    except TypeError:
        return False


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
    kind = schema.get("type", "any")
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
    _required: frozenset[str] = attrs.field(init=False, eq=False, repr=False)
    _properties: Mapping[str, Mapping[str, Any]] = attrs.field(init=False, eq=False, repr=False)
    _open: bool = attrs.field(init=False, eq=False, repr=False)
    _checks: Mapping[str, Callable[[Any], bool]] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        props = dict(self.parameters.get("properties") or {})
        object.__setattr__(self, "_properties", props)
        object.__setattr__(self, "_required", frozenset(self.parameters.get("required") or ()))
        object.__setattr__(self, "_open", self.parameters.get("additionalProperties") is True)
        object.__setattr__(self, "_checks", {k: _checker(v) for k, v in props.items()})
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
        hints = typing.get_type_hints(function, include_extras=True)
        doc, param_docs = _parse_docstring(function.__doc__)
        properties: dict[str, Any] = {}
        required: list[str] = []
        context_param = None
        for param in inspect.signature(function).parameters.values():
            hint = hints.get(param.name, Any)
            if _is_context(hint):
                context_param = param.name
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            schema = _schema_for(hint)
            if param.name in param_docs and "description" not in schema:
                schema["description"] = param_docs[param.name]
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
            else:
                try:
                    json.dumps(param.default)
                    schema["default"] = param.default
                except TypeError:
                    pass
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
        )

    def _fits(self, arguments: Mapping[str, Any]) -> bool:
        """The quick yes of the common case; a no is explained by ``argument_error``."""
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
        if self._fits(arguments):
            return None
        given = set(arguments)
        missing = sorted(self._required - given)
        unknown = [] if self._open else sorted(given - self._properties.keys())
        problems = []
        if missing:
            problems.append(f"missing required parameter(s) {missing}")
        for key in unknown:
            guess = difflib.get_close_matches(key, list(self._properties), n=1)
            hint = f" (did you mean {guess[0]!r}?)" if guess else ""
            problems.append(f"unknown parameter {key!r}{hint}")
        for key, value in arguments.items():
            schema = self._properties.get(key)
            if schema is not None and not _type_ok(value, schema):
                problems.append(
                    f"parameter {key!r} must be {_describe(schema)}, got {json.dumps(value)}"
                )
        if not problems:
            return None
        return (
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
                f"{call.invalid_arguments}. Send the arguments as a JSON object.",
            )
        problem = self.argument_error(call.arguments)
        if problem is not None:
            return _error(call, problem)
        kwargs = dict(call.arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = context
        try:
            if self.is_async:
                awaitable: Awaitable[Any] = self.function(**kwargs)
                if self.timeout is not None:
                    awaitable = asyncio.wait_for(awaitable, self.timeout)
                value = await awaitable
            elif self.timeout is not None:
                value = await asyncio.wait_for(
                    asyncio.to_thread(self.function, **kwargs), self.timeout
                )
            else:
                value = self.function(**kwargs)
        except TimeoutError as exc:
            if self.timeout is not None and not str(exc):
                return _error(
                    call,
                    f"ERROR: TimeoutError: tool {self.name!r} did not finish "
                    f"within {self.timeout:g}s",
                )
            return _error(call, f"ERROR: {type(exc).__name__}: {exc}")
        except Exception as exc:
            return _error(call, f"ERROR: {type(exc).__name__}: {exc}")
        return _to_result(call, value)


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
        return ToolResult(call.call_id, call.name, json.dumps(value, default=str))
    except (TypeError, ValueError) as exc:
        return _error(call, f"ERROR: tool returned a value that is not JSON: {exc}")


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
