"""OpenAI Chat Completions, and the servers that speak it (vLLM, llama.cpp, Ollama, ...).

::

    model = OpenAIChat("gpt-4o-mini")                     # OPENAI_API_KEY from the environment
    local = OpenAIChat("qwen2.5", base_url="http://127.0.0.1:11434/v1")   # no key needed

``stream=True`` asks for server-sent events and hands every text, reasoning
and tool-call fragment to ``on_delta`` as it arrives; the reply is the same
either way. Reasoning (``reasoning_content`` of vLLM, DeepSeek, llama.cpp) is
kept as the reply's ``thinking``; a refusal ends the reply as ``filtered``.
Tool-call arguments that are not a JSON object never raise: the call carries
``invalid_arguments`` and becomes an error result the model can fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import httpx

from agentfsm._errors import ProviderError
from agentfsm._messages import ContentPart, Message, MessageDelta, Status, Thinking, Usage
from agentfsm._tools import Tool

from .._chat_model import DeltaHandler, ModelSettings, native_output
from ._errors import error_for_provider_type, parse_json, shown
from ._model import HttpChatModel, file_data_url, file_name, refuse_unknown, tool_call
from ._rules import ModelRules, rules_for
from ._transport import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Limits, RetryPolicy

__all__ = ["DEFAULT_BASE_URL", "OpenAIChat"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
_STATUS: Final[Mapping[str, Status]] = {"length": "length", "content_filter": "filtered"}


def is_reasoning_model(model: str) -> bool:
    """An OpenAI reasoning model (o1, o3, o4-mini, gpt-5...), by its name: no sampling
    parameters, ``max_completion_tokens``, ``reasoning_effort``."""
    return rules_for("openai", model).reasoning


@attrs.define
class _PartialCall:
    """A tool call being assembled from stream fragments."""

    call_id: str = ""
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)


@attrs.define
class _Partial:
    """A reply being assembled from stream chunks."""

    text: list[str] = attrs.field(factory=list)
    reasoning: list[str] = attrs.field(factory=list)
    refusal: list[str] = attrs.field(factory=list)
    calls: dict[int, _PartialCall] = attrs.field(factory=dict)


class OpenAIChat(HttpChatModel):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``api_key`` defaults to ``OPENAI_API_KEY`` for the official endpoint; without
    one, a call there fails with ``authentication``. Another ``base_url`` (a local
    server, a gateway) never gets ``OPENAI_API_KEY``: pass ``api_key=`` or set
    ``AGENTFSM_API_KEY``, else it is called without an ``Authorization`` header.
    A ``base_url`` may carry a query (Azure's ``?api-version=...``).
    ``settings.max_tokens`` is sent as ``max_completion_tokens`` to the official
    endpoint and reasoning models, and as the more widely understood
    ``max_tokens`` elsewhere; reasoning models get no ``temperature``.
    ``http_client`` is a client of yours (proxies, mTLS); ``retry`` and
    ``limits`` bound retries and replies. ``rules`` says what the model takes
    where :data:`~agentfsm.providers.rules.MODEL_RULES` does not know it yet.
    """

    _provider = "openai"
    _key_variable = "OPENAI_API_KEY"
    _key_hint = " (a local OpenAI-compatible server needs none: pass its base_url)"
    _official_url = DEFAULT_BASE_URL
    _path = "chat/completions"
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
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        retry: RetryPolicy | None = None,
        limits: Limits | None = None,
        http_client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        rules: ModelRules | None = None,
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
        self.rules = rules if rules is not None else rules_for(self._provider, model)

    def _key_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body ``complete`` sends for this conversation."""
        settings = self.settings
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _wire_messages(messages, settings.send_reasoning),
        }
        rules = self.rules
        reasoning = rules.reasoning
        tools, output = native_output(tools)
        if output is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": dict(output)}
        if tools:
            body["tools"] = [_wire_tool(t) for t in tools]
            if settings.tool_choice is not None:
                body["tool_choice"] = _tool_choice(settings.tool_choice)
            if settings.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = settings.parallel_tool_calls
        if settings.temperature is not None and rules.temperature:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            official = self.official or reasoning
            body["max_completion_tokens" if official else "max_tokens"] = settings.max_tokens
        if settings.reasoning_effort is not None and (reasoning or not self.official):
            body["reasoning_effort"] = settings.reasoning_effort
        elif settings.effort is not None and rules.effort:
            body["reasoning_effort"] = settings.effort
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(settings.extra)
        return body

    # ------------------------------------------------------------ replies

    def _reply(self, data: Any) -> Message:
        if not isinstance(data, Mapping):
            raise self._invalid(f"the response is not a JSON object: {shown(data)}")
        if data.get("error"):
            raise error_for_provider_type(self.name, data)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise self._invalid("the response has no choices")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, Mapping):
            raise self._invalid("the first choice has no message")
        calls = []
        raw_calls = message.get("tool_calls") or ()
        if not isinstance(raw_calls, list | tuple):
            raise self._invalid(f"the message's tool_calls are not a list: {shown(raw_calls)}")
        for index, raw in enumerate(raw_calls):
            if not isinstance(raw, Mapping):
                raise self._invalid(f"tool call {index} is not an object")
            function = raw.get("function") or {}
            if not isinstance(function, Mapping) or not function.get("name"):
                raise self._invalid(f"tool call {index} has no function name")
            calls.append(
                tool_call(
                    str(raw.get("id") or f"call_{index}"),
                    str(function["name"]),
                    function.get("arguments"),
                )
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            content = _text_of(content)
        refusal = message.get("refusal")
        refusal = refusal if isinstance(refusal, str) and refusal else None
        reasoning = _reasoning_of(message)
        return self._message(
            refusal or content,
            calls,
            choice.get("finish_reason"),
            data.get("usage"),
            data,
            thinking=[Thinking(reasoning)] if reasoning else (),
            status="filtered" if refusal else None,
            refusal=refusal,
        )

    def _usage(self, usage: Mapping[str, Any]) -> Usage:
        """Cached input (read and written) from ``prompt_tokens_details`` (DeepSeek:
        ``prompt_cache_hit_tokens``), reasoning from ``completion_tokens_details``."""
        prompt = usage.get("prompt_tokens_details")
        completion = usage.get("completion_tokens_details")
        prompt = prompt if isinstance(prompt, Mapping) else {}
        completion = completion if isinstance(completion, Mapping) else {}
        return Usage.from_dict(
            {
                "input_tokens": usage.get("prompt_tokens"),
                "output_tokens": usage.get("completion_tokens"),
                "cache_read_tokens": prompt.get("cached_tokens")
                or usage.get("prompt_cache_hit_tokens"),
                "cache_write_tokens": prompt.get("cache_write_tokens"),
                "reasoning_tokens": completion.get("reasoning_tokens"),
            }
        )

    async def _complete_streaming(
        self, body: Mapping[str, Any], on_delta: DeltaHandler | None
    ) -> Message:
        reply = _Partial()
        finish_reason: Any = None
        usage: Any = None
        first: dict[str, Any] = {}
        done = False
        async with self._http.stream(self._path, body) as events:
            async for event in events:
                if event.data == "[DONE]":
                    done = True
                    events.finish()
                    break
                chunk = parse_json(event.data, self.name, "a stream event")
                if not isinstance(chunk, Mapping):
                    raise self._invalid(f"a stream event is not a JSON object: {shown(event.data)}")
                if chunk.get("error"):
                    raise error_for_provider_type(self.name, chunk["error"])
                if not first:
                    first = {"id": chunk.get("id"), "model": chunk.get("model")}
                if chunk.get("usage"):
                    usage = chunk["usage"]
                choices = chunk.get("choices") or ()
                if not isinstance(choices, list | tuple):
                    raise self._invalid(
                        f"the choices of a stream event are not a list: {choices!r}"
                    )
                for choice in choices:
                    if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                        continue
                    if choice.get("finish_reason"):
                        finish_reason = choice["finish_reason"]
                    delta = choice.get("delta") or {}
                    if not isinstance(delta, Mapping):
                        raise self._invalid(f"a stream delta is not an object: {shown(delta)}")
                    self._take_delta(delta, reply, on_delta)
            if not done and finish_reason is None:
                raise events.cut_off("data: [DONE]")
        tool_calls = []
        for index in sorted(reply.calls):
            partial = reply.calls[index]
            if not partial.name:
                raise self._invalid(f"streamed tool call {index} never named its function")
            tool_calls.append(
                tool_call(
                    partial.call_id or f"call_{index}", partial.name, "".join(partial.arguments)
                )
            )
        refusal = "".join(reply.refusal)
        reasoning = "".join(reply.reasoning)
        return self._message(
            refusal or "".join(reply.text),
            tool_calls,
            finish_reason,
            usage,
            first,
            thinking=[Thinking(reasoning)] if reasoning else (),
            status="filtered" if refusal else None,
            refusal=refusal,
        )

    def _take_delta(
        self, delta: Mapping[str, Any], reply: _Partial, on_delta: DeltaHandler | None
    ) -> None:
        content = delta.get("content")
        if isinstance(content, str) and content:
            reply.text.append(content)
            if on_delta is not None:
                on_delta(MessageDelta(content=content))
        reasoning = _reasoning_of(delta)
        if reasoning:
            reply.reasoning.append(reasoning)
            if on_delta is not None:
                on_delta(MessageDelta(thinking=reasoning))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            reply.refusal.append(refusal)
        fragments = delta.get("tool_calls") or ()
        if not isinstance(fragments, list | tuple):
            raise self._invalid(f"streamed tool calls are not a list: {shown(fragments)}")
        calls = reply.calls
        for position, fragment in enumerate(fragments):
            if not isinstance(fragment, Mapping):
                raise self._invalid(f"a streamed tool call is not an object: {shown(fragment)}")
            index = _fragment_index(fragment, position, calls)
            partial = calls.setdefault(index, _PartialCall())
            function = fragment.get("function") or {}
            if not isinstance(function, Mapping):
                raise self._invalid(
                    f"a streamed tool call's function is not an object: {function!r}"
                )
            call_id = fragment.get("id") or None
            name = function.get("name") or None
            arguments = function.get("arguments") or ""
            if call_id:
                partial.call_id = str(call_id)
            if name:
                partial.name = str(name)
            if arguments:
                partial.arguments.append(str(arguments))
            if on_delta is not None:
                on_delta(
                    MessageDelta(
                        tool_call_index=index,
                        tool_call_id=None if call_id is None else str(call_id),
                        tool_name=None if name is None else str(name),
                        arguments=str(arguments),
                    )
                )


def _fragment_index(
    fragment: Mapping[str, Any], position: int, calls: dict[int, _PartialCall]
) -> int:
    """The call a fragment belongs to: its ``index``; servers that omit it get one
    by id (a new id starts a new call) or by position."""
    index = fragment.get("index")
    if isinstance(index, int):
        return index
    call_id = fragment.get("id")
    if call_id:
        for known, partial in calls.items():
            if partial.call_id == call_id:
                return known
        return max(calls, default=-1) + 1
    return max(calls, default=position)


def _reasoning_of(message: Mapping[str, Any]) -> str:
    """Reasoning text as compatible servers send it: ``reasoning_content`` (vLLM,
    DeepSeek, llama.cpp) or ``reasoning`` (OpenRouter, newer vLLM)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _text_of(content: Any) -> str | None:
    """Text of a content given as parts (some compatible servers answer that way)."""
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p
        )
    return None


# ---------------------------------------------------------------- to the wire


def _wire_tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": dict(tool.parameters)}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _tool_choice(choice: str | Mapping[str, Any]) -> str | dict[str, Any]:
    """``auto`` / ``none`` / ``required`` as is; any other name forces that tool."""
    if isinstance(choice, Mapping):
        return dict(choice)
    if choice in ("auto", "none", "required"):
        return choice
    if choice == "any":
        return "required"
    return {"type": "function", "function": {"name": choice}}


def _wire_messages(messages: Sequence[Message], send_reasoning: bool) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for message in messages:
        match message.role:
            case "system":
                wire.append({"role": "system", "content": message.text})
            case "user":
                wire.append({"role": "user", "content": _wire_content(message.content)})
            case "assistant":
                wire.append(_wire_assistant(message, send_reasoning))
            case "tool":
                wire.extend(
                    {"role": "tool", "tool_call_id": r.tool_call_id, "content": r.text}
                    for r in message.tool_results
                )
    return wire


def _wire_assistant(message: Message, send_reasoning: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    reasoning = "".join(t.text for t in message.thinking)
    if send_reasoning and reasoning:
        entry["reasoning_content"] = reasoning
    if message.tool_calls:
        entry["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
            }
            for call in message.tool_calls
        ]
    elif entry["content"] is None:
        entry["content"] = ""
    return entry


def _wire_content(content: str | tuple[ContentPart, ...] | None) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return [_wire_part(part) for part in content]


def _wire_part(part: ContentPart) -> dict[str, Any]:
    match part.type:
        case "text":
            return {"type": "text", "text": part.content}
        case "image_url":
            image: dict[str, Any] = {"url": part.content}
            if "detail" in part.options:
                image["detail"] = part.options["detail"]
            return {"type": "image_url", "image_url": image}
        case "image":
            media_type = part.options.get("media_type", "image/png")
            image = {"url": f"data:{media_type};base64,{part.content}"}
            if "detail" in part.options:
                image["detail"] = part.options["detail"]
            return {"type": "image_url", "image_url": image}
        case "file":
            if part.options.get("file_id"):
                return {"type": "file", "file": {"file_id": str(part.options["file_id"])}}
            return {
                "type": "file",
                "file": {"filename": file_name(part), "file_data": file_data_url(part)},
            }
    raise ProviderError(
        "unsupported_content",
        f"OpenAI chat messages cannot carry a content part of type {part.type!r}; "
        "supported: text, image_url, image (base64 with options media_type), file (base64 "
        "with options media_type and filename, or options file_id).",
        retryable=False,
    )
