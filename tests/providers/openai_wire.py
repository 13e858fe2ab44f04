"""Chat Completions replies and stream chunks, built from the ``openai`` SDK's own
pydantic models so a field we get wrong fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
)
from openai.types.chat import chat_completion as completion_types
from openai.types.chat import chat_completion_chunk as chunk_types
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.shared import ErrorObject

from tests.providers.fake_server import sse

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


def completion(
    content: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    *,
    finish_reason: FinishReason = "stop",
    usage: tuple[int, int] = (11, 7),
) -> dict[str, Any]:
    message = ChatCompletionMessage(
        role="assistant",
        content=content,
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id=call_id, type="function", function=Function(name=name, arguments=arguments)
            )
            for call_id, name, arguments in tool_calls
        ]
        or None,
    )
    return ChatCompletion(
        id="chatcmpl-1",
        object="chat.completion",
        created=1_700_000_000,
        model="gpt-test-2025-01-01",
        choices=[
            completion_types.Choice(
                index=0, message=message, finish_reason=finish_reason, logprobs=None
            )
        ],
        usage=CompletionUsage(
            prompt_tokens=usage[0], completion_tokens=usage[1], total_tokens=sum(usage)
        ),
    ).model_dump(mode="json")


def chunk(
    *,
    content: str | None = None,
    role: Literal["assistant"] | None = None,
    tool_calls: Sequence[tuple[int, str | None, str | None, str | None]] = (),
    finish_reason: FinishReason | None = None,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``usage`` alone makes the final, choice-less one."""
    choices = []
    if usage is None:
        delta = chunk_types.ChoiceDelta(
            role=role,
            content=content,
            tool_calls=[
                chunk_types.ChoiceDeltaToolCall(
                    index=index,
                    id=call_id,
                    type="function" if call_id else None,
                    function=chunk_types.ChoiceDeltaToolCallFunction(
                        name=name, arguments=arguments
                    ),
                )
                for index, call_id, name, arguments in tool_calls
            ]
            or None,
        )
        choices.append(
            chunk_types.Choice(index=0, delta=delta, finish_reason=finish_reason, logprobs=None)
        )
    return ChatCompletionChunk(
        id="chatcmpl-2",
        object="chat.completion.chunk",
        created=1_700_000_000,
        model="gpt-test-2025-01-01",
        choices=choices,
        usage=None
        if usage is None
        else CompletionUsage(
            prompt_tokens=usage[0], completion_tokens=usage[1], total_tokens=sum(usage)
        ),
    ).model_dump(mode="json")


def stream(*chunks: dict[str, Any], done: bool = True) -> list[str]:
    return sse(*chunks, *(["[DONE]"] if done else []))


def error_body(message: str, type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": ErrorObject(message=message, type=type, param=None, code=code).model_dump()}
