"""Server-sent events, decoded as the HTML standard says, from raw bytes.

Lines end at ``\\r\\n``, ``\\n`` or ``\\r`` only (a text line splitter would also
break on U+2028 and friends, which JSON may carry unescaped). A blank line
dispatches the event; ``:`` starts a comment; ``data`` lines of one event are
joined with ``\\n``; an event cut off by the end of the stream is discarded.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

__all__ = ["SSEDecoder", "ServerSentEvent"]

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

    def __init__(self) -> None:
        self._buffer = b""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._retry: int | None = None

    @property
    def pending(self) -> bool:
        """An event has begun but its closing blank line has not arrived."""
        return bool(self._buffer or self._data or self._event)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by ``chunk``."""
        data = self._buffer + chunk
        events: list[ServerSentEvent] = []
        start = 0
        for match in _NEWLINE.finditer(data):
            if match.group() == b"\r" and match.end() == len(data):
                break  # maybe the first half of a \r\n split across chunks
            event = self._line(data[start : match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        self._buffer = data[start:]
        return events

    def flush(self) -> list[ServerSentEvent]:
        """At the end of the stream: a line ended by a lone ``\\r`` still counts."""
        if not self._buffer.endswith(b"\r"):
            return []
        return self.feed(b"\n")

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
            self._event or "message", "\n".join(self._data), self._id, self._retry
        )
        self._event = ""
        self._data = []
        return event
