"""The conversation's values: messages, content parts, tool calls and their results.

Every class here is a frozen attrs value; a change is a new value (``attrs.evolve``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, overload

import attrs

from ._errors import ChainError

__all__ = [
    "DEFAULT_RESULT_CONTENT",
    "Content",
    "ContentPart",
    "Message",
    "MessageDelta",
    "MessageExpansion",
    "MessageLog",
    "Role",
    "Status",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "Usage",
    "content_text",
    "message_tuple",
]

Role = Literal["system", "user", "assistant", "tool"]
#: ``length``: the reply was cut off at the token limit; ``filtered``: the provider's
#: content filter stopped it. Both end a run before the reply's tools run.
Status = Literal["complete", "cancelled", "length", "filtered"]

#: What the model reads in place of a tool result whose material was expanded into
#: the conversation.
DEFAULT_RESULT_CONTENT: Final = "The requested content has been added to the conversation."


def message_tuple(value: Iterable[Message]) -> tuple[Message, ...]:
    """A converter: messages as a tuple (a tuple passes as it is)."""
    return value if type(value) is tuple else tuple(value)


class MessageLog(Sequence["Message"]):
    """An immutable sequence of messages whose ``append`` costs O(1).

    Logs that grew from one another share one list: a log is a prefix of it,
    so appending to the newest log extends the list in place, and appending to
    an older one copies its prefix first. No log ever sees a message appended
    after it. This keeps a long run's per-turn cost flat.
    """

    __slots__ = ("_items", "_len")
    _items: list[Message]
    _len: int

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._items = list(messages)
        self._len = len(self._items)

    @classmethod
    def of(cls, value: Iterable[Message]) -> MessageLog:
        """A converter: a log passes as it is, anything iterable becomes one."""
        return value if type(value) is cls else cls(value)

    def append(self, message: Message) -> MessageLog:
        """A new log: this one plus ``message``.

        No lock: ``list.append`` is atomic, and a list only ever grows. When two
        logs of one length append at once, the one whose message did not land
        right after its prefix copies it; the other's slot is never overwritten.
        A log whose list already goes on with ``message`` shares it (a loaded
        chain's messages and exchanged messages are one log, and grow together).
        """
        items = self._items
        length = self._len
        if len(items) == length:
            items.append(message)
            if items[length] is not message:  # another log took the slot first
                items = [*items[:length], message]
        elif items[length] is not message:  # a longer log goes on with another message
            items = [*items[:length], message]
        new = object.__new__(MessageLog)
        new._items = items
        new._len = length + 1
        return new

    def __len__(self) -> int:
        return self._len

    def added_since(self, earlier: MessageLog) -> list[Message] | None:
        """The messages this log appended to ``earlier``, if it grew from it by appends
        (the two share their list, so the shorter is a prefix of the longer); None
        when it did not grow from it, or cannot tell."""
        if self._items is not earlier._items or self._len < earlier._len:
            return None
        return self._items[earlier._len : self._len]

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._len][index])
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("message index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._len)

    def __reversed__(self) -> Iterator[Message]:
        items = self._items
        for index in range(self._len - 1, -1, -1):
            yield items[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageLog | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"MessageLog({list(self)!r})"


@attrs.frozen
class ContentPart:
    """One part of a multi-part content: ``text``, ``image_url``, ``image``, ``file``..."""

    type: str
    content: str
    options: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def text(cls, content: str) -> ContentPart:
        return cls(type="text", content=content)


Content = str | tuple[ContentPart, ...] | None


def content_text(content: Content) -> str:
    """The text of a content, parts joined; non-text parts are left out."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.content for p in content if p.type == "text")


def _content(value: str | Sequence[ContentPart] | None) -> Content:
    if value is None or isinstance(value, str):
        return value
    return tuple(value)


@attrs.frozen
class ToolCall:
    """A model's request to run a tool.

    ``arguments`` is already parsed. When the model sent arguments that are not a
    JSON object, ``arguments`` is empty and ``invalid_arguments`` holds the raw
    text with the reason, so the call becomes an error result the model can fix.
    """

    call_id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    invalid_arguments: str | None = None


@attrs.frozen
class MessageExpansion:
    """Messages a tool result asks to have inserted before the next model call."""

    messages: tuple[Message, ...]
    result_content: Content = DEFAULT_RESULT_CONTENT

    @staticmethod
    def expand(
        fallback_content: Content,
        messages: Sequence[Message],
        result_content: Content = DEFAULT_RESULT_CONTENT,
    ) -> ToolResult:
        """A tool result that expands into ``messages``.

        ``fallback_content`` is what the model reads if nothing applies the
        expansion (for instance under the ``step`` mode); once applied, the
        result's content becomes ``result_content`` (``None`` keeps the fallback).
        End an expansion with a short user message: some providers read a
        trailing assistant message as a prefill.
        """
        if not isinstance(messages, list | tuple):
            raise ChainError(
                "invalid_expansion",
                f"An expansion takes a list of Message values, got: {type(messages).__name__}",
            )
        if not messages:
            raise ChainError(
                "empty_expansion",
                "An expansion needs at least one message. Return plain content instead "
                "when there is nothing to insert.",
            )
        for message in messages:
            if not isinstance(message, Message):
                raise ChainError(
                    "invalid_expansion",
                    f"An expansion holds Message values only, got: {type(message).__name__}",
                )
            if message.role not in ("user", "assistant"):
                raise ChainError(
                    "invalid_expansion_role",
                    f"Cannot expand into a message with role {message.role}. "
                    "Supported roles: user, assistant.",
                )
        expansion = MessageExpansion(messages=tuple(messages), result_content=result_content)
        return ToolResult(
            tool_call_id="", name="", content=_content(fallback_content), expansion=expansion
        )


@attrs.frozen
class ToolResult:
    """The outcome of one tool call, matched to it by ``tool_call_id``."""

    tool_call_id: str
    name: str
    content: Content
    is_error: bool = False
    is_interrupt: bool = False
    interrupt_data: Mapping[str, Any] | None = None
    state_updates: Mapping[str, Any] | None = None
    expansion: MessageExpansion | None = None

    @property
    def expandable(self) -> bool:
        """Carries an expansion that may be applied (interrupts keep theirs)."""
        return self.expansion is not None and not self.is_interrupt

    @property
    def text(self) -> str:
        return content_text(self.content)


@attrs.frozen
class Thinking:
    """The model's reasoning before its reply (Anthropic thinking, ``reasoning_content``).

    Anthropic signs each block (``signature``) and needs it back unchanged while
    a tool loop goes on; a ``redacted`` block carries only the encrypted data.
    """

    text: str = ""
    signature: str | None = None
    redacted: str | None = None


def _thinking(value: Iterable[Thinking]) -> tuple[Thinking, ...]:
    return value if type(value) is tuple else tuple(value)


@attrs.frozen
class Message:
    """One message of a conversation; an assistant's may carry its ``thinking``."""

    role: Role
    content: Content = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    status: Status = "complete"
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    thinking: tuple[Thinking, ...] = attrs.field(default=(), converter=_thinking)

    @classmethod
    def system(cls, content: str | Sequence[ContentPart]) -> Message:
        return cls(role="system", content=_content(content))

    @classmethod
    def user(cls, content: str | Sequence[ContentPart]) -> Message:
        return cls(role="user", content=_content(content))

    @classmethod
    def assistant(
        cls,
        content: str | Sequence[ContentPart] | None = None,
        tool_calls: Sequence[ToolCall] = (),
        *,
        status: Status = "complete",
        metadata: Mapping[str, Any] | None = None,
        thinking: Sequence[Thinking] = (),
    ) -> Message:
        return cls(
            role="assistant",
            content=_content(content),
            tool_calls=tuple(tool_calls),
            status=status,
            metadata=dict(metadata or {}),
            thinking=tuple(thinking),
        )

    @classmethod
    def tool(cls, results: Sequence[ToolResult]) -> Message:
        return cls(role="tool", tool_results=tuple(results))

    @property
    def text(self) -> str:
        return content_text(self.content)

    @property
    def is_tool_call(self) -> bool:
        """An assistant message asking for tools."""
        return self.role == "assistant" and bool(self.tool_calls)


@attrs.frozen
class MessageDelta:
    """A piece of a reply while it streams: text, thinking, or a fragment of a tool call.

    ``discard`` says the pieces streamed so far for this call are void: the model
    that sent them failed, and another (a fallback) answers from the start.
    """

    content: str = ""
    tool_call_index: int | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    arguments: str = ""
    thinking: str = ""
    discard: bool = False

    @property
    def kind(self) -> Literal["discard", "thinking", "tool_call", "text"]:
        if self.discard:
            return "discard"
        if self.thinking:
            return "thinking"
        if self.tool_call_index is not None:
            return "tool_call"
        return "text"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@attrs.frozen
class Usage:
    """Tokens used, by one call or summed over a run; a reply keeps its own in
    ``metadata["usage"]`` as a plain mapping.

    ``input_tokens`` counts the whole prompt, cached parts included (of which
    ``cache_read_tokens`` came from the provider's prompt cache and
    ``cache_write_tokens`` were written to it); ``output_tokens`` counts the
    whole reply, ``reasoning_tokens`` (thinking) included.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            **{
                field.name: getattr(self, field.name) + getattr(other, field.name)
                for field in attrs.fields(Usage)
            }
        )

    def to_dict(self) -> dict[str, int]:
        """Input and output always; the breakdowns when the provider reported them."""
        counts = attrs.asdict(self)
        return {k: v for k, v in counts.items() if v or k in ("input_tokens", "output_tokens")}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Usage:
        """From a mapping of counts; missing or malformed counts are 0."""
        return cls(**{f.name: _count(raw.get(f.name)) for f in attrs.fields(cls)})

    @classmethod
    def of(cls, message: Message) -> Usage | None:
        """The usage a reply reports, if any."""
        raw = message.metadata.get("usage")
        return None if raw is None or not isinstance(raw, Mapping) else cls.from_dict(raw)
