"""The store's file: its format, opening it read-only, and SQLite's errors as the store's."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Final

from .._serialization import FormatError, check_format
from ._base import StoreError

#: The file's format. In format 3 a transition's chain may be a record of what it
#: changed in the chain of the transition before it; format 2 wrote every chain in
#: full, with a checkpoint's rows as JSON values in its document; format 1 kept each
#: row as a JSON string inside the document, escaped a second time. All are read; an
#: older file becomes format 3 with its first write (so an agentfsm that reads only
#: the older formats refuses it instead of misreading it).
_FORMAT_VERSION: Final = 3
_FORMAT: Final = f"agentfsm/{_FORMAT_VERSION}"

#: The tables of stores made before the log (their rows are read first, the log's after).
_LEGACY_TABLES: Final = ("segments", "messages", "contexts", "transitions")


def _store_error(path: str, exc: sqlite3.DatabaseError) -> StoreError:
    """SQLite's error about the file itself as a :class:`StoreError` that names it."""
    if isinstance(exc, sqlite3.OperationalError):
        if "locked" in str(exc) or "busy" in str(exc):
            return StoreError(
                f"The store {path} stayed locked by another process past the timeout: {exc}"
            )
        return StoreError(f"The store {path} cannot be used: {exc}")
    return StoreError(
        f"The store {path} is damaged or is not an agentfsm store ({exc}); "
        "restore it from a backup or start a new one."
    )


@contextlib.contextmanager
def _guard(path: str) -> Iterator[None]:
    """:func:`_store_error` around a block."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise _store_error(path, exc) from exc


def _read_only_uri(path: str | os.PathLike[str]) -> str:
    """The URI that opens the file at ``path`` for reading only (SQLite's ``mode=ro``)."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"


def _open_read_only(path: str, timeout: float) -> sqlite3.Connection:
    """A connection that cannot write (SQLite's ``mode=ro``), to a checked agentfsm store."""
    con = sqlite3.connect(_read_only_uri(path), uri=True, timeout=timeout, check_same_thread=False)
    try:
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
        if not {"meta", "runs"} <= tables:
            raise FormatError(f"{path} is not an agentfsm store (it has no agentfsm tables)")
        row = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        _check_format(path, None if row is None else row[0])
    except sqlite3.DatabaseError as exc:
        con.close()
        raise FormatError(f"{path} is not an agentfsm store, or a damaged one: {exc}") from exc
    except FormatError:
        con.close()
        raise
    return con


def _check_format(path: str, fmt: object) -> None:
    """Refuse a store file of a format this version does not read."""
    try:
        check_format({"format": fmt}, newest=_FORMAT_VERSION)
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from exc


def _tables(con: sqlite3.Connection) -> tuple[str, ...]:
    """The tables that hold runs' rows in this file: the log, and those made before it."""
    names = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return tuple(table for table in ("log", *_LEGACY_TABLES) if table in names)
