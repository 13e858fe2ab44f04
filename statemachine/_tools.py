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
import contextlib
import contextvars
import dataclasses
import datetime
import difflib
import enum
import inspect
import json
import re
import threading
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Self, overload

import attrs

from ._arguments import (
    Unsupported,
    checker,
    describe,
    is_json,
    is_plain,
    schema_for,
    shown,
    strip_annotated,
    structure,
    type_ok,
)
from ._messages import Content, ContentPart, ToolCall, ToolResult

__all__ = ["SYNC_TOOLS_IN_THREADS", "Tool", "ToolContext", "ToolOutput", "WrapperTool", "tool"]

#: True: every sync tool runs in a thread of its own, as one with a timeout does, so a
#: cancelled run (Ctrl-C at the command line) stops waiting for it at once instead of
#: when it returns. The command line sets it around the runs it steps.
SYNC_TOOLS_IN_THREADS: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "agentfsm_sync_tools_in_threads", default=False
)


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


# ---------------------------------------------------------------- Tool


def _is_context(hint: Any) -> bool:
    """``ToolContext``, optional or not: a parameter the run fills, not the model."""
    return hint is ToolContext or ToolContext in typing.get_args(hint)


#: What a tool's calls may declare they do besides their own work (see ``Tool.effects``).
_TOOL_EFFECTS: Final[frozenset[str]] = frozenset({"model", "tools"})


def _tool_effects(value: Any) -> frozenset[str]:
    kinds = frozenset((value,) if isinstance(value, str) else value or ())
    unknown = sorted(kinds - _TOOL_EFFECTS)
    if unknown:
        raise ValueError(
            f"a tool's effects are among {sorted(_TOOL_EFFECTS)} (a call may call the model "
            f"or run tools of its own), got {unknown}"
        )
    return kinds


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
    #: What a call does besides the tool's own work, for the checks that read effects
    #: (:mod:`agentfsm.effects`): ``"model"`` (it calls a model), ``"tools"`` (it runs
    #: tools of its own). A :class:`~agentfsm.SubAgent` declares both.
    effects: frozenset[str] = attrs.field(default=frozenset(), converter=_tool_effects)
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
        object.__setattr__(self, "_checks", {k: checker(v) for k, v in props.items()})
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
        effects: Iterable[str] = (),
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
                schema = schema_for(hint)
            except Unsupported as exc:
                raise TypeError(f"Tool {label!r}, parameter {param.name!r}: {exc}") from None
            if not is_plain(hint):
                structured[param.name] = strip_annotated(hint)
            if param.name in param_docs and "description" not in schema:
                schema["description"] = param_docs[param.name]
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
            elif is_json(param.default):
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
            effects=frozenset(effects),
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
        return arguments.keys() >= self._required

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
                kwargs[key], found = structure(key, value, structured[key])
                problems.extend(found)
            elif schema is not None and not type_ok(value, schema):
                problems.append(f"parameter {key!r} must be {describe(schema)}, got {shown(value)}")
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
        in_thread = not self.is_async and (self.timeout is not None or SYNC_TOOLS_IN_THREADS.get())
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
    return ToolResult(tool_call_id=call.call_id, name=call.name, content=message, is_error=True)


def _to_result(call: ToolCall, value: Any) -> ToolResult:
    """Normalize what a tool returned into the result of ``call``."""
    if isinstance(value, ToolResult):
        return attrs.evolve(value, tool_call_id=call.call_id, name=call.name)
    if isinstance(value, ToolOutput):
        return ToolResult(
            tool_call_id=call.call_id,
            name=call.name,
            content=value.content,
            is_error=value.is_error,
            is_interrupt=value.interrupt is not None,
            interrupt_data=dict(value.interrupt) if value.interrupt is not None else None,
            state_updates=value.state_updates,
        )
    kind = type(value)
    if kind is str:
        return _plain(call, value)
    if kind is int or kind is float:
        return _plain(call, repr(value))
    if isinstance(value, str):
        return _plain(call, value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, ContentPart) for v in value):
        return _plain(call, tuple(value))
    try:
        data = _json_value(value, "$", 0)
        text = data if isinstance(data, str) else json.dumps(data)
    except _NoJSON as exc:
        return _error(call, f"ERROR: tool {call.name!r} returned {exc}")
    except (TypeError, ValueError) as exc:
        return _error(call, f"ERROR: tool {call.name!r} returned a value that is not JSON: {exc}")
    return _plain(call, text)


def _plain(call: ToolCall, content: Content) -> ToolResult:
    """The result of ``call`` that reads ``content``."""
    return ToolResult(tool_call_id=call.call_id, name=call.name, content=content)


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
    effects: Iterable[str] = (),
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    display_text: str | None = None,
    effects: Iterable[str] = (),
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a typed function: ``@tool`` or ``@tool(timeout=5)``;
    ``@tool(effects=("model",))`` for one whose calls call a model (see ``Tool.effects``)."""
    declared = _tool_effects(effects)  # refused here, not when the function comes

    def make(fn: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            fn,
            name=name,
            description=description,
            timeout=timeout,
            display_text=display_text,
            effects=declared,
        )

    return make(function) if function is not None else make


@attrs.frozen
class WrapperTool(Tool):
    """A tool that hands each call to ``wrapped``, offered to the model as ``wrapped`` is.

    Subclass and override :meth:`invoke` to act around the call (a span, a recorded
    step); make one with :meth:`wrap`, which copies the wrapped tool's fields.
    """

    wrapped: Tool = attrs.field(kw_only=True, eq=False, repr=False)

    @classmethod
    def wrap(cls, tool: Tool, **fields: Any) -> Self:
        """``tool`` wrapped: its name, description, schema and settings, and ``fields``
        (a subclass's own)."""
        copied = {str(f.alias): getattr(tool, f.name) for f in _TOOL_FIELDS}
        return cls(**copied, wrapped=tool, **fields)

    async def invoke(self, call: ToolCall, context: ToolContext) -> ToolResult:
        return await self.wrapped.invoke(call, context)


_TOOL_FIELDS: Final = tuple(f for f in attrs.fields(Tool) if f.init)
