"""JSON documents of the engine's values: messages, chains, agent states, results, traces.

One cattrs converter writes the plain values (messages and their parts, tool
calls and results with their expansions and interrupts, agent states,
errors). Chains, pipeline results and traces are written around it, because a
chain holds live objects that are not data:

* the model is written as its ``name``, the tools as their names, and the
  callbacks not at all. Loading binds them again from what the caller passes:
  ``models`` (by name), ``tools`` and ``callbacks``. A model that was not passed
  loads as an :class:`UnboundModel`, so a trace can be read and shown with no
  model at hand (calling it fails with a ``ChainError`` that says what to pass).
  A tool name that was not passed is an :class:`UnknownToolError`, unless
  ``strict=False`` binds a placeholder whose calls return an error result.
* the chains of one document share their messages, so a document keeps each
  message once, in its ``messages`` table, and each ``custom_context`` once, in
  ``contexts``; a chain is a small record of index runs into them. A trace of
  200 steps holds the conversation once, not 200 times.

Every document reads ``{"format": "agentfsm/1", "type": ..., "value": ...}``;
one written by a newer format is refused with a :class:`FormatError`. Values
typed ``Any`` (arguments, metadata, ``custom_context``, agent state, interrupt
data, error details, pause reasons) must be JSON values; tuples among them come
back as lists.
"""

from __future__ import annotations

from .._errors import FormatError, UnknownToolError
from ._binding import Binder, Models, UnboundModel, unbound_tool
from ._converter import converter
from ._documents import (
    FORMAT,
    FORMAT_VERSION,
    Serializable,
    check_format,
    dump,
    dump_trace,
    dumps,
    load,
    load_trace,
    loads,
)
from ._json import compact_json, parse_json
from ._packing import Packer, Unpacker

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Binder",
    "FormatError",
    "Models",
    "Packer",
    "Serializable",
    "UnboundModel",
    "UnknownToolError",
    "Unpacker",
    "check_format",
    "compact_json",
    "converter",
    "dump",
    "dump_trace",
    "dumps",
    "load",
    "load_trace",
    "loads",
    "parse_json",
    "unbound_tool",
]
