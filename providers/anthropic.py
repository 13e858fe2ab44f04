"""Anthropic Messages API.

::

    model = AnthropicChat("claude-sonnet-4-5")          # ANTHROPIC_API_KEY from the environment

The system prompt travels in the separate ``system`` field; tool calls are
``tool_use`` blocks and their results ``tool_result`` blocks, the results of
one turn together in one user message. ``stream=True`` reads the event stream
and hands every text delta and tool-input fragment to ``on_delta``. Tool input
that is not a JSON object never raises: the call carries ``invalid_arguments``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from agentfsm.errors import ChainError
from agentfsm.messages import Content, ContentPart, Message, MessageDelta, Status, ToolCall
from agentfsm.tools import Tool

from ._http import (
    DEFAULT_BACKOFF,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    HttpChatModel,
    error_for_provider_type,
    parse_json,
    tool_call,
)
from .base import DeltaHandler, ModelSettings

__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "DEFAULT_MAX_TOKENS", "AnthropicChat"]

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
API_VERSION: Final = "2023-06-01"
#: The API requires a token limit; this one applies unless given.
DEFAULT_MAX_TOKENS: Final = 1024
_STATUS: Final[Mapping[str, Status]] = {
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "filtered",
}


@attrs.define
class _Block:
    """A content block being assembled from stream events."""

    type: str
    text: list[str] = attrs.field(factory=list)
    call_id: str = ""
    name: str = ""
    input: Any = None
    partial_json: list[str] = attrs.field(factory=list)
    ordinal: int = 0


class AnthropicChat(HttpChatModel):
    """A Claude model behind the Messages API (``POST {base_url}/v1/messages``).

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``; without one, a call to the
    official endpoint fails with ``authentication`` (another ``base_url``, a
    proxy or gateway, is called without ``x-api-key``). ``max_tokens`` defaults
    to ``settings.max_tokens``, else :data:`DEFAULT_MAX_TOKENS`.
    """

    _provider = "anthropic"
    _key_variable = "ANTHROPIC_API_KEY"
    _official_url = DEFAULT_BASE_URL
    _path = "v1/messages"
    _reason_key = "stop_reason"
    _statuses = _STATUS

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        max_tokens: int | None = None,
        settings: ModelSettings | None = None,
        stream: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            settings=settings,
            stream=stream,
            headers={"anthropic-version": API_VERSION, **(headers or {})},
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        self.max_tokens = (
            max_tokens
            if max_tokens is not None
            else self.settings.max_tokens
            if self.settings.max_tokens is not None
            else DEFAULT_MAX_TOKENS
        )

    def _key_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body ``complete`` sends for this conversation."""
        system, wire = _wire_messages(messages)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": wire,
        }
        if system:
            body["system"] = system
        settings = self.settings
        if tools:
            body["tools"] = [_wire_tool(t) for t in tools]
            choice = _tool_choice(settings.tool_choice)
            if settings.parallel_tool_calls is False:
                choice = choice or {"type": "auto"}
                if choice.get("type") in ("auto", "any", "tool"):
                    choice["disable_parallel_tool_use"] = True
            if choice is not None:
                body["tool_choice"] = choice
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if self.stream:
            body["stream"] = True
        body.update(settings.extra)
        return body

    # ------------------------------------------------------------ replies

    def _reply(self, data: Any) -> Message:
        if not isinstance(data, Mapping):
            raise self._invalid(f"the response is not a JSON object: {data!r}")
        if data.get("type") == "error" or data.get("error"):
            raise error_for_provider_type(self.name, data)
        content = data.get("content")
        if not isinstance(content, list):
            raise self._invalid("the response has no content list")
        text: list[str] = []
        calls: list[ToolCall] = []
        for index, block in enumerate(content):
            if not isinstance(block, Mapping):
                raise self._invalid(f"content block {index} is not an object")
            if block.get("type") == "text":
                text.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                if not block.get("name"):
                    raise self._invalid(f"tool_use block {index} has no name")
                calls.append(
                    tool_call(
                        str(block.get("id") or f"toolu_{index}"),
                        str(block["name"]),
                        block.get("input"),
                    )
                )
        return self._message("".join(text), calls, data.get("stop_reason"), data.get("usage"), data)

    def _usage(self, usage: Mapping[str, Any]) -> dict[str, int]:
        """Input counts cached tokens too, as OpenAI's ``prompt_tokens`` does."""
        read = int(usage.get("cache_read_input_tokens") or 0)
        written = int(usage.get("cache_creation_input_tokens") or 0)
        return {
            "input_tokens": int(usage.get("input_tokens") or 0) + read + written,
            "output_tokens": int(usage.get("output_tokens") or 0),
        }

    async def _complete_streaming(
        self, body: Mapping[str, Any], on_delta: DeltaHandler | None
    ) -> Message:
        blocks: dict[int, _Block] = {}
        start: Mapping[str, Any] = {}
        usage: dict[str, Any] = {}
        stop_reason: Any = None
        done = False
        async with self._http.stream(self._path, body) as events:
            async for event in events:
                data = parse_json(event.data, self.name, f"a {event.event} event")
                if not isinstance(data, Mapping):
                    raise self._invalid(f"a stream event is not a JSON object: {event.data!r}")
                kind = data.get("type", event.event)
                if kind == "error":
                    raise error_for_provider_type(self.name, data)
                if kind == "message_start":
                    start = data.get("message") or {}
                    usage.update(_present(start.get("usage")))
                elif kind == "content_block_start":
                    self._start_block(data, blocks, on_delta)
                elif kind == "content_block_delta":
                    self._take_delta(data, blocks, on_delta)
                elif kind == "message_delta":
                    delta = data.get("delta") or {}
                    if isinstance(delta, Mapping) and delta.get("stop_reason"):
                        stop_reason = delta["stop_reason"]
                    usage.update(_present(data.get("usage")))
                elif kind == "message_stop":
                    done = True
                    await events.drain()
                    break
                # ping, content_block_stop and event types added later need nothing
            if not done:
                raise events.cut_off("message_stop")
        text: list[str] = []
        calls: list[ToolCall] = []
        for index in sorted(blocks):
            block = blocks[index]
            if block.type == "text":
                text.extend(block.text)
            elif block.type == "tool_use":
                raw = "".join(block.partial_json) if block.partial_json else block.input
                calls.append(tool_call(block.call_id or f"toolu_{index}", block.name, raw))
        return self._message("".join(text), calls, stop_reason, usage or None, start)

    def _start_block(
        self, data: Mapping[str, Any], blocks: dict[int, _Block], on_delta: DeltaHandler | None
    ) -> None:
        index = _index(data)
        raw = data.get("content_block")
        if not isinstance(raw, Mapping):
            raise self._invalid(f"content_block_start {index} has no content_block")
        block = _Block(str(raw.get("type")))
        blocks[index] = block
        if block.type == "text":
            initial = raw.get("text") or ""
            if initial:
                block.text.append(str(initial))
                if on_delta is not None:
                    on_delta(MessageDelta(content=str(initial)))
        elif block.type == "tool_use":
            block.call_id = str(raw.get("id") or "")
            block.name = str(raw.get("name") or "")
            block.input = raw.get("input")
            block.ordinal = sum(1 for b in blocks.values() if b.type == "tool_use") - 1
            if on_delta is not None:
                on_delta(
                    MessageDelta(
                        tool_call_index=block.ordinal,
                        tool_call_id=block.call_id or None,
                        tool_name=block.name or None,
                    )
                )

    def _take_delta(
        self, data: Mapping[str, Any], blocks: dict[int, _Block], on_delta: DeltaHandler | None
    ) -> None:
        index = _index(data)
        block = blocks.get(index)
        delta = data.get("delta")
        if block is None or not isinstance(delta, Mapping):
            raise self._invalid(f"content_block_delta for block {index}, which never started")
        if delta.get("type") == "text_delta":
            piece = str(delta.get("text") or "")
            block.text.append(piece)
            if on_delta is not None and piece:
                on_delta(MessageDelta(content=piece))
        elif delta.get("type") == "input_json_delta":
            piece = str(delta.get("partial_json") or "")
            block.partial_json.append(piece)
            if on_delta is not None and piece:
                on_delta(
                    MessageDelta(
                        tool_call_index=block.ordinal,
                        tool_call_id=block.call_id or None,
                        arguments=piece,
                    )
                )


def _index(data: Mapping[str, Any]) -> int:
    index = data.get("index")
    return index if isinstance(index, int) else 0


def _present(usage: Any) -> dict[str, Any]:
    """The usage fields actually reported (a later event only updates some)."""
    if not isinstance(usage, Mapping):
        return {}
    return {k: v for k, v in usage.items() if v is not None}


# ---------------------------------------------------------------- to the wire


def _wire_tool(tool: Tool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": tool.name, "input_schema": dict(tool.parameters)}
    if tool.description:
        entry["description"] = tool.description
    return entry


def _tool_choice(choice: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``auto`` / ``none`` / ``any`` (or ``required``); any other name forces that tool."""
    if choice is None:
        return None
    if isinstance(choice, Mapping):
        return dict(choice)
    if choice in ("auto", "none", "any"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def _wire_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The ``system`` text and the alternating user/assistant messages.

    Consecutive messages of one wire role are merged (a tool message and the
    user message an expansion put after it become one user turn).
    """
    system: list[str] = []
    wire: list[dict[str, Any]] = []
    for message in messages:
        match message.role:
            case "system":
                if message.text:
                    system.append(message.text)
            case "user":
                _append(wire, "user", _blocks(message.content))
            case "assistant":
                blocks: list[dict[str, Any]] = (
                    [{"type": "text", "text": message.text}] if message.text else []
                )
                blocks.extend(
                    {
                        "type": "tool_use",
                        "id": call.call_id,
                        "name": call.name,
                        "input": dict(call.arguments),
                    }
                    for call in message.tool_calls
                )
                if blocks:
                    _append(wire, "assistant", blocks)
            case "tool":
                _append(
                    wire,
                    "user",
                    [
                        _tool_result(r.tool_call_id, r.content, r.is_error)
                        for r in message.tool_results
                    ],
                )
    for entry in wire:
        content = entry["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            entry["content"] = content[0]["text"]
    return "\n\n".join(system), wire


def _append(wire: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if wire and wire[-1]["role"] == role:
        wire[-1]["content"].extend(blocks)
    else:
        wire.append({"role": role, "content": blocks})


def _tool_result(tool_use_id: str, content: Content, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id}
    block["content"] = content if isinstance(content, str) else _blocks(content)
    if is_error:
        block["is_error"] = True
    return block


def _blocks(content: Content) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [_wire_part(part) for part in content if not (part.type == "text" and not part.content)]


def _wire_part(part: ContentPart) -> dict[str, Any]:
    match part.type:
        case "text":
            return {"type": "text", "text": part.content}
        case "image_url":
            return {"type": "image", "source": {"type": "url", "url": part.content}}
        case "image":
            return {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": part.options.get("media_type", "image/png"),
                    "data": part.content,
                },
            }
    raise ChainError(
        "unsupported_content",
        f"Anthropic messages cannot carry a content part of type {part.type!r}; "
        "supported: text, image_url, image (base64 with options media_type).",
        retryable=False,
    )
