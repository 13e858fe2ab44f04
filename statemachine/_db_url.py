"""What ``--db`` (and a durable engine's ``db``) may name: a SQLite file path, or a URL of
SQLite or PostgreSQL; for the commands that read runs (``runs``, ``view``, ``studio``), a
Temporal server too, ``temporal://HOST:PORT/NAMESPACE``. Anything else is refused in one
line that says what was meant, before a driver sees it (a ``mysql://`` URL is no SQLite
file; a port that is not a number is no connection).

Pure text checks: the ``runs``, ``view`` and ``worker`` commands and the engine share them,
and none needs a driver to say what is wrong.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["TEMPORAL_PORT", "URL_SCHEMES", "check_db", "shown", "temporal_target"]

#: The URL schemes a database is named by (``postgresql+DRIVER`` too).
URL_SCHEMES: Final = ("postgresql", "postgres", "sqlite")
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_PASSWORD: Final = re.compile(r"(://[^:/@]*:)[^@/]*@")
_PORT: Final = re.compile(r"://(?:[^@/]*@)?(?:\[[^\]]*\]|[^:/?]*)(?::([^/?]*))?")
#: A Temporal server as ``--db`` names it: ``temporal://HOST[:PORT][/NAMESPACE]``.
_TEMPORAL: Final = re.compile(
    r"temporal://(?P<host>\[[^\]]*\]|[^:/?#@]+)(?::(?P<port>[^/?#]*))?(?:/(?P<ns>[^/?#]*))?/?\Z",
    re.I,
)
#: The port of a Temporal server ``temporal://HOST`` names (its frontend's default).
TEMPORAL_PORT: Final = 7233


def shown(db: str) -> str:
    """``db`` as an error may quote it: a password in a URL is ``***``."""
    return _PASSWORD.sub(r"\1***@", db)


def temporal_target(db: str) -> tuple[str, str] | None:
    """The ``HOST:PORT`` and namespace a ``temporal://HOST[:PORT][/NAMESPACE]`` URL names
    (port 7233 and namespace ``default`` when left out); None for anything else, and
    ValueError for a ``temporal://`` URL that names no server."""
    if db[: len("temporal://")].lower() != "temporal://":
        return None
    match = _TEMPORAL.match(db)
    if match is None:
        raise ValueError(
            f"{db}: a Temporal server is temporal://HOST:PORT/NAMESPACE "
            "(e.g. temporal://127.0.0.1:7233/default)"
        )
    port = match["port"] or str(TEMPORAL_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{db}: the port {port!r} is not a number from 1 to 65535")
    return f"{match['host']}:{port}", match["ns"] or "default"


def check_db(db: str, *, flag: str = "db", temporal: bool = False) -> str:
    """``db`` itself when it names a database (with ``temporal``, a Temporal server's
    ``temporal://`` URL too); else ValueError saying in one line what is wrong with it
    (``flag`` names the option it came from, as the message should)."""
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
    if scheme == "temporal":
        if not temporal:
            raise ValueError(
                f"{flag} {shown(db)}: a Temporal server is no database; a worker on it is "
                "'agentfsm worker --engine temporal --address HOST:PORT', a client "
                "agentfsm.temporal.Engine(address)"
            )
        try:
            temporal_target(db)
        except ValueError as exc:
            raise ValueError(f"{flag} {exc}") from None
        return db
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
