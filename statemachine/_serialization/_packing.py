"""Chains against shared tables: each message and each context written once.

The chains of one document (or one saved run) share their messages, so a
chain is a small record of index runs into a ``messages`` table and a
``contexts`` table. :class:`Packer` writes such records (as data, or as the
compact text a store's rows hold), :class:`Unpacker` reads them back.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs
import cattrs

from .._chain import LLMChain
from .._errors import ChainError, FormatError
from .._messages import Message, MessageLog, ToolResult
from .._results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult
from .._state import AgentState
from .._tools import Tool
from .._trace import Trace, Transition
from ._binding import Binder
from ._converter import converter, error_in, error_out
from ._json import compact_any, compact_json, message_text

__all__ = ["Packer", "Runs", "Unpacker", "mapping"]

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
        known = self._message_index  # most were indexed when their move was written
        indices = [known.get(id(m), -1) for m in itertools.islice(source, start, length)]
        if -1 in indices:
            indices = [self.message(m) for m in itertools.islice(source, start, length)]
        if indices and indices == list(range(indices[0], indices[0] + len(indices))):
            first, count = indices[0], len(indices)  # most logs: one stretch of the table
            if runs and runs[-1][0] + runs[-1][1] == first:
                runs[-1] = [runs[-1][0], runs[-1][1] + count]
            else:
                runs.append([first, count])
        else:
            for index in indices:
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
                record["error"] = error_out(error)
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
            edge = (transition._source, transition._trigger, transition._dest)
            head = heads.get(edge)
            if head is None:
                source, trigger, dest = (compact_json(name) for name in edge)
                head = f'{{"source":{source},"trigger":{trigger},"dest":{dest},"chain":'
                if len(heads) < _HEADS_MAX:
                    heads[edge] = head
            if chain is before:  # most moves carry the chain on as it was
                text = head + "{}"
            else:
                grown = None if before is None else self.grown_text(before, chain)
                text = head + (self.chain_text(chain) if grown is None else grown)
                before = chain
            elapsed = transition._elapsed
            if elapsed:
                plain = elapsed.__class__ is float and -_FINITE <= elapsed <= _FINITE
                text += ',"elapsed":' + (f"{elapsed:.6f}" if plain else compact_json(elapsed))
            if transition._before is not None or transition._detail is not None:
                detail = transition.detail  # built when first read
                if detail is not None:
                    text += ',"detail":' + compact_any(detail)
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
        texts = [message_text(message) for message in self.messages[start:]]
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
        return [compact_any(c) for c in self.contexts[start:]]


_MAX_RETRY_DEFAULT: Final = attrs.fields(LLMChain).max_retry_count.default


def _runs_text(runs: Runs) -> str:
    if len(runs) == 1:  # a log that only grew: one run
        start, count = runs[0]
        return f"[[{start},{count}]]"
    return "[" + ",".join([f"[{start},{count}]" for start, count in runs]) + "]"


_HEADS_MAX: Final = 256
#: Past this, a float is not finite (``inf``) or not a number (``nan`` fails both sides).
_FINITE: Final = 1.7976931348623157e308


def mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be an object, got: {type(value).__name__}")
    return value


def _context(value: Any, index: int) -> dict[str, Any]:
    """A saved ``custom_context``, its fields the engine reads in the shape it reads them:
    ``mode_state`` an object whose ``run_count`` is a count, ``state`` an object (either
    may be absent or null). ``pause_reason`` and every other field are free-form."""
    context = dict(mapping(value, f"context {index}"))
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
        record = mapping(record, "a chain")
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
        record = mapping(record, "a result")
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
            return Interrupted(chain, dict(mapping(record["data"], "interrupt data")), state=state)
        if kind == "Failed":
            return Failed(chain, error_in(record["error"], ChainError))
        raise ValueError(f"unknown result type {kind!r}")

    def transition(self, record: Any, before: LLMChain | None = None) -> Transition:
        """A transition's record (``before``: the chain of the one read just before it)."""
        record = mapping(record, "a transition")
        detail = record.get("detail")
        transition = Transition(
            str(record["source"]),
            str(record["trigger"]),
            str(record["dest"]),
            self.chain(record["chain"], before),
            float(record.get("elapsed", 0.0)),
            None if detail is None else dict(mapping(detail, "a detail")),
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
        value = mapping(value, "a trace")
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
