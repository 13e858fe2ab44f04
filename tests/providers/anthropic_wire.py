"""Messages API replies and stream events, built from the ``anthropic`` SDK's own
pydantic models so a field we get wrong fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from anthropic import types as wire
from anthropic.types.raw_message_delta_event import Delta

from tests.providers.fake_server import named_sse

StopReason = Literal[
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]


def message(
    text: str | None = None,
    tool_uses: Sequence[tuple[str, str, dict[str, Any]]] = (),
    *,
    stop_reason: StopReason = "end_turn",
    usage: tuple[int, int] = (21, 9),
    cache_read: int | None = None,
) -> dict[str, Any]:
    content: list[Any] = [wire.TextBlock(type="text", text=text)] if text else []
    content.extend(
        wire.ToolUseBlock(type="tool_use", id=call_id, name=name, input=arguments)
        for call_id, name, arguments in tool_uses
    )
    counts = wire.Usage(
        input_tokens=usage[0], output_tokens=usage[1], cache_read_input_tokens=cache_read
    )
    return _reply("msg_01", content, stop_reason, counts)


def _reply(
    message_id: str, content: list[Any], stop_reason: StopReason, usage: wire.Usage
) -> dict[str, Any]:
    return wire.Message(
        id=message_id,
        type="message",
        role="assistant",
        model="claude-test-1",
        content=content,
        stop_reason=stop_reason,
        stop_sequence=None,
        usage=usage,
    ).model_dump(mode="json")


def start(input_tokens: int = 30) -> dict[str, Any]:
    empty = wire.Message(
        id="msg_02",
        type="message",
        role="assistant",
        model="claude-test-1",
        content=[],
        stop_reason=None,
        stop_sequence=None,
        usage=wire.Usage(input_tokens=input_tokens, output_tokens=1),
    )
    return wire.RawMessageStartEvent(type="message_start", message=empty).model_dump(mode="json")


def _started(index: int, block: Any) -> dict[str, Any]:
    return wire.RawContentBlockStartEvent(
        type="content_block_start", index=index, content_block=block
    ).model_dump(mode="json")


def _delta(index: int, delta: Any) -> dict[str, Any]:
    return wire.RawContentBlockDeltaEvent(
        type="content_block_delta", index=index, delta=delta
    ).model_dump(mode="json")


def text_start(index: int) -> dict[str, Any]:
    return _started(index, wire.TextBlock(type="text", text=""))


def tool_start(index: int, call_id: str, name: str) -> dict[str, Any]:
    return _started(index, wire.ToolUseBlock(type="tool_use", id=call_id, name=name, input={}))


def text_delta(index: int, text: str) -> dict[str, Any]:
    return _delta(index, wire.TextDelta(type="text_delta", text=text))


def json_delta(index: int, partial: str) -> dict[str, Any]:
    return _delta(index, wire.InputJSONDelta(type="input_json_delta", partial_json=partial))


def block_stop(index: int) -> dict[str, Any]:
    return wire.RawContentBlockStopEvent(type="content_block_stop", index=index).model_dump(
        mode="json"
    )


def message_delta(stop_reason: StopReason, output_tokens: int = 15) -> dict[str, Any]:
    return wire.RawMessageDeltaEvent(
        type="message_delta",
        delta=Delta(stop_reason=stop_reason, stop_sequence=None),
        usage=wire.MessageDeltaUsage(output_tokens=output_tokens),
    ).model_dump(mode="json")


def stop() -> dict[str, Any]:
    return wire.RawMessageStopEvent(type="message_stop").model_dump(mode="json")


PING = {"type": "ping"}


def text_events(text: str, *then: dict[str, Any]) -> list[str]:
    """A stream that starts a message with one text block saying ``text``, then ``then``."""
    return named_sse(start(), text_start(0), text_delta(0, text), *then)


def error_body(kind: str, text: str) -> dict[str, Any]:
    return wire.ErrorResponse.model_validate(
        {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_1"}
    ).model_dump(mode="json")


def thinking_message(
    thinking: str,
    signature: str,
    *,
    text: str | None = None,
    tool_use: tuple[str, str, dict[str, Any]] | None = None,
    redacted: str | None = None,
    stop_reason: StopReason = "end_turn",
    cache: tuple[int, int] = (0, 0),
    thinking_tokens: int | None = None,
) -> dict[str, Any]:
    """A reply that thinks first: signed thinking, maybe redacted thinking, then text or a call."""
    content: list[Any] = [
        wire.ThinkingBlock(type="thinking", thinking=thinking, signature=signature)
    ]
    if redacted is not None:
        content.append(wire.RedactedThinkingBlock(type="redacted_thinking", data=redacted))
    if text is not None:
        content.append(wire.TextBlock(type="text", text=text))
    if tool_use is not None:
        call_id, name, arguments = tool_use
        content.append(wire.ToolUseBlock(type="tool_use", id=call_id, name=name, input=arguments))
    details = (
        None
        if thinking_tokens is None
        else wire.OutputTokensDetails(thinking_tokens=thinking_tokens)
    )
    counts = wire.Usage(
        input_tokens=10,
        output_tokens=40,
        cache_read_input_tokens=cache[0],
        cache_creation_input_tokens=cache[1],
        output_tokens_details=details,
    )
    return _reply("msg_03", content, stop_reason, counts)


def thinking_start(index: int) -> dict[str, Any]:
    return _started(index, wire.ThinkingBlock(type="thinking", thinking="", signature=""))


def redacted_start(index: int, data: str) -> dict[str, Any]:
    return _started(index, wire.RedactedThinkingBlock(type="redacted_thinking", data=data))


def thinking_delta(index: int, thinking: str) -> dict[str, Any]:
    return _delta(index, wire.ThinkingDelta(type="thinking_delta", thinking=thinking))


def signature_delta(index: int, signature: str) -> dict[str, Any]:
    return _delta(index, wire.SignatureDelta(type="signature_delta", signature=signature))
