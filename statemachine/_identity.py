"""What a table's fingerprint covers: its states, entries, edges, and each step's name and code.

A step's *code* is a digest of what it does, the same in every process that
loads the same source:

* a function: its qualified name, its source as a syntax tree (decorators included,
  so ``@effects(...)`` counts; comments, docstrings and layout do not, so a
  release that rewords a step's docstring keeps every saved run's fingerprint), the
  global and attribute names and the local names its code uses, where a lambda
  starts on its line (two lambdas on one line differ), its defaults and the values
  its closure holds;
* a ``functools.partial``: the function's code and the bound arguments;
* a bound method: its function's code and its object's class;
* a callable object: its class, its ``__call__``'s code, and its attributes
  (a child machine by its fingerprint);
* a function whose source cannot be read (made by ``exec``, typed at a prompt):
  its compiled code (bytecode, constants, names) instead, which another Python
  version may compile otherwise.

Values count when they are plain data (None, booleans, numbers, text, and lists
and string-keyed maps of them), a callable by its code, a table by its
fingerprint, anything else by its type's name only: no ``id()`` and no ``repr``
of an object, so nothing changes from one process to the next.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import textwrap
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ._machine import MachineTable

__all__ = ["compute_identity", "fingerprint_of", "names_identity", "step_code", "step_name"]

#: How deep a step's values are followed (a closure holding a function holding...).
_DEPTH: Final = 4


def step_name(step: Any) -> str:
    """A step's name in a fingerprint: its qualified name (a callable object's class's)."""
    name = getattr(step, "__qualname__", None)
    if not isinstance(name, str):
        func = getattr(step, "func", None)  # functools.partial
        name = getattr(func, "__qualname__", None) or type(step).__qualname__
    return str(name)


def step_code(step: Any) -> str:
    """16 hex digits of what ``step`` does (see the module): equal in every process."""
    return _digest(_described(step, _DEPTH))


def names_identity(table: MachineTable) -> dict[str, Any]:
    """The states, entries, edges and step names of ``table``: what fingerprints covered
    before they covered the steps' code (a run saved then recorded this one's hash)."""
    return {
        "working": sorted(table.working),
        "terminals": sorted(table.terminals),
        "entries": {k: table.entries[k] for k in sorted(table.entries)},
        "edges": sorted(
            [e.source, e.dest, e.trigger, getattr(e.on, "__name__", str(e.on))] for e in table.edges
        ),
        "steps": {s: [step_name(step) for step in table.steps[s]] for s in sorted(table.steps)},
    }


def compute_identity(table: MachineTable) -> dict[str, Any]:
    """What :attr:`MachineTable.fingerprint` hashes, as plain JSON data: the names'
    identity and ``code``, each state's steps' :func:`step_code` (a table keeps it:
    :func:`agentfsm.machine.identity`)."""
    return {
        **names_identity(table),
        "code": {s: [step_code(step) for step in table.steps[s]] for s in sorted(table.steps)},
    }


def fingerprint_of(data: Mapping[str, Any]) -> str:
    """The fingerprint of :func:`identity` data: 16 hex digits of its SHA-256."""
    return _digest(data)


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _described(value: Any, depth: int) -> Any:
    """``value`` as plain data for a digest (see the module)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return repr(value)
    if depth <= 0:
        return {"type": type(value).__qualname__}
    if isinstance(value, list | tuple):
        return [_described(v, depth - 1) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _described(v, depth - 1) for k, v in value.items()}
    fingerprint = getattr(value, "fingerprint", None)
    if isinstance(fingerprint, str) and hasattr(value, "steps"):  # a machine table
        return {"machine": fingerprint}
    if isinstance(value, functools.partial):
        return {
            "partial": _described(value.func, depth - 1),
            "args": [_described(a, depth - 1) for a in value.args],
            "keywords": {k: _described(v, depth - 1) for k, v in value.keywords.items()},
        }
    if isinstance(value, types.MethodType):
        return {
            "method": _described(value.__func__, depth - 1),
            "of": type(value.__self__).__qualname__,
        }
    if isinstance(value, types.FunctionType):
        return _function(value, depth)
    if callable(value) and not isinstance(value, type):
        call = type(value).__call__
        attributes = getattr(value, "__dict__", {})
        return {
            "object": type(value).__qualname__,
            "call": _function(call, depth) if isinstance(call, types.FunctionType) else None,
            "attributes": {
                k: _described(v, depth - 1) for k, v in sorted(attributes.items()) if k[:1] != "_"
            },
        }
    return {"type": type(value).__qualname__, "name": getattr(value, "__qualname__", None)}


def _function(function: types.FunctionType, depth: int) -> dict[str, Any]:
    code = function.__code__
    closure = []
    for cell in function.__closure__ or ():
        try:
            closure.append(_described(cell.cell_contents, depth - 1))
        except ValueError:  # an empty cell
            closure.append(None)
    source = _source(code)
    return {
        "function": function.__qualname__,
        "source": source,
        "compiled": None if source is not None else _compiled(code),
        "names": list(code.co_names),
        "locals": list(code.co_varnames),
        "column": _column(code),
        "defaults": _described(list(function.__defaults__ or ()), depth - 1),
        "kwdefaults": _described(dict(function.__kwdefaults__ or {}), depth - 1),
        "closure": closure,
    }


def _source(code: types.CodeType) -> str | None:
    try:
        text = textwrap.dedent(inspect.getsource(code))
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a lambda's line, say, that is no statement on its own
        return inspect.cleandoc(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]  # the docstring says why, not what
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _column(code: types.CodeType) -> int | None:
    """Where a lambda's first instruction with a place in the source starts on its line
    (None for a ``def``, whose tree tells it apart)."""
    if code.co_name != "<lambda>":
        return None
    for _, _, column, end in code.co_positions():
        if column is not None and end is not None and end > column:
            return column
    return None


def _compiled(code: types.CodeType) -> dict[str, Any]:
    return {
        "bytecode": code.co_code.hex(),
        "constants": [
            _compiled(c) if isinstance(c, types.CodeType) else _described(c, 1)
            for c in code.co_consts
        ],
        "names": list(code.co_names),
    }
