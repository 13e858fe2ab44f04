"""OpenAI Responses API.

::

    model = OpenAIResponses("gpt-5", settings=ModelSettings(effort="low"))

The conversation goes out whole each call (``store`` is off unless asked), so a
run is its own record and a checkpoint resumes anywhere. A reasoning model's
reasoning items come back with their encrypted content and go back, in their
place among the reply's items, on every later call of the tool loop: the reply
keeps them in ``metadata["output_items"]`` (which a checkpoint saves), and their
summaries as ``Message.thinking``. Built-in tools' items (a web search's call)
are kept and sent back the same way. ``stream=True`` reads the event stream and
hands text, reasoning summaries and tool-call fragments to ``on_delta``; a
refusal ends the reply as ``filtered``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import httpx

from agentfsm._errors import ProviderError
from agentfsm._messages import Content, ContentPart, Message, MessageDelta, Status, Thinking, Usage
from agentfsm._tools import Tool

from .._chat_model import DeltaHandler, ModelSettings, native_output
from ._errors import error_for_provider_type, parse_json, shown
from ._model import HttpChatModel, file_data_url, file_name, refuse_unknown, tool_call
from ._openai import DEFAULT_BASE_URL
from ._rules import ModelRules, rules_for
from ._transport import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Limits, RetryPolicy

__all__ = ["OpenAIResponses"]

_STATUS: Final[Mapping[str, Status]] = {
    "max_output_tokens": "length",
    "content_filter": "filtered",
}
#: The metadata key of a reply's items in order, kept when they carry more than
#: its text and tool calls (reasoning, built-in tools' items).
_ITEMS_KEY: Final = "output_items"
#: The events that end a stream, with the response they carry.
_FINAL_EVENTS: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})


@attrs.define
class _Streamed:
    """A reply being assembled from stream events: the items by output index."""

    items: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    arguments: dict[int, list[str]] = attrs.field(factory=dict)
    ordinals: dict[int, int] = attrs.field(factory=dict)


class OpenAIResponses(HttpChatModel):
    """A model behind OpenAI's Responses API (``POST {base_url}/responses``).

    Keys, ``base_url``, retries and limits work as for :class:`OpenAIChat`.
    ``store``: let OpenAI keep the responses (off: each request carries the whole
    conversation, reasoning included as encrypted content). ``reasoning_summary``
    (``auto``, ``concise``, ``detailed``) asks reasoning models for summaries of
    their reasoning, kept as the reply's ``thinking``. ``settings.effort`` (or
    ``reasoning_effort``) goes to reasoning models as ``reasoning.effort``;
    ``max_tokens`` as ``max_output_tokens``. ``rules``: as for :class:`OpenAIChat`.
    ``server_tools`` are OpenAI's built-in tools (``{"type": "web_search"}``...),
    offered after the agent's; their items stay in the reply, in order.
    """

    _provider = "openai"
    _key_variable = "OPENAI_API_KEY"
    _key_hint = " (an OpenAI-compatible server needs none: pass its base_url)"
    _official_url = DEFAULT_BASE_URL
    _path = "responses"
    _reason_key = "finish_reason"
    _statuses = _STATUS

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        settings: ModelSettings | None = None,
        stream: bool = False,
        store: bool = False,
        reasoning_summary: str | None = None,
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
            headers=headers or {},
            timeout=timeout,
            connect_timeout=connect_timeout,
            retry=retry,
            limits=limits,
            http_client=http_client,
        )
        self.store = store
        self.reasoning_summary = reasoning_summary
        self.rules = rules if rules is not None else rules_for(self._provider, model)
        self.server_tools = tuple(server_tools)

    def _key_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body ``complete`` sends for this conversation."""
        settings = self.settings
        rules = self.rules
        body: dict[str, Any] = {"model": self.model, "input": _wire_input(messages)}
        tools, output = native_output(tools)
        if output is not None:
            body["text"] = {"format": {"type": "json_schema", **output}}
        if tools or self.server_tools:
            body["tools"] = [_wire_tool(t) for t in tools] + [dict(t) for t in self.server_tools]
            if settings.tool_choice is not None:
                body["tool_choice"] = _tool_choice(settings.tool_choice)
            if settings.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = settings.parallel_tool_calls
        if settings.temperature is not None and rules.temperature:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_output_tokens"] = settings.max_tokens
        if rules.reasoning:
            reasoning: dict[str, Any] = {}
            effort = settings.reasoning_effort or settings.effort
            if effort is not None:
                reasoning["effort"] = effort
            if self.reasoning_summary is not None:
                reasoning["summary"] = self.reasoning_summary
            if reasoning:
                body["reasoning"] = reasoning
            if not self.store:
                body["include"] = ["reasoning.encrypted_content"]
        body["store"] = self.store
        if self.stream:
            body["stream"] = True
        body.update(settings.extra)
        return body

    # ------------------------------------------------------------ replies

    def _reply(self, data: Any) -> Message:
        if not isinstance(data, Mapping):
            raise self._invalid(f"the response is not a JSON object: {shown(data)}")
        if data.get("status") == "failed" or (
            data.get("error") and data.get("object") != "response"
        ):
            raise error_for_provider_type(self.name, data.get("error") or data)
        output = data.get("output")
        if not isinstance(output, list):
            raise self._invalid("the response has no output list")
        return self._from_items(output, data)

    def _from_items(self, output: Sequence[Any], data: Mapping[str, Any]) -> Message:
        """The reply of a response's output items."""
        text: list[str] = []
        refusal: list[str] = []
        calls = []
        thinking: list[Thinking] = []
        layout: list[dict[str, Any]] = []
        for index, item in enumerate(output):
            if not isinstance(item, Mapping):
                raise self._invalid(f"output item {index} is not an object")
            kind = item.get("type")
            if kind == "message":
                said, refused = _message_text(item)
                text.append(said)
                refusal.append(refused)
                entry: dict[str, Any] = {"type": "message", "chars": len(said or refused)}
                if item.get("id"):
                    entry["id"] = item["id"]
                if refused:
                    entry["refusal"] = True
                layout.append(entry)
            elif kind == "function_call":
                if not item.get("name"):
                    raise self._invalid(f"function_call item {index} has no name")
                call_id = str(item.get("call_id") or item.get("id") or f"call_{index}")
                calls.append(tool_call(call_id, str(item["name"]), item.get("arguments")))
                layout.append(
                    {"type": "function_call", **({"id": item["id"]} if item.get("id") else {})}
                )
            else:
                if kind == "reasoning":
                    summary = _summary_text(item)
                    if summary:
                        thinking.append(Thinking(text=summary))
                layout.append(_present(item))
        said = "".join(text)
        refused = "".join(refusal)
        reason = _reason(data)
        keep = any(entry["type"] not in ("message", "function_call") for entry in layout)
        return self._message(
            refused or said,
            calls,
            reason,
            data.get("usage"),
            data,
            thinking=thinking,
            status="filtered" if refused else None,
            refusal=refused,
            **{_ITEMS_KEY: layout if keep else None},
        )

    def _usage(self, usage: Mapping[str, Any]) -> Usage:
        """Cached input (read and written) and reasoning tokens from the details."""
        given = usage.get("input_tokens_details")
        taken = usage.get("output_tokens_details")
        given = given if isinstance(given, Mapping) else {}
        taken = taken if isinstance(taken, Mapping) else {}
        return Usage.from_dict(
            {
                "input_tokens": usage.get("input_tokens"),
                "output_tokens": usage.get("output_tokens"),
                "cache_read_tokens": given.get("cached_tokens"),
                "cache_write_tokens": given.get("cache_write_tokens"),
                "reasoning_tokens": taken.get("reasoning_tokens"),
            }
        )

    async def _complete_streaming(
        self, body: Mapping[str, Any], on_delta: DeltaHandler | None
    ) -> Message:
        streamed = _Streamed()
        final: Mapping[str, Any] | None = None
        async with self._http.stream(self._path, body) as events:
            async for event in events:
                data = parse_json(event.data, self.name, f"a {event.event} event")
                if not isinstance(data, Mapping):
                    raise self._invalid(f"a stream event is not a JSON object: {shown(event.data)}")
                kind = data.get("type", event.event)
                if kind == "error":
                    raise error_for_provider_type(
                        self.name, {k: v for k, v in data.items() if k != "type"}
                    )
                if kind in _FINAL_EVENTS:
                    final = data.get("response")
                    if not isinstance(final, Mapping):
                        raise self._invalid(f"{kind} carries no response object")
                    events.finish()
                    break
                self._take_event(str(kind), data, streamed, on_delta)
            if final is None:
                raise events.cut_off("response.completed")
        if final.get("status") == "failed":
            raise error_for_provider_type(self.name, final.get("error") or final)
        output = final.get("output")
        if not isinstance(output, list) or not output:
            output = [streamed.items[index] for index in sorted(streamed.items)]
        return self._from_items(output, final)

    def _take_event(
        self,
        kind: str,
        data: Mapping[str, Any],
        streamed: _Streamed,
        on_delta: DeltaHandler | None,
    ) -> None:
        index = data.get("output_index")
        index = index if isinstance(index, int) else 0
        delta = data.get("delta")
        piece = delta if isinstance(delta, str) else ""
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = data.get("item")
            if not isinstance(item, Mapping):
                raise self._invalid(f"{kind} carries no item")
            streamed.items[index] = dict(item)
            if (
                kind == "response.output_item.added"
                and item.get("type") == "function_call"
                and index not in streamed.ordinals
            ):
                streamed.ordinals[index] = len(streamed.ordinals)
                if on_delta is not None:
                    on_delta(
                        MessageDelta(
                            tool_call_index=streamed.ordinals[index],
                            tool_call_id=str(item.get("call_id") or "") or None,
                            tool_name=str(item.get("name") or "") or None,
                        )
                    )
        elif on_delta is None or not piece:
            return
        elif kind == "response.output_text.delta":
            on_delta(MessageDelta(content=piece))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            on_delta(MessageDelta(thinking=piece))
        elif kind == "response.function_call_arguments.delta" and index in streamed.ordinals:
            call_id = streamed.items.get(index, {}).get("call_id")
            on_delta(
                MessageDelta(
                    tool_call_index=streamed.ordinals[index],
                    tool_call_id=str(call_id) if call_id else None,
                    arguments=piece,
                )
            )


def _reason(data: Mapping[str, Any]) -> Any:
    details = data.get("incomplete_details")
    if isinstance(details, Mapping) and details.get("reason"):
        return details["reason"]
    return data.get("status")


def _present(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item without its unset fields (at any depth), as it goes back."""
    return {k: _unset_out(v) for k, v in item.items() if v is not None}


def _unset_out(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _present(value)
    if isinstance(value, list):
        return [_unset_out(v) for v in value]
    return value


def _message_text(item: Mapping[str, Any]) -> tuple[str, str]:
    """The text and the refusal of an output message."""
    text: list[str] = []
    refusal: list[str] = []
    for part in item.get("content") or ():
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "output_text":
            text.append(str(part.get("text") or ""))
        elif part.get("type") == "refusal":
            refusal.append(str(part.get("refusal") or ""))
    return "".join(text), "".join(refusal)


def _summary_text(item: Mapping[str, Any]) -> str:
    parts = item.get("summary") or ()
    texts = [str(p.get("text") or "") for p in parts if isinstance(p, Mapping)]
    return "\n\n".join(t for t in texts if t)


# ---------------------------------------------------------------- to the wire


def _wire_tool(tool: Tool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "parameters": dict(tool.parameters),
        "strict": False,
    }
    if tool.description:
        entry["description"] = tool.description
    return entry


def _tool_choice(choice: str | Mapping[str, Any]) -> str | dict[str, Any]:
    """``auto`` / ``none`` / ``required`` as is; any other name forces that tool."""
    if isinstance(choice, Mapping):
        return dict(choice)
    if choice in ("auto", "none", "required"):
        return choice
    if choice == "any":
        return "required"
    return {"type": "function", "name": choice}


def _wire_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for message in messages:
        match message.role:
            case "system":
                wire.append({"role": "system", "content": message.text})
            case "user":
                wire.append({"role": "user", "content": _wire_content(message.content)})
            case "assistant":
                wire.extend(_wire_assistant(message))
            case "tool":
                wire.extend(
                    {
                        "type": "function_call_output",
                        "call_id": r.tool_call_id,
                        "output": _wire_output(r.content),
                    }
                    for r in message.tool_results
                )
    return wire


def _wire_assistant(message: Message) -> list[dict[str, Any]]:
    """A reply's items: as they came when it keeps them (reasoning in its place),
    else its text and tool calls; an edited reply keeps its reasoning items first."""
    layout = message.metadata.get(_ITEMS_KEY)
    if not isinstance(layout, list) or not _fits(layout, message):
        kept = [dict(e) for e in layout or () if _is_kept(e)]
        said = [{"role": "assistant", "content": message.text}] if message.text else []
        return kept + said + [_function_call(c, None) for c in message.tool_calls]
    calls = iter(message.tool_calls)
    text = message.text
    items: list[dict[str, Any]] = []
    for entry in layout:
        if entry["type"] == "message":
            piece, text = text[: entry["chars"]], text[entry["chars"] :]
            items.append(_output_message(piece, entry.get("id"), bool(entry.get("refusal"))))
        elif entry["type"] == "function_call":
            items.append(_function_call(next(calls), entry.get("id")))
        else:
            items.append(dict(entry))
    return items


def _is_kept(entry: Any) -> bool:
    return isinstance(entry, Mapping) and entry.get("type") not in ("message", "function_call")


def _fits(layout: Sequence[Any], message: Message) -> bool:
    """The items still describe the message (one edited since is sent the usual way)."""
    if not all(isinstance(e, Mapping) and isinstance(e.get("type"), str) for e in layout):
        return False
    calls = sum(1 for e in layout if e["type"] == "function_call")
    chars = [e.get("chars") for e in layout if e["type"] == "message"]
    return (
        calls == len(message.tool_calls)
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in chars)
        and sum(chars) == len(message.text)
    )


def _output_message(text: str, item_id: Any, refusal: bool) -> dict[str, Any]:
    if not item_id:
        return {"role": "assistant", "content": text}
    part = (
        {"type": "refusal", "refusal": text}
        if refusal
        else {"type": "output_text", "text": text, "annotations": []}
    )
    return {
        "type": "message",
        "id": str(item_id),
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def _function_call(call: Any, item_id: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": json.dumps(dict(call.arguments)),
    }
    if item_id:
        item["id"] = str(item_id)
    return item


def _wire_content(content: Content) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return [_wire_part(part) for part in content]


def _wire_output(content: Content) -> str | list[dict[str, Any]]:
    """A tool result: text as it is, parts (images, files) as input parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if all(part.type == "text" for part in content):
        return "".join(part.content for part in content)
    return [_wire_part(part) for part in content]


def _wire_part(part: ContentPart) -> dict[str, Any]:
    options = part.options
    match part.type:
        case "text":
            return {"type": "input_text", "text": part.content}
        case "image_url":
            return {
                "type": "input_image",
                "image_url": part.content,
                "detail": options.get("detail", "auto"),
            }
        case "image":
            media_type = options.get("media_type", "image/png")
            return {
                "type": "input_image",
                "image_url": f"data:{media_type};base64,{part.content}",
                "detail": options.get("detail", "auto"),
            }
        case "file":
            if options.get("file_id"):
                return {"type": "input_file", "file_id": str(options["file_id"])}
            return {
                "type": "input_file",
                "filename": file_name(part),
                "file_data": file_data_url(part),
            }
        case "file_url":
            return {"type": "input_file", "file_url": part.content}
    raise ProviderError(
        "unsupported_content",
        f"OpenAI Responses input cannot carry a content part of type {part.type!r}; "
        "supported: text, image_url, image (base64 with options media_type), file (base64 "
        "with options media_type and filename, or options file_id), file_url.",
        retryable=False,
    )
