"""Server-sent events, decoded as the HTML standard says, from raw bytes.

Lines end at ``\\r\\n``, ``\\n`` or ``\\r`` only (a text line splitter would also
break on U+2028 and friends, which JSON may carry unescaped). A blank line
dispatches the event; ``:`` starts a comment; ``data`` lines of one event are
joined with ``\\n``; an event cut off by the end of the stream is discarded.

Each byte is scanned once, so decoding is linear in the stream however it is
cut into chunks; a line or an event larger than its bound raises
:class:`SSELimitError` as soon as it passes it.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from agentfsm._errors import SSELimitError

__all__ = ["SSEDecoder", "SSELimitError", "ServerSentEvent"]

_NEWLINE: Final = re.compile(rb"\r\n|\r|\n")
_CR: Final = ord("\r")
_COLON: Final = ord(":")
#: A byte-order mark, which the first line may start with (UTF-8's, as bytes).
_BOM: Final = "\ufeff".encode()


class ServerSentEvent(NamedTuple):
    """One dispatched event: its type (``message`` unless named), data, last id, retry.

    A named tuple: a stream makes one per chunk, and a tuple is made in a third of the
    time a frozen attrs class takes."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Incremental decoder: ``feed`` it chunks as they arrive, get whole events back."""

    def __init__(self, *, max_line: int | None = None, max_event: int | None = None) -> None:
        self._max_line = max_line
        self._max_event = max_event
        self._partial: list[bytes] = []  # the pieces of the line not yet ended
        self._partial_size = 0
        self._after_cr = False  # the last line ended with \r: a leading \n belongs to it
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0
        self._id: str | None = None
        self._retry: int | None = None
        #: Nothing begun and no bound nearer than this: a chunk of this size or less
        #: that is one whole event may be read at once (:meth:`feed`'s first path).
        self._whole = 0
        #: The size of chunk no line or event in it can pass a bound in.
        self._bound = min(
            (bound for bound in (max_line, max_event) if bound is not None), default=1 << 62
        )

    @property
    def pending(self) -> bool:
        """An event has begun but its closing blank line has not arrived."""
        return bool(self._partial or self._data or self._event)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by ``chunk``.

        Most often a chunk is one whole event, as a server writes it: one ``data: ``
        line, or an ``event: `` line and a ``data: `` line, and a blank line. With
        nothing begun before it (no line, no event, no ``\\r`` before), such a chunk
        is read here at once; any other goes line by line (:meth:`_feed`)."""
        if len(chunk) <= self._whole and chunk[-2:] == b"\n\n" and chunk.find(b"\r") == -1:
            head = chunk[:6]
            if head == b"data: ":
                value = chunk[6:-2]
                if value.find(b"\n") == -1:
                    data = value.decode("utf-8", "replace")
                    return [ServerSentEvent("message", data, self._id, self._retry)]
            elif head == b"event:" and chunk[6:7] == b" ":
                name, _, value = chunk[7:-2].partition(b"\n")
                if value[:6] == b"data: " and value.find(b"\n") == -1:
                    data = value[6:].decode("utf-8", "replace")
                    event = name.decode("utf-8", "replace") or "message"
                    return [ServerSentEvent(event, data, self._id, self._retry)]
        self._whole = 0  # the state may change: whether it is clean is known at the end
        events = self._feed(chunk)
        if self._started and not (self._partial or self._after_cr or self._data or self._event):
            self._whole = self._bound
        return events

    def _feed(self, chunk: bytes) -> list[ServerSentEvent]:
        if not chunk:
            return []
        start = 0
        if self._after_cr and chunk[:1] == b"\n":
            start = 1
        self._after_cr = False
        last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))  # where the last ended line ends
        if last < start:  # the middle of a long line (or the \n of a \r\n cut in two)
            if start < len(chunk):
                self._grow(len(chunk) - start)
                self._partial.append(chunk[start:])
            return []
        ended = chunk[start : last + 1]
        events: list[ServerSentEvent] = []
        if b"\r" in ended:
            lines = _NEWLINE.split(ended)
            lines.pop()  # the empty text after the last line's end
            lines[0] = self._first(lines[0])
            self._lines(lines, events)
        else:
            if self._partial or not self._started:
                head, _, ended = ended.partition(b"\n")
                self._lines([self._first(head)], events)
            self._blocks(ended, events)
        if last + 1 < len(chunk):
            self._grow(len(chunk) - last - 1)
            self._partial.append(chunk[last + 1 :])
        elif chunk[last] == _CR:
            self._after_cr = True
        return events

    def _first(self, raw: bytes) -> bytes:
        """A chunk's first ended line: the rest of the line the last chunk began, and
        without the stream's byte-order mark (after the line's length is checked)."""
        if self._partial:
            self._grow(len(raw))
            self._partial.append(raw)
            raw = b"".join(self._partial)
            self._partial = []
            self._partial_size = 0
        if not self._started:
            self._started = True
            if self._max_line is not None and len(raw) > self._max_line:
                raise SSELimitError("line", self._max_line)  # the mark counts, as it did
            raw = raw.removeprefix(_BOM)
        return raw

    def _blocks(self, ended: bytes, events: list[ServerSentEvent]) -> None:
        """Lines ended by ``\\n`` alone. An event the last chunk began is finished line
        by line; then, most often, every event left is one ``data: `` line, or one
        ``event: `` line and one ``data: `` line, and the chunk is read at once;
        otherwise it is cut at its blank lines, and a block of one ``data`` line read
        as an event at once, the others line by line."""
        if self._data or self._event or ended[:1] == b"\n":
            ended = self._finish(ended, events)
        if self._only_data(ended, events) or self._named(ended, events):
            return
        blocks = ended.split(b"\n\n")
        rest = blocks.pop()  # the lines after the last blank one
        max_line, max_event = self._max_line, self._max_event
        for block in blocks:  # each begins no event begun before (the one before ended)
            # find, not ``in``: bytes' ``in`` first tries its operand as a byte's number,
            # which raises (and costs an error message) for bytes
            if block.startswith(b"data:") and block.find(b"\n") == -1:
                if max_line is not None and len(block) > max_line:
                    raise SSELimitError("line", max_line)
                value = block[5:].decode("utf-8", "replace")
                if value[:1] == " ":
                    value = value[1:]
                if max_event is not None and len(value) + 1 > max_event:
                    raise SSELimitError("event", max_event)
                events.append(ServerSentEvent(data=value, id=self._id, retry=self._retry))
            else:
                lines = block.split(b"\n")
                lines.append(b"")  # the blank line that ended the block
                self._lines(lines, events)
        if rest:
            lines = rest.split(b"\n")
            lines.pop()  # the empty text after the last line's end
            self._lines(lines, events)

    def _finish(self, ended: bytes, events: list[ServerSentEvent]) -> bytes:
        """The lines up to the first blank line, one by one (they end the event the
        last chunk began); what follows that blank line."""
        if ended[:1] == b"\n":
            self._lines([b""], events)
            return ended[1:]
        head, blank, rest = ended.partition(b"\n\n")
        lines = head.split(b"\n")
        if blank:
            lines.append(b"")  # the blank line
        else:
            lines.pop()  # the empty text after the last line's end
        self._lines(lines, events)
        return rest

    def _bounded(self, size: int) -> bool:
        """Whether no line and no event in ``size`` bytes can pass a bound: a part of a
        chunk this small may be read at once, without the checks line by line."""
        return (self._max_line is None or size <= self._max_line) and (
            self._max_event is None or size <= self._max_event
        )

    def _only_data(self, ended: bytes, events: list[ServerSentEvent]) -> bool:
        """Whether ``ended`` (no event begun before it) is only events of one
        ``data: `` line each, read here at once: decoded whole, cut at each
        ``\\n\\ndata: ``, each piece an event's data when no piece holds a line end.

        No line or event in it can pass a bound its whole size is within; one that
        may is left to the checks line by line. Decoding the whole is decoding line
        by line: a line end is never part of a malformed sequence."""
        if (
            not ended.startswith(b"data: ")
            or not ended.endswith(b"\n\n")
            or not self._bounded(len(ended))
        ):
            return False
        values = ended.decode("utf-8", "replace").split("\n\ndata: ")
        values[0] = values[0][6:]
        values[-1] = values[-1][:-2]
        if "\n" in "".join(values):  # a piece holds a line end
            return False
        last_id, retry = self._id, self._retry
        # positional: a named tuple's keywords cost more, once per event
        events.extend([ServerSentEvent("message", value, last_id, retry) for value in values])
        return True

    def _named(self, ended: bytes, events: list[ServerSentEvent]) -> bool:
        """Whether ``ended`` (no event begun before it) is events of one ``event: ``
        line and one ``data: `` line each, the shape Anthropic's and OpenAI's Responses
        streams take, read here at once. The lines after its last blank line (the
        event a chunk cut in two begins) are read one by one, as in ``_blocks``.

        Cut at each line end, each third line blank; the names and the data lines
        each joined back, decoded and cut at each ``\\nevent: `` or ``\\ndata: ``:
        one piece per line, or it is not the shape. Bounds and decoding as in
        ``_only_data``."""
        whole = ended.rfind(b"\n\n") + 2  # the size of the events it ends (1: none)
        if not ended.startswith(b"event: ") or whole < 2 or not self._bounded(whole):
            return False
        lines = ended[:whole].split(b"\n")
        lines.pop()  # the empty text after the last blank line
        count = len(lines) // 3
        if len(lines) % 3 or any(lines[2::3]):  # not name, data, blank, name, ...
            return False
        names = b"\n".join(lines[::3]).decode("utf-8", "replace").split("\nevent: ")
        values = b"\n".join(lines[1::3]).decode("utf-8", "replace").split("\ndata: ")
        if len(names) != count or len(values) != count or not values[0].startswith("data: "):
            return False
        names[0] = names[0][7:]
        values[0] = values[0][6:]
        last_id, retry = self._id, self._retry
        events.extend(
            [
                ServerSentEvent(name or "message", value, last_id, retry)
                for name, value in zip(names, values, strict=True)
            ]
        )
        if whole < len(ended):
            rest = ended[whole:].split(b"\n")
            rest.pop()  # the empty text after the last line's end
            self._lines(rest, events)
        return True

    def _lines(self, lines: list[bytes], events: list[ServerSentEvent]) -> None:
        """Ended lines, one by one."""
        max_line, max_event, data = self._max_line, self._max_event, self._data
        for raw in lines:
            if max_line is not None and len(raw) > max_line:
                raise SSELimitError("line", max_line)
            if not raw:
                if data:
                    events.append(self._dispatch())
                    data = self._data
                else:
                    self._event = ""
            elif raw.startswith(b"data:"):
                value = raw[5:].decode("utf-8", "replace")
                if value[:1] == " ":
                    value = value[1:]
                self._data_size += len(value) + 1
                if max_event is not None and self._data_size > max_event:
                    raise SSELimitError("event", max_event)
                data.append(value)
            elif raw[0] != _COLON:
                self._field(raw.decode("utf-8", "replace"))

    def flush(self) -> list[ServerSentEvent]:
        """At the end of the stream: an unended line and an undispatched event are dropped."""
        return []

    def _grow(self, size: int) -> None:
        self._partial_size += size
        if self._max_line is not None and self._partial_size > self._max_line:
            raise SSELimitError("line", self._max_line)

    def _field(self, line: str) -> None:
        """One line that is not blank and not a comment."""
        field, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        match field:
            case "data":  # "data" with no colon: an empty line of data
                self._data_size += len(value) + 1
                if self._max_event is not None and self._data_size > self._max_event:
                    raise SSELimitError("event", self._max_event)
                self._data.append(value)
            case "event":
                self._event = value
            case "id":
                if "\0" not in value:
                    self._id = value
            case "retry":
                if value.isdigit():
                    self._retry = int(value)

    def _dispatch(self) -> ServerSentEvent:
        """The event a blank line ends (it has data), and a fresh one begun."""
        event = ServerSentEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id,
            retry=self._retry,
        )
        self._event = ""
        self._data = []
        self._data_size = 0
        return event
