"""JSON documents of the engine's values: messages, chains, agent states, results, traces.

One cattrs converter writes the plain values (messages and their parts, tool
calls and results with their expansions and interrupts, agent states,
errors). Chains, pipeline results and traces are written around it, because a
chain holds live objects that are not data:

* the model is written as its ``name``, the tools as their names, and the
  callbacks not at all. Loading binds them again from what the caller passes:
  ``models`` (by name), ``tools`` and ``callbacks``. A model that was not passed
  loads as an :class:`UnboundModel`, so a trace can be read and shown with no
  model at hand (calling it fails with a ``ChainError`` that says what to pass).
  A tool name that was not passed is an :class:`UnknownToolError`, unless
  ``strict=False`` binds a placeholder whose calls return an error result.
* the chains of one document share their messages, so a document keeps each
  message once, in its ``messages`` table, and each ``custom_context`` once, in
  ``contexts``; a chain is a small record of index runs into them. A trace of
  200 steps holds the conversation once, not 200 times.

Every document reads ``{"format": "agentfsm/1", "type": ..., "value": ...}``;
one written by a newer format is refused with a :class:`FormatError`. Values
typed ``Any`` (arguments, metadata, ``custom_context``, agent state, interrupt
data, error details, pause reasons) must be JSON values; tuples among them come
back as lists.
"""

from __future__ import annotations

import json
import math
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from ._chain import Callbacks, LLMChain
from ._errors import ChainError, FormatError, UnknownToolError
from ._messages import (
    ContentPart,
    Message,
    MessageDelta,
    MessageExpansion,
    MessageLog,
    Role,
    ToolCall,
    ToolResult,
)
from ._results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult
from ._state import AgentState
from ._tools import Tool
from ._trace import Trace, Transition

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Binder",
    "FormatError",
    "Models",
    "Packer",
    "Serializable",
    "UnboundModel",
    "UnknownToolError",
    "Unpacker",
    "check_format",
    "compact_json",
    "converter",
    "dump",
    "dump_trace",
    "dumps",
    "load",
    "load_trace",
    "loads",
    "parse_json",
    "unbound_tool",
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
#: Models to bind on load: by name, or a list of models (each under its ``name``).
Models: TypeAlias = "Mapping[str, ChatModel] | Iterable[ChatModel]"


@attrs.frozen
class UnboundModel:
    """Stands in for a model that was not passed on load: traces read, calls fail clearly."""

    name: str

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, on_delta: Any = None
    ) -> Message:
        raise ChainError(
            "unbound_model",
            f"The model {self.name!r} was not bound when this chain was loaded, so it cannot "
            f"be called. Pass it when loading: models={{{self.name!r}: <your ChatModel>}}.",
            retryable=False,
        )


def unbound_tool(name: str) -> Tool:
    """A stand-in for a tool that was not passed on load: any call is an error result."""

    def unbound(**_: Any) -> Any:
        raise ChainError(
            "unbound_tool",
            f"The tool {name!r} was not bound when this chain was loaded; pass it in tools=[...].",
        )

    return Tool(
        name,
        f"Unbound: the tool {name!r} was not passed when this chain was loaded.",
        unbound,
        parameters={"type": "object", "properties": {}, "additionalProperties": True},
    )


# ---------------------------------------------------------------- the converter


def _error_out(error: ChainError) -> dict[str, Any]:
    out: dict[str, Any] = {"type": error.type, "message": error.message}
    if error.retryable != ChainError(error.type, "").retryable:
        out["retryable"] = error.retryable
    if error.details:
        out["details"] = converter.unstructure(dict(error.details))
    return out


def _error_in(data: Any, _: Any) -> ChainError:
    if not isinstance(data, Mapping):
        raise TypeError(f"a ChainError is an object, got: {type(data).__name__}")
    retryable = data.get("retryable")
    details = data.get("details")
    return ChainError(
        str(data["type"]),
        str(data["message"]),
        retryable=None if retryable is None else bool(retryable),
        details=dict(details) if isinstance(details, Mapping) else None,
    )


#: The converter of the plain values; chains and traces are written around it.
converter: Final = make_converter(omit_if_default=True)
converter.register_unstructure_hook(ChainError, _error_out)
converter.register_structure_hook(ChainError, _error_in)


_encoder: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _compact_encoder() -> Callable[[Any], str]:
    """Compact JSON text of plain data, the C encoder built once (``json.dumps`` with
    options builds one per call). It does not look for cycles: the callers' data has none
    or is retried through :func:`_compact_any`'s checked path."""
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


def _compact_any(value: Mapping[str, Any]) -> str:
    """A mapping of ``Any`` values as compact JSON: plain JSON data as is (the converter
    would hand it back unchanged), anything else (or a cycle) through the converter."""
    try:
        return compact_json(value)
    except (TypeError, ValueError, RecursionError):
        return _encoder.encode(converter.unstructure(dict(value)))


def _message_text(message: Message) -> str:
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


class Binder:
    """What a loaded chain is bound to: the caller's models, tools and callbacks."""

    def __init__(
        self,
        models: Models | None,
        tools: Sequence[Tool],
        callbacks: Sequence[Callbacks],
        strict: bool,
    ) -> None:
        if models is None:
            models = {}
        self.models: dict[str, ChatModel] = (
            dict(models) if isinstance(models, Mapping) else {m.name: m for m in models}
        )
        self.tools = {t.name: t for t in tools}
        # Validated here, so a bad mapping is the caller's ValueError, not a FormatError.
        self.callbacks = LLMChain(UnboundModel("-"), callbacks=callbacks).callbacks
        self.strict = strict
        self._toolsets: dict[tuple[str, ...], tuple[Tool, ...]] = {}

    def model(self, name: str) -> ChatModel:
        model = self.models.get(name)
        if model is None:
            model = self.models[name] = UnboundModel(name)
        return model

    def toolset(self, names: Sequence[str]) -> tuple[Tool, ...]:
        key = tuple(names)
        bound = self._toolsets.get(key)
        if bound is not None:
            return bound
        missing = [n for n in key if n not in self.tools]
        if missing and self.strict:
            raise UnknownToolError(
                f"The document names tool(s) {missing} that were not passed; pass them in "
                f"tools=[...] (passed: {sorted(self.tools)}), or load with strict=False to bind "
                "stand-ins that answer every call with an error."
            )
        for name in missing:
            self.tools[name] = unbound_tool(name)
        bound = self._toolsets[key] = tuple(self.tools[n] for n in key)
        return bound


# ---------------------------------------------------------------- chain records


Runs: TypeAlias = list[list[int]]


class Packer:
    """Writes chains against shared tables: each message and each context once.

    Tables are keyed by identity (chains share their message objects) and keep
    what they index alive, so an ``id`` is never reused while the packer lives.
    Seeded with a loaded document's tables, it goes on appending after them.
    """

    def __init__(
        self, messages: Sequence[Message] = (), contexts: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        self.messages: list[Message] = list(messages)
        self.contexts: list[Mapping[str, Any]] = list(contexts)
        self._message_index = {id(m): i for i, m in enumerate(self.messages)}
        self._context_index = {id(c): i for i, c in enumerate(self.contexts)}
        self._runs: dict[int, tuple[Sequence[Message], Runs]] = {}
        self._grown: dict[int, tuple[list[Message], int, Runs]] = {}
        #: The model and tools of the last chain written, and their text.
        self._chain_head: tuple[str, tuple[Tool, ...], str, str] | None = None
        # Each edge's opening in a transition's text, bounded as a machine's edges are.
        self._heads: dict[tuple[str, str, str], str] = {}
        self._texts: list[str] = []

    def message(self, message: Message) -> int:
        key = id(message)
        index = self._message_index.get(key)
        if index is None:
            index = self._message_index[key] = len(self.messages)
            self.messages.append(message)
        return index

    def context(self, context: Mapping[str, Any]) -> int:
        index = self._context_index.get(id(context))
        if index is None:
            index = self._context_index[id(context)] = len(self.contexts)
            self.contexts.append(context)
        return index

    def runs(self, messages: Sequence[Message]) -> Runs:
        """``messages`` as ``[[start, count], ...]`` runs of message-table indices."""
        cached = self._runs.get(id(messages))
        if cached is not None and cached[0] is messages:
            return cached[1]
        # Logs that grew from one another share one list, whose prefixes never change:
        # go on from the longest prefix packed so far, so a step costs the same at any K.
        # A run ``[start, count]`` is never changed once packed: a grown one is a new list.
        items = getattr(messages, "_items", None)
        start = 0
        runs: Runs = []
        length = len(messages)
        source: Sequence[Message] = messages
        if items is not None:
            source = items  # the log's first ``length`` items are its messages
            grown = self._grown.get(id(items))
            if grown is not None and grown[0] is items and grown[1] <= length:
                start, runs = grown[1], list(grown[2])
        for position in range(start, length):
            index = self.message(source[position])
            if runs and runs[-1][0] + runs[-1][1] == index:
                runs[-1] = [runs[-1][0], runs[-1][1] + 1]
            else:
                runs.append([index, 1])
        if items is not None:
            self._grown[id(items)] = (items, length, runs)
        self._runs[id(messages)] = (messages, runs)
        return runs

    def chain(self, chain: LLMChain) -> dict[str, Any]:
        record: dict[str, Any] = {
            "llm": chain.llm.name,
            "messages": self.runs(chain.messages),
            "needs_response": chain.needs_response,
            "context": self.context(chain.custom_context),
        }
        if chain.tools:
            record["tools"] = [t.name for t in chain.tools]
        if chain.exchanged_messages:
            record["exchanged"] = self.runs(chain.exchanged_messages)
        if chain.last_message is not None:
            record["last"] = self.message(chain.last_message)
        if chain.current_failure_count:
            record["failures"] = chain.current_failure_count
        if chain.max_retry_count != _MAX_RETRY_DEFAULT:
            record["max_retries"] = chain.max_retry_count
        return record

    def chain_text(self, chain: LLMChain) -> str:
        """:meth:`chain` as compact JSON text, the same to the byte, written from its parts:
        a run writes two chains per model call, and the generic encoder costs several
        times more on so small a record."""
        name, tools, head = chain.llm.name, chain.tools, self._chain_head
        if head is None or head[0] != name or head[1] is not tools:
            names = [t.name for t in tools]
            head = (name, tools, compact_json(name), compact_json(names) if names else "")
            self._chain_head = head
        text = '{"llm":' + head[2] + ',"messages":' + _runs_text(self.runs(chain.messages))
        pending = chain.needs_response
        text += ',"needs_response":' + (
            "true" if pending is True else "false" if pending is False else compact_json(pending)
        )
        text += ',"context":' + str(self.context(chain.custom_context))
        if head[3]:
            text += ',"tools":' + head[3]
        if chain.exchanged_messages:
            text += ',"exchanged":' + _runs_text(self.runs(chain.exchanged_messages))
        if chain.last_message is not None:
            text += ',"last":' + str(self.message(chain.last_message))
        if chain.current_failure_count:
            text += ',"failures":' + compact_json(chain.current_failure_count)
        if chain.max_retry_count != _MAX_RETRY_DEFAULT:
            text += ',"max_retries":' + compact_json(chain.max_retry_count)
        return text + "}"

    def result(self, result: PipelineResult) -> dict[str, Any]:
        record: dict[str, Any] = {"type": type(result).__name__, "chain": self.chain(result.chain)}
        match result:
            case Ok(_, tool_result) if tool_result is not None:
                record["tool_result"] = converter.unstructure(tool_result, ToolResult)
            case Paused(_, reason) if reason is not None:
                record["reason"] = converter.unstructure(reason)
            case Interrupted(_, data):
                record["data"] = converter.unstructure(dict(data))
                if result.state is not None:
                    record["state"] = result.state
            case Failed(_, error):
                record["error"] = _error_out(error)
        return record

    def transition(self, transition: Transition) -> dict[str, Any]:
        record: dict[str, Any] = {
            "source": transition.source,
            "trigger": transition.trigger,
            "dest": transition.dest,
            "chain": self.chain(transition.chain),
        }
        if transition.elapsed:
            record["elapsed"] = transition.elapsed
        if transition.detail is not None:
            record["detail"] = converter.unstructure(dict(transition.detail))
        if transition.children:
            record["children"] = [self.trace(child) for child in transition.children]
        return record

    def trace(self, trace: Trace) -> dict[str, Any]:
        """A trace's record: its machine, entry and transitions (child runs nested in them)."""
        return {
            "machine": trace.machine,
            **_identity(trace),
            "entry": trace.entry,
            "transitions": [self.transition(t) for t in trace.transitions],
        }

    def transition_text(self, transition: Transition) -> str:
        """:meth:`transition` as compact JSON text (see :meth:`transition_rows`)."""
        return self.transition_rows((transition,), 0)[0][1]

    def transition_rows(
        self, transitions: Sequence[Transition], start: int
    ) -> list[tuple[int, str]]:
        """``transitions[start:]`` as ``(index, text)`` rows, each :meth:`transition` as
        compact JSON, except that a chain which grew from the row before's is written as
        what it changed (:meth:`grown_text`): a run carries one chain through several
        steps and grows it by a message or two per step.

        A run writes seven rows per model call, so a transition's slots are read as
        they are (``detail`` through its property: it is built when first read), and an
        edge's opening is written once. ``elapsed`` is kept to the microsecond (the
        shortest exact text of a float costs several times as much to write)."""
        rows = []
        heads = self._heads
        before = transitions[start - 1]._chain if start else None
        for index in range(start, len(transitions)):
            transition = transitions[index]
            chain = transition._chain
            grown = None if before is None else self.grown_text(before, chain)
            before = chain
            edge = (transition._source, transition._trigger, transition._dest)
            head = heads.get(edge)
            if head is None:
                source, trigger, dest = (compact_json(name) for name in edge)
                head = f'{{"source":{source},"trigger":{trigger},"dest":{dest},"chain":'
                if len(heads) < _HEADS_MAX:
                    heads[edge] = head
            text = head + (self.chain_text(chain) if grown is None else grown)
            elapsed = transition._elapsed
            if elapsed:
                plain = type(elapsed) is float and math.isfinite(elapsed)
                text += ',"elapsed":' + (f"{elapsed:.6f}" if plain else compact_json(elapsed))
            detail = transition.detail
            if detail is not None:
                text += ',"detail":' + _compact_any(detail)
            children = transition._children
            if children:
                text += ',"children":' + compact_json([self.trace(c) for c in children])
            rows.append((index, text + "}"))
        return rows

    def grown_text(self, before: LLMChain, after: LLMChain) -> str | None:
        """``after`` as a record of what it changed in ``before`` (which the reader has
        read just before it): the messages it appended (``"add"``, message-table
        indices) and the fields that differ, ``{}`` for the same chain. None when
        ``after`` did not grow from ``before`` (another model or tools, a conversation
        that was cut or replaced): its full record is written instead."""
        if after is before:
            return "{}"
        if (
            after.llm is not before.llm
            or after.tools is not before.tools
            or after.max_retry_count != before.max_retry_count
        ):
            return None
        added = after.messages.added_since(before.messages)
        exchanged = after.exchanged_messages.added_since(before.exchanged_messages)
        if (  # the two logs grew by the same messages
            added is None
            or exchanged is None
            or len(exchanged) != len(added)
            or not all(map(operator.is_, exchanged, added))
        ):
            return None
        if after.last_message is not (added[-1] if added else before.last_message):
            return None
        parts = []
        if added:
            parts.append('"add":[' + ",".join([str(self.message(m)) for m in added]) + "]")
        if after.needs_response != before.needs_response:
            parts.append('"needs_response":' + ("true" if after.needs_response else "false"))
        if after.custom_context is not before.custom_context:
            parts.append('"context":' + str(self.context(after.custom_context)))
        if after.current_failure_count != before.current_failure_count:
            parts.append('"failures":' + compact_json(after.current_failure_count))
        return "{" + ",".join(parts) + "}"

    def message_docs(self, start: int = 0) -> list[Any]:
        return [converter.unstructure(m, Message) for m in self.messages[start:]]

    def context_docs(self, start: int = 0) -> list[Any]:
        return [converter.unstructure(dict(c)) for c in self.contexts[start:]]

    def message_texts(self, start: int = 0) -> list[str]:
        """:meth:`message_docs` as compact JSON text, kept for :meth:`agent_state_text`."""
        texts = [_message_text(message) for message in self.messages[start:]]
        known = self._texts
        if len(known) != start:
            known.extend([""] * (start - len(known)))  # a seeded table's rows: not written here
            del known[start:]
        known += texts
        return texts

    def message_rows(self, start: int) -> list[tuple[int, str]]:
        """:meth:`message_texts` from ``start`` as ``(index, text)`` rows."""
        return list(enumerate(self.message_texts(start), start))

    def context_rows(self, start: int) -> list[tuple[int, str]]:
        """:meth:`context_texts` from ``start`` as ``(index, text)`` rows."""
        return list(enumerate(self.context_texts(start), start))

    def agent_state_text(self, state: AgentState) -> str:
        """``state`` as compact JSON; messages :meth:`message_texts` wrote are not written again."""
        index, known = self._message_index, self._texts
        parts = []
        for message in state.messages:
            i = index.get(id(message))
            if i is None or i >= len(known) or not known[i]:
                return compact_json(converter.unstructure(state, AgentState))
            parts.append(known[i])
        rest = compact_json(converter.unstructure(attrs.evolve(state, messages=()), AgentState))
        head = '{"messages":[' + ",".join(parts) + "]"
        return head + ("}" if rest == "{}" else "," + rest[1:]) if parts else rest

    def context_texts(self, start: int = 0) -> list[str]:
        """:meth:`context_docs` as compact JSON text."""
        return [_compact_any(c) for c in self.contexts[start:]]


_MAX_RETRY_DEFAULT: Final = attrs.fields(LLMChain).max_retry_count.default


def _runs_text(runs: Runs) -> str:
    if len(runs) == 1:  # a log that only grew: one run
        start, count = runs[0]
        return f"[[{start},{count}]]"
    return "[" + ",".join([f"[{start},{count}]" for start, count in runs]) + "]"


_HEADS_MAX: Final = 256


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be an object, got: {type(value).__name__}")
    return value


def _context(value: Any, index: int) -> dict[str, Any]:
    """A saved ``custom_context``, its fields the engine reads in the shape it reads them:
    ``mode_state`` an object whose ``run_count`` is a count, ``state`` an object (either
    may be absent or null). ``pause_reason`` and every other field are free-form."""
    context = dict(_mapping(value, f"context {index}"))
    problem = None
    mode_state = context.get("mode_state")
    state = context.get("state")
    if mode_state is not None and not isinstance(mode_state, Mapping):
        problem = f"mode_state must be an object, got: {type(mode_state).__name__}"
    elif mode_state is not None:
        count = mode_state.get("run_count", 0)
        if type(count) is not int or count < 0:
            got = count if type(count) is int else type(count).__name__
            problem = f"mode_state's run_count must be an integer, 0 or more, got: {got}"
    if problem is None and state is not None and not isinstance(state, Mapping):
        problem = f"state must be an object, got: {type(state).__name__}"
    if problem is not None:
        raise FormatError(f"Context {index} of the document is malformed: {problem}")
    return context


class Unpacker:
    """Reads chain records against a document's tables; chains share what they share."""

    def __init__(self, messages: Sequence[Any], contexts: Sequence[Any], binder: Binder) -> None:
        self.binder = binder
        self.messages: list[Message] = []
        for index, doc in enumerate(messages):
            try:
                self.messages.append(converter.structure(doc, Message))
            except cattrs.BaseValidationError as exc:
                raise FormatError(
                    f"Message {index} of the document is malformed: "
                    + "; ".join(cattrs.transform_error(exc))
                ) from exc
        self.contexts: list[Mapping[str, Any]] = [_context(c, i) for i, c in enumerate(contexts)]
        self._logs: dict[tuple[tuple[int, int], ...], MessageLog] = {}

    def log(self, runs: Any) -> MessageLog:
        key = tuple((int(start), int(count)) for start, count in runs)
        log = self._logs.get(key)
        if log is None:
            items: list[Message] = []
            for start, count in key:
                if start < 0 or count < 0 or start + count > len(self.messages):
                    raise IndexError(
                        f"message run [{start}, {count}] is outside the message table "
                        f"({len(self.messages)} messages)"
                    )
                items.extend(self.messages[start : start + count])
            log = self._logs[key] = MessageLog(items)
        return log

    def message(self, index: Any) -> Message:
        if not isinstance(index, int) or not 0 <= index < len(self.messages):
            raise IndexError(f"message index {index!r} is outside the message table")
        return self.messages[index]

    def context(self, index: Any) -> Mapping[str, Any]:
        if not isinstance(index, int) or not 0 <= index < len(self.contexts):
            raise IndexError(f"context index {index!r} is outside the context table")
        return self.contexts[index]

    def chain(self, record: Any, before: LLMChain | None = None) -> LLMChain:
        """A chain's record: a full one, or (after ``before``, the chain read just before
        it) one of what it changed (see :meth:`Packer.grown_text`)."""
        record = _mapping(record, "a chain")
        if before is not None and "llm" not in record:
            return self._grown(record, before)
        last = record.get("last")
        return LLMChain(
            self.binder.model(str(record["llm"])),
            tools=self.binder.toolset(record.get("tools", ())),
            messages=self.log(record["messages"]),
            exchanged_messages=self.log(record.get("exchanged", ())),
            last_message=None if last is None else self.message(last),
            needs_response=bool(record["needs_response"]),
            custom_context=self.context(record["context"]),
            callbacks=self.binder.callbacks,
            current_failure_count=int(record.get("failures", 0)),
            max_retry_count=int(record.get("max_retries", _MAX_RETRY_DEFAULT)),
        )

    def _grown(self, record: Mapping[str, Any], before: LLMChain) -> LLMChain:
        if not record:
            return before  # consecutive transitions carry one chain
        added = record.get("add", [])
        if not isinstance(added, list):
            raise TypeError(f"a chain's added messages must be a list, got {added!r}")
        messages, exchanged = before.messages, before.exchanged_messages
        for index in added:
            message = self.message(index)
            messages, exchanged = messages.append(message), exchanged.append(message)
        context = record.get("context")
        needs_response = record.get("needs_response")
        failures = record.get("failures")
        return before._replace(
            messages=messages,
            exchanged_messages=exchanged,
            last_message=messages[-1] if added else before.last_message,
            needs_response=before.needs_response
            if needs_response is None
            else bool(needs_response),
            custom_context=before.custom_context if context is None else self.context(context),
            current_failure_count=before.current_failure_count
            if failures is None
            else int(failures),
        )

    def result(self, record: Any) -> PipelineResult:
        record = _mapping(record, "a result")
        chain = self.chain(record["chain"])
        kind = record["type"]
        if kind == "Continue":
            return Continue(chain)
        if kind == "Ok":
            raw = record.get("tool_result")
            return Ok(chain, None if raw is None else converter.structure(raw, ToolResult))
        if kind == "Paused":
            return Paused(chain, record.get("reason"))
        if kind == "Interrupted":
            state = record.get("state")
            if state is not None and not isinstance(state, str):
                raise FormatError(f"An interrupt's state {state!r:.60} is not a state's name")
            return Interrupted(chain, dict(_mapping(record["data"], "interrupt data")), state=state)
        if kind == "Failed":
            return Failed(chain, _error_in(record["error"], ChainError))
        raise ValueError(f"unknown result type {kind!r}")

    def transition(self, record: Any, before: LLMChain | None = None) -> Transition:
        """A transition's record (``before``: the chain of the one read just before it)."""
        record = _mapping(record, "a transition")
        detail = record.get("detail")
        transition = Transition(
            str(record["source"]),
            str(record["trigger"]),
            str(record["dest"]),
            self.chain(record["chain"], before),
            float(record.get("elapsed", 0.0)),
            None if detail is None else dict(_mapping(detail, "a detail")),
        )
        children = record.get("children")
        if children is not None:
            if not isinstance(children, list):
                raise TypeError(f"a transition's children must be a list, got {children!r}")
            transition.with_children([self.trace(child) for child in children])
        return transition

    def transitions(self, records: Any) -> list[Transition]:
        """A trace's transition records in order, each chain read after the one before."""
        if not isinstance(records, list):
            raise TypeError(f"a trace's transitions must be a list, got {records!r}")
        transitions: list[Transition] = []
        before = None
        for record in records:
            transition = self.transition(record, before)
            before = transition.chain
            transitions.append(transition)
        return transitions

    def trace(self, value: Any) -> Trace:
        value = _mapping(value, "a trace")
        return Trace(
            entry=str(value["entry"]),
            transitions=self.transitions(value["transitions"]),
            machine=str(value.get("machine", "standard")),
            machine_version=_optional(value.get("machine_version"), int),
            machine_fingerprint=_optional(value.get("machine_fingerprint"), str),
            migrated_from=_optional(value.get("migrated_from"), str),
        )


def _optional(value: Any, kind: type[Any]) -> Any:
    """A saved trace's machine version or fingerprint: None when not recorded."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise FormatError(f"A trace's machine identity {value!r} is not {kind.__name__}")
    return value


def _identity(trace: Trace) -> dict[str, Any]:
    """A trace's machine version and fingerprint, when it has them."""
    out: dict[str, Any] = {}
    if trace.machine_version is not None:
        out["machine_version"] = trace.machine_version
    if trace.machine_fingerprint is not None:
        out["machine_fingerprint"] = trace.machine_fingerprint
    if trace.migrated_from is not None:
        out["migrated_from"] = trace.migrated_from
    return out


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
        doc["value"] = _error_out(obj)
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
            return typing.cast(_T, _error_in(value, ChainError))
        unpacker = Unpacker(data.get("messages", ()), data.get("contexts", ()), binder)
        out: object
        if kind == "LLMChain":
            out = unpacker.chain(value)
        elif kind == "Trace":
            out = unpacker.trace(value)
        elif kind == "Transition":
            out = unpacker.transition(value)
        else:
            out = unpacker.result({**_mapping(value, "a result"), "type": kind})
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
