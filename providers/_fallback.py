"""FallbackModel: one call tried on each model in turn, on retryable failures."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from agentfsm._errors import ChainError, ProviderError
from agentfsm._messages import Message, MessageDelta
from agentfsm._tools import Tool

from .._chat_model import ChatModel, DeltaHandler, provider_of

__all__ = ["FallbackModel"]


class FallbackModel:
    """Call ``primary``; on a retryable error, each of ``others`` in turn.

    The work already done in the run is kept: only the one call moves. The
    reply's metadata says which model answered (``model``) and which failed
    before it (``fallback_errors``). When every model fails, the last error is
    raised, with the earlier ones in its ``details``.

    When streaming, a model that fails after sending pieces is followed by a
    ``MessageDelta(discard=True)``: what the host showed of its reply is void,
    and the next model's pieces start the reply again.
    """

    def __init__(self, primary: ChatModel, *others: ChatModel) -> None:
        self.models: tuple[ChatModel, ...] = (primary, *others)

    @property
    def name(self) -> str:
        return "fallback(" + ", ".join(m.name for m in self.models) + ")"

    @property
    def provider_name(self) -> str:
        """The models' provider when they share one, else ``agentfsm.fallback``: which
        of them answers is known only once one has (the reply's ``model``)."""
        providers = {provider_of(m) for m in self.models}
        return providers.pop() if len(providers) == 1 else "agentfsm.fallback"

    async def aclose(self) -> None:
        """Close every model's connections."""
        for model in self.models:
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        errors: list[dict[str, str]] = []
        for model in self.models:
            sent = False

            def forward(delta: MessageDelta) -> None:
                nonlocal sent
                sent = True
                assert on_delta is not None
                on_delta(delta)

            try:
                reply = await model.complete(
                    messages, tools, on_delta=None if on_delta is None else forward
                )
            except ChainError as error:
                errors.append({"model": model.name, "type": error.type, "message": error.message})
                if sent and on_delta is not None:
                    on_delta(MessageDelta(discard=True))
                if not error.retryable or model is self.models[-1]:
                    raise ProviderError(
                        error.type,
                        error.message,
                        retryable=error.retryable,
                        details={**error.details, "fallback_errors": errors},
                    ) from error
                continue
            metadata = {"model": model.name, **reply.metadata}
            if errors:
                metadata["model"] = model.name
                metadata["fallback_errors"] = errors
            return attrs.evolve(reply, metadata=metadata)
        raise AssertionError("unreachable: FallbackModel has at least one model")
