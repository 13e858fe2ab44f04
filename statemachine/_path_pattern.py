"""Path patterns: the states a run visited, matched as ``assert_path`` and evals take them.

A pattern is a space-separated state list, or groups and repetition over states:
``"(expanding calling interrupt_check executing propagating until_check deciding)+ ok"``
(``+ * ?`` and ``{n}`` / ``{n,m}``); a word that is no state of the machine is refused.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["compile_path"]

_TOKEN = re.compile(r"\(|\)|[+*?]|\{\d+(?:,\d*)?\}|[A-Za-z_][A-Za-z0-9_]*|\S")


@lru_cache(maxsize=256)
def compile_path(pattern: str, states: frozenset[str]) -> re.Pattern[str]:
    """``pattern`` as a regular expression over a path written ``"state state ... "``."""
    parts = []
    for token in _TOKEN.findall(pattern):
        if token == "(":
            parts.append("(?:")
        elif token == ")" or token in "+*?" or token.startswith("{"):
            parts.append(token)
        elif token in states:
            parts.append(f"(?:{token} )")
        else:
            raise ValueError(
                f"{token!r} in path pattern {pattern!r} is not a state; states: {sorted(states)}"
            )
    return re.compile("".join(parts))
