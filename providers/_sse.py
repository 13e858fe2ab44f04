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
from typing import Final

import attrs

from agentfsm.errors import SSELimitError

__all__ = ["SSEDecoder", "SSELimitError", "ServerSentEvent"]

_NEWLINE: Final = re.compile(rb"\r\n|\r|\n")


@attrs.frozen
class ServerSentEvent:
    """One dispatched event: its type (``message`` unless named), data, last id, retry."""

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

    @property
    def pending(self) -> bool:
        """An event has begun but its closing blank line has not arrived."""
        return bool(self._partial or self._data or self._event)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by ``chunk``."""
        if not chunk:
            return []
        start = 0
        if self._after_cr and chunk[:1] == b"\n":
            start = 1
        self._after_cr = False
        if b"\n" not in chunk and b"\r" not in chunk:  # the middle of a long line
            self._grow(len(chunk) - start)
            self._partial.append(chunk[start:])
            return []
        events: list[ServerSentEvent] = []
        for match in _NEWLINE.finditer(chunk, start):
            piece = chunk[start : match.start()]
            if self._partial:
                self._grow(len(piece))
                self._partial.append(piece)
                piece = b"".join(self._partial)
                self._partial = []
                self._partial_size = 0
            elif self._max_line is not None and len(piece) > self._max_line:
                raise SSELimitError("line", self._max_line)
            event = self._line(piece)
            if event is not None:
                events.append(event)
            start = match.end()
        if start < len(chunk):
            self._grow(len(chunk) - start)
            self._partial.append(chunk[start:])
        elif chunk.endswith(b"\r"):
            self._after_cr = True
        return events

    def flush(self) -> list[ServerSentEvent]:
        """At the end of the stream: an unended line and an undispatched event are dropped."""
        return []

    def _grow(self, size: int) -> None:
        self._partial_size += size
        if self._max_line is not None and self._partial_size > self._max_line:
            raise SSELimitError("line", self._max_line)

    def _line(self, raw: bytes) -> ServerSentEvent | None:
        line = raw.decode("utf-8", errors="replace")
        if not self._started:
            self._started = True
            line = line.removeprefix("\ufeff")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        match field:
            case "event":
                self._event = value
            case "data":
                self._data_size += len(value) + 1
                if self._max_event is not None and self._data_size > self._max_event:
                    raise SSELimitError("event", self._max_event)
                self._data.append(value)
            case "id":
                if "\0" not in value:
                    self._id = value
            case "retry":
                if value.isdigit():
                    self._retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._data:
            self._event = ""
            return None
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
