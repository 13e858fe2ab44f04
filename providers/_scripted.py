"""ScriptedModel: a deterministic model for examples, tests and benchmarks.

It answers from a list of replies, or from a function of the conversation, and
records every request. A reply may be an assistant :class:`Message`, a ``str``
(plain text), or a :class:`ChainError` / exception to raise on cue::

    model = ScriptedModel([call_tool("search", q="attrs"), say("Found it.")])

A call whose id the script leaves out gets one when the model replies with it:
``call_N``, numbered on from the last ``call_N`` of the conversation it was sent,
so a run resumed in another process never repeats an id and a scripted run
gets the same ids every time. Ids are unique within a conversation, not across
runs (two runs of one script both start at ``call_1``).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs

from agentfsm._errors import ChainError, ProviderError
from agentfsm._messages import Message, MessageDelta, Status, ToolCall
from agentfsm._tools import Tool

from .._chat_model import DeltaHandler, split_model_name

__all__ = [
    "SCRIPTED_PROVIDER",
    "Reply",
    "ScriptedModel",
    "ScriptedRequest",
    "call_tool",
    "call_tools",
    "fail",
    "say",
]

#: The provider of a scripted model whose name names none.
SCRIPTED_PROVIDER: Final = "agentfsm.scripted"

Reply: TypeAlias = Message | str | BaseException
Script: TypeAlias = Callable[[Sequence[Message]], Reply | Awaitable[Reply]]

_ids = itertools.count(1)
_COROUTINE: Final = types.CoroutineType
_NUMBERED = re.compile(r"call_(\d+)")


class _MadeUp(str):
    """A call id :func:`call_tools` made up: the model that replies with the call
    numbers it from the conversation (:func:`_numbered`). Until then it is a plain,
    process-unique ``call_N``, for a reply added to a chain by hand."""

    __slots__ = ()


def say(text: str, *, status: Status = "complete") -> Message:
    """A plain text reply."""
    return Message(role="assistant", content=text, status=status)


def call_tool(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    /,
    *,
    call_id: str | None = None,
    **kwargs: Any,
) -> Message:
    """A reply asking for one tool: ``call_tool("add", a=1, b=2)``."""
    return call_tools((name, {**arguments, **kwargs} if arguments else kwargs, call_id))


def call_tools(
    *calls: tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str | None],
    text: str | None = None,
) -> Message:
    """A reply asking for several tools at once, in order."""
    tool_calls = []
    for spec in calls:
        name, arguments = spec[0], spec[1]
        call_id = (spec[2] if len(spec) > 2 else None) or _MadeUp(f"call_{next(_ids)}")
        tool_calls.append(ToolCall(call_id=call_id, name=name, arguments=dict(arguments)))
    return Message(role="assistant", content=text, tool_calls=tuple(tool_calls))


def fail(type: str = "server_error", message: str = "scripted failure") -> ChainError:
    """A failure to raise instead of replying (retryable for provider-side types)."""
    return ProviderError(type, message)


@attrs.frozen
class ScriptedRequest:
    """What the model was asked: the conversation and the tools offered."""

    messages: Sequence[Message]
    tools: Sequence[Tool]


@attrs.define(eq=False)
class ScriptedModel:
    """Answers from ``script`` (a list of replies, or a function of the conversation).

    ``stream=True`` sends each reply's text to ``on_delta`` word by word;
    ``delay`` seconds are awaited before each reply (for demos). Its provider is
    the one its name gives (``acme:small`` is ``acme``'s), else ``agentfsm.scripted``.
    """

    script: Sequence[Reply] | Script
    model_name: str = "scripted"
    stream: bool = False
    delay: float = 0.0
    requests: list[ScriptedRequest] = attrs.field(factory=list)

    @property
    def name(self) -> str:
        return self.model_name

    @property
    def provider_name(self) -> str:
        """Who serves the model (``gen_ai.provider.name``)."""
        return split_model_name(self.model_name)[0] or SCRIPTED_PROVIDER

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self.requests)

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        index = len(self.requests)
        self.requests.append(ScriptedRequest(messages=messages, tools=tools))
        if self.delay:
            await asyncio.sleep(self.delay)
        if callable(self.script):
            reply = self.script(messages)
            if reply.__class__ is _COROUTINE or inspect.isawaitable(reply):
                reply = await reply
        elif index < len(self.script):
            reply = self.script[index]
        else:
            raise ProviderError(
                "script_exhausted",
                f"ScriptedModel {self.model_name!r} has {len(self.script)} replies "
                f"but was called {index + 1} times",
                retryable=False,
            )
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):  # built with the model's name at once
            message = Message.assistant(reply, metadata={"model": self.model_name})
        else:
            for call in reply.tool_calls:
                if call.call_id.__class__ is _MadeUp:
                    reply = _numbered(reply, messages)
                    break
            message = reply if "model" in reply.metadata else _named(reply, self.model_name)
        if self.stream and on_delta is not None and message.text:
            for word in message.text.split(" "):
                on_delta(MessageDelta(content=word + " "))
                await asyncio.sleep(0)
        return message


def _numbered(reply: Message, conversation: Sequence[Message]) -> Message:
    """``reply`` with the ids :func:`call_tools` made up numbered on from the last
    ``call_N`` of ``conversation`` (the latest message that has one: no scan of the
    whole conversation per call), skipping the ids the reply names itself."""
    last = 0
    for message in reversed(conversation):
        ids = [c.call_id for c in message.tool_calls] or [
            r.tool_call_id for r in message.tool_results
        ]
        numbers = [int(m[1]) for i in ids if (m := _NUMBERED.fullmatch(i))]
        if numbers:
            last = max(numbers)
            break
    given = {c.call_id for c in reply.tool_calls if c.call_id.__class__ is not _MadeUp}
    calls = []
    for call in reply.tool_calls:
        if call.call_id.__class__ is _MadeUp:
            last += 1
            while f"call_{last}" in given:
                last += 1
            call = attrs.evolve(call, call_id=f"call_{last}")
        calls.append(call)
    return attrs.evolve(reply, tool_calls=tuple(calls))


def _named(reply: Message, model: str) -> Message:
    """``reply`` saying which model answered (``metadata["model"]``), as providers' do."""
    return Message(
        role=reply.role,
        content=reply.content,
        tool_calls=reply.tool_calls,
        tool_results=reply.tool_results,
        status=reply.status,
        metadata={"model": model, **reply.metadata},
        thinking=reply.thinking,
    )
