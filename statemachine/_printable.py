"""Text from a run, made harmless for a terminal: every view prints data through here.

A model, a tool or a saved file can hold escape sequences (clear the screen,
set the window title, rewrite the line) and rich markup (``[red]``); printed
as is, they act. :func:`printable` spells every control character out as a
JSON-style escape (``\\u001b``), so the text shows what it holds, and also
stays valid inside a JSON string; :func:`shown` wraps that in a rich
:class:`~rich.text.Text`, which rich never reads as markup.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Final

from rich.text import Text

if TYPE_CHECKING:
    from ._messages import Message

__all__ = ["message_line", "printable", "short", "shown"]

#: C0 controls but tab and newline, DEL, C1 controls (0x9b is CSI on its own),
#: and the bidirectional overrides that reorder what a line seems to say.
_UNSAFE: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _spell(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(value: object) -> str:
    """``str(value)`` with every control character but tab and newline spelled out."""
    return _UNSAFE.sub(_spell, value if isinstance(value, str) else str(value))


def shown(value: object, style: str = "") -> Text:
    """``value`` as rich text: control characters spelled out, markup left as written."""
    return Text(printable(value), style=style)


def short(text: str | None, width: int = 60) -> str:
    """``text`` on one line (its runs of white space one space), cut to ``width``."""
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def message_line(message: Message) -> str:
    """One message on one line, as ``runs show`` lists it (SQLite and durable runs alike)."""
    if message.tool_results:
        body = "; ".join(
            f"{r.name}{' (error)' if r.is_error else ''}: {short(r.text, 50)}"
            for r in message.tool_results
        )
    elif message.tool_calls:
        calls = ", ".join(f"{c.name}({json.dumps(dict(c.arguments))})" for c in message.tool_calls)
        body = short((message.text + " " if message.text else "") + "calls " + calls, 90)
    else:
        body = short(message.text, 90)
    return f"  {message.role:>9}: {body}"
