"""Binding a loaded chain again to what is live: the caller's models, tools, callbacks.

A document names its model and tools; loading finds them among what the caller
passes. A model not passed is an :class:`UnboundModel` (a trace still reads),
a tool not passed is an :class:`UnknownToolError` or, not strict, a stand-in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from .._chain import Callbacks, LLMChain
from .._errors import ChainError, UnknownToolError
from .._messages import Message
from .._tools import Tool

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel

__all__ = ["Binder", "Models", "UnboundModel", "unbound_tool"]

#: Models to bind on load: by name, or a list of models (each under its ``name``).
Models: TypeAlias = "Mapping[str, ChatModel] | Iterable[ChatModel]"


@attrs.frozen
class UnboundModel:
    """Stands in for a model that was not passed on load: traces read, calls fail clearly."""

    name: str

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, on_delta: Any = None
    ) -> Message:
        raise ChainError(
            "unbound_model",
            f"The model {self.name!r} was not bound when this chain was loaded, so it cannot "
            f"be called. Pass it when loading: models={{{self.name!r}: <your ChatModel>}}.",
            retryable=False,
        )


def unbound_tool(name: str) -> Tool:
    """A stand-in for a tool that was not passed on load: any call is an error result."""

    def unbound(**_: Any) -> Any:
        raise ChainError(
            "unbound_tool",
            f"The tool {name!r} was not bound when this chain was loaded; pass it in tools=[...].",
        )

    return Tool(
        name,
        f"Unbound: the tool {name!r} was not passed when this chain was loaded.",
        unbound,
        parameters={"type": "object", "properties": {}, "additionalProperties": True},
    )


# ---------------------------------------------------------------- the converter


class Binder:
    """What a loaded chain is bound to: the caller's models, tools and callbacks."""

    def __init__(
        self,
        models: Models | None,
        tools: Sequence[Tool],
        callbacks: Sequence[Callbacks],
        strict: bool,
    ) -> None:
        if models is None:
            models = {}
        self.models: dict[str, ChatModel] = (
            dict(models) if isinstance(models, Mapping) else {m.name: m for m in models}
        )
        self.tools = {t.name: t for t in tools}
        # Validated here, so a bad mapping is the caller's ValueError, not a FormatError.
        self.callbacks = LLMChain(UnboundModel("-"), callbacks=callbacks).callbacks
        self.strict = strict
        self._toolsets: dict[tuple[str, ...], tuple[Tool, ...]] = {}

    def model(self, name: str) -> ChatModel:
        model = self.models.get(name)
        if model is None:
            model = self.models[name] = UnboundModel(name)
        return model

    def toolset(self, names: Sequence[str]) -> tuple[Tool, ...]:
        key = tuple(names)
        bound = self._toolsets.get(key)
        if bound is not None:
            return bound
        missing = [n for n in key if n not in self.tools]
        if missing and self.strict:
            raise UnknownToolError(
                f"The document names tool(s) {missing} that were not passed; pass them in "
                f"tools=[...] (passed: {sorted(self.tools)}), or load with strict=False to bind "
                "stand-ins that answer every call with an error."
            )
        for name in missing:
            self.tools[name] = unbound_tool(name)
        bound = self._toolsets[key] = tuple(self.tools[n] for n in key)
        return bound
