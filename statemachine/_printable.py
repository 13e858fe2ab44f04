"""Text from a run, made harmless for a terminal: every view prints data through here.

A model, a tool or a saved file can hold escape sequences (clear the screen,
set the window title, rewrite the line) and rich markup (``[red]``); printed
as is, they act. :func:`printable` spells every control character out as a
JSON-style escape (``\\u001b``), so the text shows what it holds, and also
stays valid inside a JSON string; :func:`shown` wraps that in a rich
:class:`~rich.text.Text`, which rich never reads as markup.
"""

from __future__ import annotations

import re
from typing import Final

from rich.text import Text

__all__ = ["printable", "shown"]

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
