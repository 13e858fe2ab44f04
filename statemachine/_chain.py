"""LLMChain: the conversation and its context, as one immutable value.

Every change returns a new chain. ``add_message`` keeps ``messages``,
``exchanged_messages`` (this run's), ``last_message`` and ``needs_response`` in
agreement, so no step has to.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

from ._errors import ChainError
from ._messages import Message, MessageLog
from ._registry import ModeLike, run_chain
from ._sync import run_sync
from ._tools import Tool

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel

    from ._results import Terminal

__all__ = ["CALLBACK_NAMES", "Callbacks", "LLMChain"]

#: The callbacks a chain fires, named as in the original.
CALLBACK_NAMES = frozenset(
    {
        "on_llm_new_delta",
        "on_llm_new_message",
        "on_llm_token_usage",
        "on_llm_error",
        "on_message_processed",
        "on_tool_call_identified",
        "on_tool_execution_started",
        "on_tool_execution_completed",
        "on_tool_execution_failed",
        "on_tool_interrupted",
        "on_tool_response_created",
        "on_retries_exceeded",
        "on_error",
    }
)

Callbacks = Mapping[str, Callable[..., Any]]
_T = TypeVar("_T")


def _needs_response(message: Message) -> bool:
    return message.role in ("user", "tool") or message.is_tool_call


def _tools(value: Iterable[Tool]) -> tuple[Tool, ...]:
    return value if type(value) is tuple else tuple(value)


def _callbacks(value: Iterable[Callbacks]) -> tuple[Callbacks, ...]:
    """The converter of ``callbacks``: a tuple of handler maps, each name a known one
    (checked here rather than by a validator: one call per chain copy, not two)."""
    value = tuple(value)
    for handlers in value:
        unknown = set(handlers) - CALLBACK_NAMES
        if unknown:
            raise ValueError(
                f"Unknown callback name(s) {sorted(unknown)}. Known: {sorted(CALLBACK_NAMES)}"
            )
    return value


@attrs.frozen
class LLMChain:
    """A model, its tools, the conversation so far and the context a run carries.

    ``custom_context`` is the run's shared context: modes keep ``mode_state``
    there, a paused run its ``pause_reason``, an agent its ``state``.
    """

    llm: ChatModel
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools)
    # A chain copy passes its logs as they are: ``MessageLog.of`` returns one in one call
    # (the attrs plugin of mypy reads no classmethod converter; the field stays typed).
    messages: MessageLog = attrs.field(
        factory=MessageLog,
        converter=MessageLog.of,  # type: ignore[misc]
    )
    exchanged_messages: MessageLog = attrs.field(
        factory=MessageLog,
        converter=MessageLog.of,  # type: ignore[misc]
    )
    last_message: Message | None = attrs.field()
    needs_response: bool = attrs.field()
    custom_context: Mapping[str, Any] = attrs.field(factory=dict)
    callbacks: tuple[Callbacks, ...] = attrs.field(default=(), converter=_callbacks)
    current_failure_count: int = 0
    max_retry_count: int = 3

    @last_message.default
    def _last(self) -> Message | None:
        return self.messages[-1] if self.messages else None

    @needs_response.default
    def _pending(self) -> bool:
        return self.last_message is not None and _needs_response(self.last_message)

    def _replace(self, **changes: Any) -> LLMChain:
        """``attrs.evolve`` without its introspection: the run loop's copy, fields as given."""
        return _replace(self, **changes)

    # ------------------------------------------------------------ messages

    def add_message(self, message: Message, **changes: Any) -> LLMChain:
        """Append one message; the chain's view of the conversation follows it.

        ``changes`` (other fields, e.g. ``current_failure_count``) go into the same copy.
        """
        if not isinstance(message, Message):
            raise ChainError(
                "invalid_message", f"add_message takes a Message, got: {type(message).__name__}"
            )
        return _replace(
            self,
            messages=self.messages.append(message),
            exchanged_messages=self.exchanged_messages.append(message),
            last_message=message,
            needs_response=_needs_response(message),
            **changes,
        )

    def add_messages(self, messages: Iterable[Message]) -> LLMChain:
        """Append messages in order, as ``add_message`` would one by one."""
        chain = self
        for message in messages:
            chain = chain.add_message(message)
        return chain

    def replace_last_message(self, message: Message) -> LLMChain:
        """Put ``message`` where the last message was, in every view of the conversation."""
        exchanged = self.exchanged_messages
        if exchanged and exchanged[-1] is self.last_message:
            exchanged = MessageLog((*exchanged[:-1], message))
        return _replace(
            self,
            messages=MessageLog((*self.messages[:-1], message)),
            exchanged_messages=exchanged,
            last_message=message,
            needs_response=_needs_response(message),
        )

    def clear_exchanged_messages(self) -> LLMChain:
        return _replace(self, exchanged_messages=MessageLog())

    # ------------------------------------------------------------ context

    def update_custom_context(self, updates: Mapping[str, Any]) -> LLMChain:
        """Merge ``updates`` into ``custom_context`` (shallow: a key is replaced whole)."""
        return _replace(self, custom_context={**self.custom_context, **updates})

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if the chain has one."""
        for candidate in self.tools:
            if candidate.name == name:
                return candidate
        return None

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    # ------------------------------------------------------------ callbacks

    def add_callback(self, handlers: Callbacks) -> LLMChain:
        return attrs.evolve(self, callbacks=(*self.callbacks, handlers))

    def fire(self, name: str, *args: Any) -> None:
        """Call every handler registered for ``name``.

        A raising handler becomes a :class:`ChainError` of type
        ``callback_error`` naming it, which the steps turn into a failed run.
        """
        for handlers in self.callbacks:
            handler = handlers.get(name)
            if handler is None:
                continue
            try:
                handler(*args)
            except Exception as exc:
                raise ChainError(
                    "callback_error",
                    f"Callback {name} raised {type(exc).__name__}: {exc}",
                    details={"callback": name},
                ) from exc

    # ------------------------------------------------------------ running

    async def run(
        self,
        mode: ModeLike = None,
        *,
        with_fallbacks: Sequence[ChatModel] | None = None,
        before_fallback: Callable[[LLMChain], LLMChain] | None = None,
        **opts: Any,
    ) -> Terminal:
        """Run the chain under ``mode``; see :func:`agentfsm.modes.run_chain`."""
        return await run_chain(
            self, mode, with_fallbacks=with_fallbacks, before_fallback=before_fallback, **opts
        )

    def run_sync(self, mode: ModeLike = None, **opts: Any) -> Terminal:
        """``run`` for scripts and tests, in a fresh event loop."""
        return run_sync(self.run(mode, **opts), self.llm)


class _Keep(enum.Enum):
    """The default of ``_replace``'s parameters: keep the field as it is."""

    KEEP = enum.auto()


_KEEP: Final = _Keep.KEEP


def _replace(
    chain: LLMChain,
    *,
    llm: ChatModel | _Keep = _KEEP,
    tools: tuple[Tool, ...] | _Keep = _KEEP,
    messages: MessageLog | _Keep = _KEEP,
    exchanged_messages: MessageLog | _Keep = _KEEP,
    last_message: Message | _Keep | None = _KEEP,
    needs_response: bool | _Keep = _KEEP,
    custom_context: Mapping[str, Any] | _Keep = _KEEP,
    callbacks: tuple[Callbacks, ...] | _Keep = _KEEP,
    current_failure_count: int | _Keep = _KEEP,
    max_retry_count: int | _Keep = _KEEP,
) -> LLMChain:
    """``attrs.evolve(chain, ...)`` written out for the run loop, which copies the chain
    a few times per model call with values that are already final.

    The copy is built by keyword through the class's own ``__init__``, so its
    converters and validators run as for any chain; only the introspection of
    ``attrs.evolve`` is left out (``tests/test_messages_and_chain.py`` checks every
    field is here).
    """
    return LLMChain(
        llm=chain.llm if llm is _KEEP else llm,
        tools=chain.tools if tools is _KEEP else tools,
        messages=chain.messages if messages is _KEEP else messages,
        exchanged_messages=(
            chain.exchanged_messages if exchanged_messages is _KEEP else exchanged_messages
        ),
        last_message=chain.last_message if last_message is _KEEP else last_message,
        needs_response=chain.needs_response if needs_response is _KEEP else needs_response,
        custom_context=chain.custom_context if custom_context is _KEEP else custom_context,
        callbacks=chain.callbacks if callbacks is _KEEP else callbacks,
        current_failure_count=(
            chain.current_failure_count if current_failure_count is _KEEP else current_failure_count
        ),
        max_retry_count=chain.max_retry_count if max_retry_count is _KEEP else max_retry_count,
    )
