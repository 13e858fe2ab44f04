"""Responses API replies and stream events, built from the ``openai`` SDK's own
pydantic models so a field we get wrong fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openai.types import responses as wire
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from tests.providers.fake_server import sse

#: Fails when a body is not a Responses request as the SDK types it.
STREAMING = wire.response_create_params.ResponseCreateParamsStreaming
NON_STREAMING = wire.response_create_params.ResponseCreateParamsNonStreaming


def text_item(text: str, item_id: str = "msg_1") -> wire.ResponseOutputMessage:
    return wire.ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[wire.ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def refusal_item(refusal: str) -> wire.ResponseOutputMessage:
    return wire.ResponseOutputMessage(
        id="msg_r",
        type="message",
        role="assistant",
        status="completed",
        content=[wire.ResponseOutputRefusal(type="refusal", refusal=refusal)],
    )


def call_item(call_id: str, name: str, arguments: str, item_id: str = "fc_1") -> Any:
    return wire.ResponseFunctionToolCall(
        id=item_id,
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=arguments,
        status="completed",
    )


def reasoning_item(item_id: str, summary: str, encrypted: str) -> wire.ResponseReasoningItem:
    return wire.ResponseReasoningItem(
        id=item_id,
        type="reasoning",
        summary=[Summary(type="summary_text", text=summary)] if summary else [],
        encrypted_content=encrypted,
    )


def usage(
    given: int = 12, taken: int = 8, *, cached: int = 0, written: int = 0, reasoning: int = 0
) -> wire.ResponseUsage:
    return wire.ResponseUsage(
        input_tokens=given,
        output_tokens=taken,
        total_tokens=given + taken,
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=written),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
    )


def response(
    *items: Any,
    status: str = "completed",
    incomplete: str | None = None,
    counts: wire.ResponseUsage | None = None,
    error: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A whole ``response`` object with ``items`` as its output."""
    return wire.Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1_700_000_000,
            "model": "gpt-test-2025-01-01",
            "output": [i.model_dump(mode="json") for i in items],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "status": status,
            "incomplete_details": None if incomplete is None else {"reason": incomplete},
            "error": None if error is None else {"code": error[0], "message": error[1]},
            "usage": (counts or usage()).model_dump(mode="json"),
        }
    ).model_dump(mode="json")


def _event(cls: Any, **fields: Any) -> dict[str, Any]:
    return dict(cls.model_validate({"sequence_number": 0, **fields}).model_dump(mode="json"))


def created() -> dict[str, Any]:
    whole = response()
    return _event(
        wire.ResponseCreatedEvent,
        type="response.created",
        response={**whole, "output": [], "status": "in_progress", "usage": None},
    )


def item_added(index: int, item: Any) -> dict[str, Any]:
    return _event(
        wire.ResponseOutputItemAddedEvent,
        type="response.output_item.added",
        output_index=index,
        item=item.model_dump(mode="json"),
    )


def item_done(index: int, item: Any) -> dict[str, Any]:
    return _event(
        wire.ResponseOutputItemDoneEvent,
        type="response.output_item.done",
        output_index=index,
        item=item.model_dump(mode="json"),
    )


def text_delta(index: int, delta: str, item_id: str = "msg_1") -> dict[str, Any]:
    return _event(
        wire.ResponseTextDeltaEvent,
        type="response.output_text.delta",
        output_index=index,
        item_id=item_id,
        content_index=0,
        delta=delta,
        logprobs=[],
    )


def arguments_delta(index: int, delta: str, item_id: str = "fc_1") -> dict[str, Any]:
    return _event(
        wire.ResponseFunctionCallArgumentsDeltaEvent,
        type="response.function_call_arguments.delta",
        output_index=index,
        item_id=item_id,
        delta=delta,
    )


def summary_delta(index: int, delta: str, item_id: str = "rs_1") -> dict[str, Any]:
    return _event(
        wire.ResponseReasoningSummaryTextDeltaEvent,
        type="response.reasoning_summary_text.delta",
        output_index=index,
        item_id=item_id,
        summary_index=0,
        delta=delta,
    )


def completed(whole: dict[str, Any], kind: str = "response.completed") -> dict[str, Any]:
    classes = {
        "response.completed": wire.ResponseCompletedEvent,
        "response.incomplete": wire.ResponseIncompleteEvent,
        "response.failed": wire.ResponseFailedEvent,
    }
    return _event(classes[kind], type=kind, response=whole)


def error_event(code: str, message: str) -> dict[str, Any]:
    return _event(wire.ResponseErrorEvent, type="error", code=code, message=message, param=None)


def events(*payloads: dict[str, Any]) -> list[str]:
    """Events named after their type, as the Responses API sends them."""
    chunks: list[str] = []
    for payload in payloads:
        chunks.extend(sse(payload, event=str(payload["type"])))
    return chunks


def streamed(*items: Any, counts: wire.ResponseUsage | None = None) -> list[str]:
    """A whole stream: each item added, its pieces, done, then the completed response."""
    payloads: list[dict[str, Any]] = [created()]
    for index, item in enumerate(items):
        payloads.extend(_pieces(index, item))
    payloads.append(completed(response(*items, counts=counts)))
    return events(*payloads)


def _pieces(index: int, item: Any) -> Sequence[dict[str, Any]]:
    if item.type == "message":
        empty = item.model_copy(update={"content": [], "status": "in_progress"})
        text = "".join(p.text for p in item.content if p.type == "output_text")
        half = len(text) // 2
        deltas = [text_delta(index, piece, item.id) for piece in (text[:half], text[half:])]
        return [item_added(index, empty), *deltas, item_done(index, item)]
    if item.type == "function_call":
        empty = item.model_copy(update={"arguments": "", "status": "in_progress"})
        half = len(item.arguments) // 2
        deltas = [
            arguments_delta(index, piece, item.id)
            for piece in (item.arguments[:half], item.arguments[half:])
        ]
        return [item_added(index, empty), *deltas, item_done(index, item)]
    if item.type == "reasoning":
        empty = item.model_copy(update={"summary": [], "encrypted_content": None})
        deltas = [summary_delta(index, s.text, item.id) for s in item.summary]
        return [item_added(index, empty), *deltas, item_done(index, item)]
    return [item_added(index, item), item_done(index, item)]
