"""The frame both HTTP providers share, so each one only speaks its own wire format."""

from __future__ import annotations

import abc
import base64
import binascii
import json
import mimetypes
import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Final, Self

import attrs
import httpx

from agentfsm._errors import ChainError, ProviderError
from agentfsm._messages import ContentPart, Message, Status, Thinking, ToolCall, Usage
from agentfsm._tools import Tool

from .._chat_model import DeltaHandler, ModelSettings
from ._errors import redact
from ._transport import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    HttpTransport,
    Limits,
    RetryPolicy,
)

__all__ = [
    "CUSTOM_KEY_VARIABLE",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "PDF",
    "HttpChatModel",
    "file_data_url",
    "file_name",
    "file_text",
    "parse_arguments",
    "tool_call",
]

#: The key for a ``base_url`` that is not the provider's own: the provider's
#: variable (``OPENAI_API_KEY``...) is sent to its official host only.
CUSTOM_KEY_VARIABLE: Final = "AGENTFSM_API_KEY"
#: Header names whose values are credentials, kept out of errors.
_CREDENTIAL_WORDS: Final = ("key", "auth", "token", "secret")


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as a dict, or ``({}, "<raw text> (<reason>)")``.

    An empty string counts as no arguments (some servers send it for tools
    without parameters); an object already decoded is taken as is.
    """
    if isinstance(raw, Mapping):
        return dict(raw), None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return {}, f"{json.dumps(raw)} (not a JSON object: got {_json_kind(raw)})"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return {}, f"{raw} ({reason})"
    if not isinstance(value, dict):
        return {}, f"{raw} (not a JSON object: got {_json_kind(value)})"
    return value, None


def _json_kind(value: Any) -> str:
    kinds = {list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def tool_call(call_id: str, name: str, raw: Any) -> ToolCall:
    """A ToolCall from a provider's raw arguments; bad arguments are kept, not raised."""
    arguments, invalid = parse_arguments(raw)
    return ToolCall(call_id, name, arguments, invalid_arguments=invalid)


#: The media type a ``file`` part has unless its options name another.
PDF: Final = "application/pdf"


def file_text(part: ContentPart) -> str:
    """The text of a plain-text ``file`` part (its content is base64)."""
    try:
        return base64.b64decode(part.content, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ProviderError(
            "unsupported_content",
            f"a text/plain file part holds base64 of UTF-8 text ({exc})",
            retryable=False,
        ) from None


def file_name(part: ContentPart) -> str:
    """A ``file`` part's name: its ``filename`` option, else one from its media type."""
    name = part.options.get("filename")
    if name:
        return str(name)
    media_type = str(part.options.get("media_type", PDF))
    return "document" + (mimetypes.guess_extension(media_type) or "")


def file_data_url(part: ContentPart) -> str:
    """A base64 ``file`` part as a ``data:`` URL."""
    return f"data:{part.options.get('media_type', PDF)};base64,{part.content}"


def _origin(url: str) -> tuple[str, str]:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "", ""
    return parsed.scheme, parsed.host


class HttpChatModel(abc.ABC):
    """The frame of a model behind HTTP.

    It keeps the settings, picks the key (the argument; else the provider's
    variable for its official host, ``AGENTFSM_API_KEY`` for any other),
    owns the transport and its closing, refuses a keyless call to the official
    endpoint, keeps credentials out of every error, and turns a reply's pieces
    into the assistant message.
    """

    #: ``name`` is ``{_provider}:{model}``.
    _provider: ClassVar[str]
    _key_variable: ClassVar[str]
    #: Said after ``_key_variable`` when the key is missing.
    _key_hint: ClassVar[str] = ""
    #: The provider's own endpoint: the one a call without a key is refused for.
    _official_url: ClassVar[str]
    _path: ClassVar[str]
    #: The metadata key of why the reply stopped, and the statuses those reasons mean.
    _reason_key: ClassVar[str]
    _statuses: ClassVar[Mapping[str, Status]]

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str,
        settings: ModelSettings | None,
        stream: bool,
        headers: Mapping[str, str],
        timeout: float,
        connect_timeout: float,
        retry: RetryPolicy | None,
        limits: Limits | None,
        http_client: httpx.AsyncClient | None,
    ) -> None:
        self.model = model
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            guess = f"http://{base_url}" if isinstance(base_url, str) else None
            raise ValueError(
                f"base_url {base_url!r} is not an http(s) URL"
                + (f": did you mean {guess!r}?" if guess and "://" not in base_url else "")
            )
        self.base_url = base_url.rstrip("/")
        self.settings = settings or ModelSettings()
        self.stream = stream or self.settings.stream
        self.official = _origin(self.base_url) == _origin(self._official_url)
        #: The provider's own key variable, set but not sent (it goes to its host only).
        self._withheld: str | None = None
        if api_key is None:
            variable = self._key_variable if self.official else CUSTOM_KEY_VARIABLE
            api_key = os.environ.get(variable)
            if not api_key and not self.official and os.environ.get(self._key_variable):
                self._withheld = self._key_variable
        self._api_key = api_key
        wire_headers = dict(headers)
        if self._api_key:
            wire_headers.update(self._key_headers(self._api_key))
        self._secrets = tuple(
            value
            for name, value in wire_headers.items()
            if any(word in name.lower() for word in _CREDENTIAL_WORDS)
        ) + ((self._api_key,) if self._api_key else ())
        self._http = HttpTransport(
            self.name,
            self.base_url,
            headers=wire_headers,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retry=retry,
            limits=limits,
            client=http_client,
        )

    @property
    def name(self) -> str:
        return f"{self._provider}:{self.model}"

    @property
    def provider_name(self) -> str:
        """Who serves the model, as telemetry names it (``gen_ai.provider.name``)."""
        return self._provider

    @property
    def server_address(self) -> str:
        """The host of ``base_url`` (``server.address``): a local server and the
        provider's own tell apart."""
        return _origin(self.base_url)[1]

    @property
    def server_port(self) -> int | None:
        """The port of ``base_url`` (``server.port``), the scheme's default when unnamed."""
        try:
            url = httpx.URL(self.base_url)
        except (httpx.InvalidURL, TypeError):
            return None
        return url.port or {"https": 443, "http": 80}.get(url.scheme)

    def __repr__(self) -> str:
        options = f"base_url={self.base_url!r}, stream={self.stream}"
        return f"{type(self).__name__}({self.model!r}, {options})"

    async def aclose(self) -> None:
        """Close the pooled connections (a client passed in stays open: it is the caller's)."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        """One request; the assistant reply, or a ChainError with no credential in it."""
        if not self._api_key and self.official:
            raise ProviderError(
                "authentication",
                f"{self.name}: no API key. Pass api_key=... or set {self._key_variable}"
                f"{self._key_hint}.",
            )
        try:
            return await self._complete(messages, tools, on_delta)
        except ChainError as error:
            cleaned = redact(error, self._secrets)
            if self._withheld and cleaned.type == "authentication":
                cleaned = ProviderError(
                    cleaned.type,
                    f"{cleaned.message} ({self._withheld} is set, but it is sent to "
                    f"{_origin(self._official_url)[1]} only, never to {self.server_address}: "
                    f"pass api_key=... or set {CUSTOM_KEY_VARIABLE} for this server)",
                    retryable=cleaned.retryable,
                    details=cleaned.details,
                )
            if cleaned is error:
                raise
            raise cleaned from None

    async def _complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], on_delta: DeltaHandler | None
    ) -> Message:
        body = self.request_body(messages, tools)
        if self.stream:
            return await self._complete_streaming(body, on_delta)
        return self._reply(await self._http.post_json(self._path, body))

    @abc.abstractmethod
    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body ``complete`` sends for this conversation."""

    @abc.abstractmethod
    def _key_headers(self, api_key: str) -> dict[str, str]:
        """The headers that carry the key."""

    @abc.abstractmethod
    def _reply(self, data: Any) -> Message:
        """The assistant message of a JSON reply."""

    @abc.abstractmethod
    async def _complete_streaming(
        self, body: Mapping[str, Any], on_delta: DeltaHandler | None
    ) -> Message:
        """The assistant message assembled from the reply's events."""

    @abc.abstractmethod
    def _usage(self, usage: Mapping[str, Any]) -> Usage:
        """The provider's token counts."""

    def _message(
        self,
        text: str | None,
        calls: Sequence[ToolCall],
        reason: Any,
        usage: Any,
        data: Mapping[str, Any],
        *,
        thinking: Sequence[Thinking] = (),
        status: Status | None = None,
        **extra: Any,
    ) -> Message:
        """The reply with its metadata; ``extra`` entries are kept when they are set."""
        metadata: dict[str, Any] = {"model": self.name}
        if isinstance(usage, Mapping):
            metadata["usage"] = self._usage(usage).to_dict()
            cost = usage.get("cost")  # what the call cost, where the server says (OpenRouter)
            if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
                metadata["cost"] = cost
        if reason is not None:
            metadata[self._reason_key] = reason
        if data.get("id"):
            metadata["response_id"] = data["id"]
        if data.get("model"):
            metadata["response_model"] = data["model"]
        metadata.update({key: value for key, value in extra.items() if value})
        if status is None:
            status = (
                self._statuses.get(reason, "complete") if isinstance(reason, str) else "complete"
            )
        return Message.assistant(
            text or None, calls, status=status, metadata=metadata, thinking=thinking
        )

    def _invalid(self, what: str) -> ChainError:
        return ProviderError("invalid_response", f"{self.name}: {what}")


def refuse_unknown(model_class: type, unknown: Mapping[str, Any]) -> None:
    """A model's constructor given names it does not take: one TypeError that says where a
    call's settings go (``settings=ModelSettings(...)``) or which option was meant."""
    if not unknown:
        return
    # import time: only a mistake needs it
    import difflib

    # import time: only a mistake needs it
    import inspect

    settings = [f.name for f in attrs.fields(ModelSettings)]
    options = list(inspect.signature(model_class).parameters)
    hints = []
    for name in sorted(unknown):
        if name in settings:
            hints.append(f"{name} is a call setting: settings=ModelSettings({name}=...)")
        elif close := difflib.get_close_matches(name, [*options, *settings], n=1):
            hints.append(f"{name}: did you mean {close[0]}?")
        else:
            hints.append(f"{name} is none of its options")
    raise TypeError(f"{model_class.__name__}() got unknown option(s): {'; '.join(hints)}")
