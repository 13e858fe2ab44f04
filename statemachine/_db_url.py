"""What ``--db`` (and a durable engine's ``db``) may name: a SQLite file path, or a URL of
SQLite or PostgreSQL. Anything else is refused in one line that says what was meant,
before a driver sees it (a ``mysql://`` URL is no SQLite file; a port that is not a
number is no connection).

Pure text checks: the ``runs``, ``view`` and ``worker`` commands and the engine share them,
and none needs a driver to say what is wrong.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["URL_SCHEMES", "check_db", "shown"]

#: The URL schemes a database is named by (``postgresql+DRIVER`` too).
URL_SCHEMES: Final = ("postgresql", "postgres", "sqlite")
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_PASSWORD: Final = re.compile(r"(://[^:/@]*:)[^@/]*@")
_PORT: Final = re.compile(r"://(?:[^@/]*@)?(?:\[[^\]]*\]|[^:/?]*)(?::([^/?]*))?")


def shown(db: str) -> str:
    """``db`` as an error may quote it: a password in a URL is ``***``."""
    return _PASSWORD.sub(r"\1***@", db)


def check_db(db: str, *, flag: str = "db") -> str:
    """``db`` itself when it names a database; else ValueError saying in one line what is
    wrong with it (``flag`` names the option it came from, as the message should)."""
    if not db.strip():
        raise ValueError(
            f"{flag} is empty: give a SQLite file path or a URL "
            "(postgresql://USER@HOST/DATABASE, sqlite:///FILE)"
        )
    match = _SCHEME.match(db)
    if match is None:
        return db  # a file path
    scheme = match[1].lower()
    family = scheme.split("+", 1)[0]
    if family not in URL_SCHEMES or (family != "postgresql" and "+" in scheme):
        raise ValueError(
            f"{flag} {shown(db)}: {scheme}:// is not a database agentfsm runs on; did you "
            "mean postgresql://USER@HOST/DATABASE, or a SQLite file (a path, or sqlite:///FILE)?"
        )
    if family != "sqlite":
        port = _PORT.match(db, match.end() - 3)
        number = port[1] if port is not None else None
        if number and (not number.isdigit() or not 0 < int(number) < 65536):
            raise ValueError(
                f"{flag} {shown(db)}: the port {number!r} is not a number from 1 to 65535"
            )
    return db
