"""Temporal payloads written with agentfsm's own serialization.

Activity arguments and results are agentfsm values (messages, tool calls and
results, agent states, errors) and small attrs records of them. Temporal's
default JSON converter knows none of them, and a second serializer would be a
second format to keep readable: so they cross Temporal as agentfsm JSON
(``{"format": "agentfsm/1", "type": ..., "value": ...}``) under the encoding
``json/agentfsm``, and are read back with the same cattrs converter the store
and the DBOS engine use. Plain JSON values go through Temporal's own converters.
"""

from __future__ import annotations

import json
from typing import Any, Final

import attrs
import temporalio.api.common.v1
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
)

from agentfsm import ChainError
from agentfsm._serialization import FORMAT, check_format, converter

__all__ = ["ENCODING", "AgentfsmPayloadConverter", "data_converter"]

ENCODING: Final = "json/agentfsm"


class _AgentfsmEncoding(EncodingPayloadConverter):
    """attrs values (and ChainError) as agentfsm documents; anything else is declined."""

    @property
    def encoding(self) -> str:
        return ENCODING

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        kind = type(value)
        if not (attrs.has(kind) or isinstance(value, ChainError)):
            return None
        document = {
            "format": FORMAT,
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "value": converter.unstructure(value, kind),
        }
        return temporalio.api.common.v1.Payload(
            metadata={"encoding": ENCODING.encode()},
            data=json.dumps(document, separators=(",", ":"), sort_keys=True).encode(),
        )

    def from_payload(
        self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None
    ) -> Any:
        document = json.loads(payload.data)
        check_format(document)
        if type_hint is None or type_hint is Any:
            return document["value"]
        return converter.structure(document["value"], type_hint)


class AgentfsmPayloadConverter(CompositePayloadConverter):
    """Temporal's default converters, with agentfsm's documents tried before plain JSON."""

    def __init__(self) -> None:
        defaults = list(DefaultPayloadConverter.default_encoding_payload_converters)
        super().__init__(*defaults[:-1], _AgentfsmEncoding(), defaults[-1])


#: The data converter of every agentfsm client and worker (both ends must use it).
data_converter: Final = DataConverter(payload_converter_class=AgentfsmPayloadConverter)
