"""Anthropic Messages API.

::

    model = AnthropicChat("claude-sonnet-4-5")          # ANTHROPIC_API_KEY from the environment

The system prompt travels in the separate ``system`` field; tool calls are
``tool_use`` blocks and their results ``tool_result`` blocks, the results of
one turn together in one user message. Thinking blocks are kept on the reply
(``Message.thinking``) and sent back, signed, in later turns, as a tool loop
with extended thinking requires. ``stream=True`` reads the event stream and
hands every text, thinking and tool-input fragment to ``on_delta``. A turn the
server paused (``pause_turn``) is continued within the same call. Tool input
that is not a JSON object never raises: the call carries ``invalid_arguments``.

One idea: one provider's wire format, both ways (messages to blocks, blocks and stream
events to messages); it changes as that API does, all at once.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import httpx

from agentfsm._errors import ProviderError
from agentfsm._messages import (
    Content,
    ContentPart,
    Message,
    MessageDelta,
    Status,
    Thinking,
    ToolCall,
    Usage,
)
from agentfsm._tools import Tool

from .._chat_model import DeltaHandler, ModelSettings
from ._errors import error_for_provider_type, parse_json, shown
from ._model import PDF, HttpChatModel, file_text, parse_arguments, refuse_unknown, tool_call
from ._rules import ModelRules, rules_for
from ._transport import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Limits, RetryPolicy

__all__ = [
    "API_VERSION",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_TOKENS",
    "AnthropicChat",
    "default_max_tokens",
    "takes_sampling",
]

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
API_VERSION: Final = "2023-06-01"
#: The API requires a token limit; this one applies to current models unless given
#: (agents write long tool inputs; older models get their own maximum).
DEFAULT_MAX_TOKENS: Final = 16000
#: A paused turn is continued at most this many times in one call.
_MAX_CONTINUATIONS: Final = 8
_STATUS: Final[Mapping[str, Status]] = {
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "filtered",
}
#: Content blocks whose tool input streams as ``input_json_delta``.
_TOOL_BLOCKS: Final = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def default_max_tokens(model: str) -> int:
    """The ``max_tokens`` a model gets unless one is given."""
    return rules_for("anthropic", model).max_tokens


def takes_sampling(model: str) -> bool:
    """Whether the model accepts ``temperature`` (newer Claude models refuse it)."""
    return rules_for("anthropic", model).temperature


@attrs.define
class _Block:
    """A content block being assembled from stream events."""

    type: str
    raw: Mapping[str, Any]
    text: list[str] = attrs.field(factory=list)
    signature: list[str] = attrs.field(factory=list)
    partial_json: list[str] = attrs.field(factory=list)
    citations: list[Any] = attrs.field(factory=list)
    ordinal: int = 0

    def wire(self) -> dict[str, Any]:
        """The block as the API takes it back (a paused turn is sent back whole)."""
        match self.type:
            case "text":
                text: dict[str, Any] = {"type": "text", "text": "".join(self.text)}
                if self.citations:
                    text["citations"] = list(self.citations)
                return text
            case "thinking":
                return {
                    "type": "thinking",
                    "thinking": "".join(self.text),
                    "signature": "".join(self.signature),
                }
        block = {k: v for k, v in self.raw.items() if v is not None}
        if self.type in _TOOL_BLOCKS and self.partial_json:
            block["input"] = parse_arguments("".join(self.partial_json))[0]
        return block


class AnthropicChat(HttpChatModel):
    """A Claude model behind the Messages API (``POST {base_url}/v1/messages``).

    ``api_key`` defaults to ``ANTHROPIC_API_KEY`` for the official endpoint;
    without one, a call there fails with ``authentication``. Another
    ``base_url`` (a proxy, a gateway) never gets ``ANTHROPIC_API_KEY``: pass
    ``api_key=`` or set ``AGENTFSM_API_KEY``. ``max_tokens`` defaults to
    ``settings.max_tokens``, else :func:`default_max_tokens` (raised to leave
    room above a thinking budget). ``temperature`` is left out for models that
    refuse it and while thinking. ``http_client`` is a client of yours
    (proxies, mTLS); ``retry`` and ``limits`` bound retries and replies.
    ``rules`` says what the model takes where :data:`~agentfsm.providers.rules.MODEL_RULES`
    does not know it yet. ``server_tools`` are tools Anthropic runs itself (web
    search, code execution: ``{"type": "web_search_20250305", "name": "web_search"}``),
    offered after the agent's; their blocks stay in the reply, in order.
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
        retry: RetryPolicy | None = None,
        limits: Limits | None = None,
        http_client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        rules: ModelRules | None = None,
        server_tools: Sequence[Mapping[str, Any]] = (),
        **unknown: Any,
    ) -> None:
        refuse_unknown(type(self), unknown)
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            settings=settings,
            stream=stream,
            headers={"anthropic-version": API_VERSION, **(headers or {})},
            timeout=timeout,
            connect_timeout=connect_timeout,
            retry=retry,
            limits=limits,
            http_client=http_client,
        )
        given = max_tokens if max_tokens is not None else self.settings.max_tokens
        self.rules = rules if rules is not None else rules_for(self._provider, model)
        self.server_tools = tuple(server_tools)
        budget = self.settings.thinking
        if self.rules.thinking == "adaptive" and budget is not None:
            budget = "adaptive"
        forced = (_tool_choice(self.settings.tool_choice) or {}).get("type") in ("any", "tool")
        if budget is not None and forced:
            raise ValueError(
                "with thinking on, Anthropic takes tool_choice 'auto' or 'none' only, got "
                f"{self.settings.tool_choice!r}"
            )
        if isinstance(budget, int) and not isinstance(budget, bool):
            if given is not None and given <= budget:
                raise ValueError(
                    f"max_tokens ({given}) must be larger than the thinking budget ({budget}): "
                    "thinking tokens count toward max_tokens"
                )
            self.max_tokens = given or max(self.rules.max_tokens, budget + 4096)
        else:
            self.max_tokens = given or self.rules.max_tokens

    def _key_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body ``complete`` sends for this conversation."""
        settings = self.settings
        cache: dict[str, Any] = {"type": "ephemeral"}
        if settings.cache_ttl is not None:
            cache["ttl"] = settings.cache_ttl
        system, wire = _wire_messages(messages)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": wire,
        }
        if system:
            if settings.cache_system:
                body["system"] = [{"type": "text", "text": system, "cache_control": cache}]
            else:
                body["system"] = system
        if tools or self.server_tools:
            body["tools"] = [_wire_tool(t) for t in tools] + [dict(t) for t in self.server_tools]
            if settings.cache_tools:
                body["tools"][-1]["cache_control"] = cache
            choice = _tool_choice(settings.tool_choice)
            if settings.parallel_tool_calls is False:
                choice = choice or {"type": "auto"}
                if choice.get("type") in ("auto", "any", "tool"):
                    choice["disable_parallel_tool_use"] = True
            if choice is not None:
                body["tool_choice"] = choice
        rules = self.rules
        thinking = settings.thinking
        if thinking == "adaptive" or (thinking is not None and rules.thinking == "adaptive"):
            body["thinking"] = {"type": "adaptive"}
        elif isinstance(thinking, int) and not isinstance(thinking, bool):
            body["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        if settings.effort is not None and rules.effort:
            body["output_config"] = {"effort": settings.effort}
        if settings.temperature is not None and thinking is None and rules.temperature:
            body["temperature"] = settings.temperature
        if self.stream:
            body["stream"] = True
        body.update(settings.extra)
        return body

    # ------------------------------------------------------------ replies

    async def _complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], on_delta: DeltaHandler | None
    ) -> Message:
        """One call; a paused turn is sent back as it was and continued, up to a bound."""
        body = self.request_body(messages, tools)
        replies: list[Message] = []
        paused: list[dict[str, Any]] = []
        for _ in range(_MAX_CONTINUATIONS + 1):
            if paused:
                body = {**body, "messages": [*body["messages"], _prefill(paused)]}
            if self.stream:
                reply, blocks = await self._stream(body, on_delta)
            else:
                reply, blocks = self._parse(await self._http.post_json(self._path, body))
            replies.append(reply)
            if reply.metadata.get("stop_reason") != "pause_turn":
                break
            paused.extend(blocks)
        return _merge(replies)

    def _reply(self, data: Any) -> Message:
        return self._parse(data)[0]

    def _parse(self, data: Any) -> tuple[Message, list[dict[str, Any]]]:
        if not isinstance(data, Mapping):
            raise self._invalid(f"the response is not a JSON object: {shown(data)}")
        if data.get("type") == "error" or data.get("error"):
            raise error_for_provider_type(self.name, data)
        content = data.get("content")
        if not isinstance(content, list):
            raise self._invalid("the response has no content list")
        text: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[Thinking] = []
        for index, block in enumerate(content):
            if not isinstance(block, Mapping):
                raise self._invalid(f"content block {index} is not an object")
            kind = block.get("type")
            if kind == "text":
                text.append(str(block.get("text") or ""))
            elif kind == "tool_use":
                if not block.get("name"):
                    raise self._invalid(f"tool_use block {index} has no name")
                calls.append(
                    tool_call(
                        str(block.get("id") or f"toolu_{index}"),
                        str(block["name"]),
                        block.get("input"),
                    )
                )
            elif kind == "thinking":
                thinking.append(
                    Thinking(str(block.get("thinking") or ""), str(block.get("signature") or ""))
                )
            elif kind == "redacted_thinking":
                thinking.append(Thinking(redacted=str(block.get("data") or "")))
        wire = [{k: v for k, v in b.items() if v is not None} for b in content]
        reply = self._message(
            "".join(text),
            calls,
            data.get("stop_reason"),
            data.get("usage"),
            data,
            thinking=thinking,
            content_blocks=_kept_layout(_layout(wire)),
        )
        return reply, wire

    def _usage(self, usage: Mapping[str, Any]) -> Usage:
        """Input counts cached tokens too, as OpenAI's ``prompt_tokens`` does."""
        details = usage.get("output_tokens_details")
        counts = Usage.from_dict(
            {
                "input_tokens": usage.get("input_tokens"),
                "output_tokens": usage.get("output_tokens"),
                "cache_read_tokens": usage.get("cache_read_input_tokens"),
                "cache_write_tokens": usage.get("cache_creation_input_tokens"),
                "reasoning_tokens": details.get("thinking_tokens")
                if isinstance(details, Mapping)
                else None,
            }
        )
        return attrs.evolve(
            counts,
            input_tokens=counts.input_tokens + counts.cache_read_tokens + counts.cache_write_tokens,
        )

    async def _complete_streaming(
        self, body: Mapping[str, Any], on_delta: DeltaHandler | None
    ) -> Message:
        return (await self._stream(body, on_delta))[0]

    async def _stream(
        self, body: Mapping[str, Any], on_delta: DeltaHandler | None
    ) -> tuple[Message, list[dict[str, Any]]]:
        blocks: dict[int, _Block] = {}
        start: Mapping[str, Any] = {}
        usage: dict[str, Any] = {}
        stop_reason: Any = None
        done = False
        async with self._http.stream(self._path, body) as events:
            async for event in events:
                data = parse_json(event.data, self.name, f"a {event.event} event")
                if not isinstance(data, Mapping):
                    raise self._invalid(f"a stream event is not a JSON object: {shown(event.data)}")
                kind = data.get("type", event.event)
                if kind == "error":
                    raise error_for_provider_type(self.name, data)
                if kind == "message_start":
                    start = data.get("message") or {}
                    if not isinstance(start, Mapping):
                        raise self._invalid("message_start carries no message object")
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
                    events.finish()
                    break
                # ping, content_block_stop and event types added later need nothing
            if not done:
                raise events.cut_off("message_stop")
        text: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[Thinking] = []
        for index in sorted(blocks):
            block = blocks[index]
            if block.type == "text":
                text.extend(block.text)
            elif block.type == "tool_use":
                raw = "".join(block.partial_json) if block.partial_json else block.raw.get("input")
                call_id = str(block.raw.get("id") or f"toolu_{index}")
                calls.append(tool_call(call_id, str(block.raw.get("name") or ""), raw))
            elif block.type == "thinking":
                thinking.append(Thinking("".join(block.text), "".join(block.signature)))
            elif block.type == "redacted_thinking":
                thinking.append(Thinking(redacted=str(block.raw.get("data") or "")))
        wire = [blocks[index].wire() for index in sorted(blocks)]
        reply = self._message(
            "".join(text),
            calls,
            stop_reason,
            usage or None,
            start,
            thinking=thinking,
            content_blocks=_kept_layout(_layout(wire)),
        )
        return reply, wire

    def _start_block(
        self, data: Mapping[str, Any], blocks: dict[int, _Block], on_delta: DeltaHandler | None
    ) -> None:
        index = _index(data)
        raw = data.get("content_block")
        if not isinstance(raw, Mapping):
            raise self._invalid(f"content_block_start {index} has no content_block")
        block = _Block(str(raw.get("type")), raw)
        blocks[index] = block
        if block.type in ("text", "thinking"):
            initial = raw.get(block.type) or ""
            if initial:
                block.text.append(str(initial))
                if on_delta is not None:
                    on_delta(_text_delta(block.type, str(initial)))
            if raw.get("signature"):
                block.signature.append(str(raw["signature"]))
        elif block.type == "tool_use":
            block.ordinal = sum(1 for b in blocks.values() if b.type == "tool_use") - 1
            if on_delta is not None:
                on_delta(
                    MessageDelta(
                        tool_call_index=block.ordinal,
                        tool_call_id=str(raw.get("id") or "") or None,
                        tool_name=str(raw.get("name") or "") or None,
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
        kind = delta.get("type")
        if kind in ("text_delta", "thinking_delta"):
            piece = str(delta.get("text" if kind == "text_delta" else "thinking") or "")
            block.text.append(piece)
            if on_delta is not None and piece:
                on_delta(_text_delta(block.type, piece))
        elif kind == "signature_delta":
            block.signature.append(str(delta.get("signature") or ""))
        elif kind == "citations_delta" and isinstance(delta.get("citation"), Mapping):
            block.citations.append(dict(delta["citation"]))
        elif kind == "input_json_delta":
            piece = str(delta.get("partial_json") or "")
            block.partial_json.append(piece)
            if on_delta is not None and piece and block.type == "tool_use":
                on_delta(
                    MessageDelta(
                        tool_call_index=block.ordinal,
                        tool_call_id=str(block.raw.get("id") or "") or None,
                        arguments=piece,
                    )
                )


def _text_delta(block_type: str, piece: str) -> MessageDelta:
    return MessageDelta(thinking=piece) if block_type == "thinking" else MessageDelta(content=piece)


def _index(data: Mapping[str, Any]) -> int:
    index = data.get("index")
    return index if isinstance(index, int) else 0


def _present(usage: Any) -> dict[str, Any]:
    """The usage fields actually reported (a later event only updates some)."""
    if not isinstance(usage, Mapping):
        return {}
    return {k: v for k, v in usage.items() if v is not None}


def _prefill(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """A paused turn's content, sent back as the assistant message to continue."""
    return {"role": "assistant", "content": list(blocks)}


def _merge(replies: Sequence[Message]) -> Message:
    """The replies of a continued turn as one: pieces in order, usage summed."""
    if len(replies) == 1:
        return replies[0]
    last = replies[-1]
    usages = [u for u in (Usage.of(r) for r in replies) if u is not None]
    metadata = {**last.metadata, "continuations": len(replies) - 1}
    metadata.pop(_LAYOUT_KEY, None)
    layout = _kept_layout([entry for r in replies for entry in _layout_of(r)])
    if layout is not None:
        metadata[_LAYOUT_KEY] = layout
    if usages:
        total = usages[0]
        for usage in usages[1:]:
            total += usage
        metadata["usage"] = total.to_dict()
    return Message.assistant(
        "".join(r.text for r in replies) or None,
        [call for r in replies for call in r.tool_calls],
        status=last.status,
        metadata=metadata,
        thinking=[t for r in replies for t in r.thinking],
    )


# ---------------------------------------------------------------- block order

#: The metadata key of a reply's block order, kept when sending back thinking,
#: text and tool calls in that order would lose something.
_LAYOUT_KEY: Final = "content_blocks"
_RANK: Final = {"thinking": 0, "text": 1, "tool_use": 2}


def _layout(blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A reply's blocks in order: thinking, text (by its length in characters) and
    tool calls stand for the reply's own; any other block (a server tool's call and
    result) is kept whole, to go back as it came."""
    layout: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind in ("thinking", "redacted_thinking"):
            layout.append({"type": "thinking"})
        elif kind == "tool_use":
            layout.append({"type": "tool_use"})
        elif kind == "text":
            entry: dict[str, Any] = {"type": "text", "chars": len(str(block.get("text") or ""))}
            if block.get("citations"):
                entry["citations"] = block["citations"]
            layout.append(entry)
        else:
            layout.append(dict(block))
    return layout


def _kept_layout(layout: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The layout when the usual order (thinking, text, tool calls) would lose
    something: another order, citations, server-tool blocks; else None."""
    ranks = [_RANK.get(entry["type"], -1) for entry in layout]
    if -1 in ranks or ranks != sorted(ranks) or any("citations" in e for e in layout):
        return layout
    return None


def _layout_of(message: Message) -> list[dict[str, Any]]:
    """A reply's layout: the one it keeps, else the usual order of its pieces."""
    kept = message.metadata.get(_LAYOUT_KEY)
    if isinstance(kept, list):
        return kept
    text = [{"type": "text", "chars": len(message.text)}] if message.text else []
    return [
        *({"type": "thinking"} for _ in message.thinking),
        *text,
        *({"type": "tool_use"} for _ in message.tool_calls),
    ]


def _fits(layout: Sequence[Any], message: Message) -> bool:
    """The layout still describes the message (one edited since is sent the usual way)."""
    if not all(isinstance(e, Mapping) and isinstance(e.get("type"), str) for e in layout):
        return False
    count = collections.Counter(str(e["type"]) for e in layout)
    chars = [e.get("chars") for e in layout if e["type"] == "text"]
    return (
        count["thinking"] == len(message.thinking)
        and count["tool_use"] == len(message.tool_calls)
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in chars)
        and sum(chars) == len(message.text)
    )


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    """An assistant reply's blocks: in the order they came when it keeps one, else
    thinking, text, tool calls; server-tool blocks go back either way."""
    layout = message.metadata.get(_LAYOUT_KEY)
    if not isinstance(layout, list) or not _fits(layout, message):
        kept = [e for e in layout or () if isinstance(e, Mapping) and e.get("type") not in _RANK]
        blocks = _wire_thinking(message.thinking) + [dict(e) for e in kept]
        if message.text:
            blocks.append({"type": "text", "text": message.text})
        blocks.extend(_tool_use(call) for call in message.tool_calls)
        return blocks
    thinking = iter(message.thinking)
    calls = iter(message.tool_calls)
    text = message.text
    blocks = []
    for entry in layout:
        match entry["type"]:
            case "thinking":
                blocks.extend(_wire_thinking([next(thinking)]))
            case "tool_use":
                blocks.append(_tool_use(next(calls)))
            case "text":
                piece, text = text[: entry["chars"]], text[entry["chars"] :]
                if piece or entry.get("citations"):
                    block: dict[str, Any] = {"type": "text", "text": piece}
                    if entry.get("citations"):
                        block["citations"] = entry["citations"]
                    blocks.append(block)
            case _:
                blocks.append(dict(entry))
    return blocks


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": call.call_id,
        "name": call.name,
        "input": dict(call.arguments),
    }


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
                blocks = _assistant_blocks(message)
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


def _wire_thinking(thinking: Sequence[Thinking]) -> list[dict[str, Any]]:
    """Signed thinking as it came; reasoning of another provider (unsigned) is left out."""
    blocks: list[dict[str, Any]] = []
    for block in thinking:
        if block.redacted:
            blocks.append({"type": "redacted_thinking", "data": block.redacted})
        elif block.signature:
            blocks.append(
                {"type": "thinking", "thinking": block.text, "signature": block.signature}
            )
    return blocks


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
        case "file":
            return _document(part)
        case "file_url":
            return _titled(
                {"type": "document", "source": {"type": "url", "url": part.content}}, part
            )
    raise ProviderError(
        "unsupported_content",
        f"Anthropic messages cannot carry a content part of type {part.type!r}; "
        "supported: text, image_url, image (base64 with options media_type), file (base64, "
        "or options file_id), file_url.",
        retryable=False,
    )


def _document(part: ContentPart) -> dict[str, Any]:
    """A ``file`` part: a PDF or plain-text document (an image file as an image)."""
    options = part.options
    if options.get("file_id"):
        return _titled(
            {"type": "document", "source": {"type": "file", "file_id": options["file_id"]}}, part
        )
    media_type = str(options.get("media_type", PDF))
    if media_type.startswith("image/"):
        source = {"type": "base64", "media_type": media_type, "data": part.content}
        return {"type": "image", "source": source}
    if media_type == "text/plain":
        source = {"type": "text", "media_type": media_type, "data": file_text(part)}
    elif media_type == PDF:
        source = {"type": "base64", "media_type": media_type, "data": part.content}
    else:
        raise ProviderError(
            "unsupported_content",
            f"Anthropic documents are PDF or plain text, not {media_type!r} "
            f"({part.options.get('filename') or 'a file part'}).",
            retryable=False,
        )
    return _titled({"type": "document", "source": source}, part)


def _titled(block: dict[str, Any], part: ContentPart) -> dict[str, Any]:
    if part.options.get("filename"):
        block["title"] = str(part.options["filename"])
    return block
