"""WrapperModel: a chat model that hands every call to another, for models that act around it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentfsm._messages import Message
from agentfsm._tools import Tool

from .._chat_model import ChatModel, DeltaHandler

__all__ = ["WrapperModel"]


class WrapperModel:
    """A :class:`ChatModel` that is ``wrapped`` to whoever uses it, call for call.

    Its ``name`` is the wrapped model's, its ``complete`` calls the wrapped model's,
    and any other attribute (``model``, ``settings``, ``aclose``...) is read from the
    wrapped model. Subclass and override :meth:`complete` to act around the call:
    a span (``agentfsm.otel``), a recorded step (``agentfsm.durable``).
    """

    __slots__ = ("wrapped",)

    def __init__(self, wrapped: ChatModel) -> None:
        self.wrapped = wrapped

    @property
    def name(self) -> str:
        return str(self.wrapped.name)

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        return await self.wrapped.complete(messages, tools, on_delta=on_delta)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # copy and pickle probe for these before __init__ ran
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.wrapped!r}>"
