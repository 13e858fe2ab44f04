"""What the real providers share: the HTTP transport (pooled client, retries, error
mapping) and :class:`HttpChatModel`, the frame of a model that calls through it.

A model owns one :class:`HttpTransport`, which owns one ``httpx.AsyncClient``,
created on first use so calls reuse connections (and created anew when the
event loop changed, as with repeated ``asyncio.run``). A request is retried a
bounded number of times on 429, 5xx, timeouts and connection failures, after
the server's ``Retry-After`` or an exponential backoff with jitter. Every failure
leaves as a :class:`~agentfsm.errors.ChainError` whose ``type`` says what
went wrong, and so whether another attempt, or another model, may succeed.

Only the opening of a stream is retried: once events have been handed out, a
retry would repeat them.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import email.utils
import json
import os
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, ClassVar, Final, Self

import httpx

from agentfsm.errors import ChainError
from agentfsm.messages import Message, Status, ToolCall
from agentfsm.tools import Tool

from ._sse import ServerSentEvent, SSEDecoder
from .base import DeltaHandler, ModelSettings

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_RETRY_WAIT",
    "DEFAULT_TIMEOUT",
    "EventStream",
    "HttpChatModel",
    "HttpTransport",
    "error_for_provider_type",
    "parse_arguments",
    "parse_json",
    "retry_after",
    "tool_call",
]

#: Seconds to wait for the next byte of a response (a long reply streams in many reads).
DEFAULT_TIMEOUT: Final = 120.0
#: Seconds to wait for a connection.
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
#: Retries after the first attempt.
DEFAULT_MAX_RETRIES: Final = 2
#: First backoff in seconds; doubled per retry, up to ``DEFAULT_MAX_BACKOFF``.
DEFAULT_BACKOFF: Final = 0.5
DEFAULT_MAX_BACKOFF: Final = 8.0
#: A server asking for a longer wait than this is not waited for: the error is
#: raised at once, so a fallback model can answer instead.
DEFAULT_MAX_RETRY_WAIT: Final = 60.0

#: How long a finished stream may take to send its last bytes; reading them lets
#: the connection go back to the pool instead of being closed.
_DRAIN_SECONDS: Final = 0.25
_SNIPPET: Final = 500
#: Provider error codes that waiting will not cure.
_FINAL_CODES: Final = frozenset({"insufficient_quota"})

#: Error types providers name in their bodies (OpenAI, Anthropic, compatible
#: servers), for errors that arrive without a status, inside a stream.
_PROVIDER_TYPES: Final[Mapping[str, str]] = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limited",
    "rate_limit_exceeded": "rate_limited",
    "insufficient_quota": "rate_limited",
    "authentication_error": "authentication",
    "permission_error": "authentication",
    "invalid_request_error": "bad_request",
    "not_found_error": "bad_request",
    "request_too_large": "bad_request",
    "api_error": "server_error",
    "server_error": "server_error",
    "timeout_error": "timeout",
}


def _snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


# ---------------------------------------------------------------- bodies


def parse_json(text: str | bytes, label: str, what: str) -> Any:
    """``text`` as JSON, or an ``invalid_response`` error saying what was malformed."""
    try:
        return json.loads(text)
    except ValueError as exc:
        shown = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        raise ChainError(
            "invalid_response",
            f"{label}: {what} is not valid JSON ({exc}): {_snippet(shown)!r}",
        ) from None


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
    except ValueError as exc:
        return {}, f"{raw} ({exc})"
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


# ---------------------------------------------------------------- errors


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _provider_error(content: bytes) -> tuple[str, str | None, str | None]:
    """The provider's own message, error type and code from an error body."""
    raw = content.decode("utf-8", errors="replace")
    try:
        data = json.loads(raw)
    except ValueError:
        return _snippet(raw) or "(empty body)", None, None
    return _error_fields(data, raw)


def _error_fields(data: Any, raw: str = "") -> tuple[str, str | None, str | None]:
    if not isinstance(data, Mapping):
        return _snippet(raw) or "(empty body)", None, None
    error = data.get("error", data)
    if not isinstance(error, Mapping):
        error = {"message": error}
    message = (
        _text(error.get("message"))
        or _text(error.get("detail"))
        or _text(data.get("message"))
        or _text(data.get("detail"))
        or _snippet(raw or json.dumps(data))
    )
    return message, _text(error.get("type")), _text(error.get("code"))


def error_for_provider_type(label: str, error: Any) -> ChainError:
    """A ChainError for an error object a provider sent inside a stream (no status)."""
    body = error if isinstance(error, Mapping) and "error" in error else {"error": error}
    message, provider_type, code = _error_fields(body)
    kind = _PROVIDER_TYPES.get(provider_type or "") or _PROVIDER_TYPES.get(code or "")
    return ChainError(
        kind or "server_error",
        f"{label}: the provider reported an error mid-stream"
        f"{f' ({provider_type})' if provider_type else ''}: {message}",
        details=_details(provider_type=provider_type, code=code),
    )


def _details(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _status_type(status: int, provider_type: str | None) -> str:
    if status == 529 or provider_type == "overloaded_error":
        return "overloaded"
    if status in (401, 403):
        return "authentication"
    if status == 429:
        return "rate_limited"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "server_error"
    if 400 <= status < 500:
        return "bad_request"
    return "invalid_response"


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, or ``Retry-After`` in
    seconds or as an HTTP date; None when absent or unreadable."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class EventStream:
    """The events of one streamed response, in order.

    Transport failures while reading become ChainErrors: a read timeout is
    ``timeout``, a connection dropped mid-way ``invalid_response`` marked
    retryable (the partial reply is lost; a new attempt may succeed).
    """

    def __init__(self, response: httpx.Response, label: str, timeout: float) -> None:
        self._response = response
        self._label = label
        self._timeout = timeout
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._ready: collections.deque[ServerSentEvent] = collections.deque()
        self._ended = False

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ServerSentEvent:
        while not self._ready:
            if self._ended:
                raise StopAsyncIteration
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                self._ready.extend(self._decoder.flush())
                continue
            except httpx.TimeoutException:
                raise ChainError(
                    "timeout",
                    f"{self._label}: the stream sent nothing for {self._timeout:g}s",
                ) from None
            except httpx.RequestError as exc:
                raise ChainError(
                    "invalid_response",
                    f"{self._label}: the stream was cut off mid-way ({type(exc).__name__}: {exc})",
                    retryable=True,
                ) from None
            self._ready.extend(self._decoder.feed(chunk))
        return self._ready.popleft()

    def cut_off(self, expected: str) -> ChainError:
        """The error for a stream that ended before its final event."""
        return ChainError(
            "invalid_response",
            f"{self._label}: the stream ended before {expected}; the reply is incomplete",
            retryable=True,
        )

    async def drain(self) -> None:
        """Read what is left of a finished stream, briefly, so its connection is reused."""
        try:
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for _ in self._chunks:
                    pass
        except (TimeoutError, httpx.RequestError):
            pass

    async def aclose(self) -> None:
        """Close the response; an unread remainder closes the connection with it."""
        try:
            aclose = getattr(self._chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await self._response.aclose()


class HttpTransport:
    """POST JSON to one endpoint, with retries, mapping every failure to a ChainError.

    ``label`` names the model in error messages. Close with :meth:`aclose`.
    """

    def __init__(
        self,
        label: str,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        self.label = label
        self.base_url = base_url.rstrip("/")
        self.headers: dict[str, str] = {"user-agent": "agentfsm", **(headers or {})}
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_wait = max_retry_wait
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------ client

    @property
    def client(self) -> httpx.AsyncClient:
        """The pooled client of the running loop, created on first use."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._loop is not loop:
            # A client from a finished loop cannot be closed from this one;
            # its connections died with that loop.
            self._client = httpx.AsyncClient(
                base_url=self.base_url + "/",
                headers=self.headers,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            )
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the pooled connections; the next call opens new ones."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            same_loop = self._loop is asyncio.get_running_loop()
        except RuntimeError:
            same_loop = False
        if same_loop:
            await client.aclose()

    # ------------------------------------------------------------ requests

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    async def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` and return the decoded JSON reply."""
        response = await self._open(path, body, stream=False)
        if response.status_code == 204 or not response.content:
            raise ChainError(
                "invalid_response",
                f"{self.label}: HTTP {response.status_code} with an empty body",
            )
        return parse_json(response.content, self.label, "the response body")

    @asynccontextmanager
    async def stream(self, path: str, body: Mapping[str, Any]) -> AsyncIterator[EventStream]:
        """POST ``body`` and yield the reply's server-sent events; closed on exit,
        cancellation included."""
        response = await self._open(path, body, stream=True)
        events = EventStream(response, self.label, self.timeout)
        try:
            content_type = response.headers.get("content-type", "")
            if content_type.startswith("application/json"):
                await self._not_a_stream(response)
            yield events
        finally:
            await events.aclose()

    async def _not_a_stream(self, response: httpx.Response) -> None:
        """A JSON body where events were expected: the provider's error, or malformed."""
        try:
            content = await response.aread()
        except httpx.RequestError as exc:
            raise self._transport_error(exc, response.request.url) from None
        data = parse_json(content, self.label, "the response body")
        if isinstance(data, Mapping) and data.get("error"):
            raise error_for_provider_type(self.label, data)
        raise ChainError(
            "invalid_response",
            f"{self.label}: expected an event stream, got JSON: {_snippet(content.decode())!r}",
        )

    async def _open(self, path: str, body: Mapping[str, Any], *, stream: bool) -> httpx.Response:
        """A 2xx response (its body read unless ``stream``), after bounded retries."""
        client = self.client
        attempt = 0
        while True:
            wait: float | None = None
            try:
                request = client.build_request("POST", path.lstrip("/"), json=body)
                response = await client.send(request, stream=True)
            except (httpx.RequestError, httpx.InvalidURL) as exc:
                error = self._transport_error(exc, self.url(path))
            else:
                try:
                    if response.is_success and stream:
                        return response
                    await response.aread()
                except httpx.RequestError as exc:
                    await response.aclose()
                    error = self._transport_error(exc, response.request.url)
                except BaseException:
                    await response.aclose()
                    raise
                else:
                    if response.is_success:
                        return response
                    error = self._status_error(response)
                    wait = retry_after(response.headers)
            final = (
                not error.retryable
                or attempt >= self.max_retries
                or error.details.get("code") in _FINAL_CODES
            )
            delay = wait if wait is not None else self._backoff(attempt)
            if not final and delay > self.max_retry_wait:
                final = True
                error = ChainError(
                    error.type,
                    f"{error.message} (the server asked to wait {delay:g}s; "
                    f"more than max_retry_wait={self.max_retry_wait:g}s)",
                    details=error.details,
                )
            if final:
                raise ChainError(
                    error.type,
                    error.message,
                    retryable=error.retryable,
                    details={**error.details, "attempts": attempt + 1},
                )
            attempt += 1
            await asyncio.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        """Exponential, capped, with jitter so clients that failed together spread out."""
        delay: float = min(self.max_backoff, self.backoff * 2**attempt)
        return delay * (0.5 + random.random() / 2)

    def _status_error(self, response: httpx.Response) -> ChainError:
        message, provider_type, code = _provider_error(response.content)
        status = response.status_code
        kind = _status_type(status, provider_type)
        hint = " Check the API key." if status == 401 else ""
        return ChainError(
            kind,
            f"{self.label}: HTTP {status} from {response.request.url}: {message}{hint}",
            details=_details(
                status=status,
                provider_type=provider_type,
                code=code,
                request_id=response.headers.get("x-request-id")
                or response.headers.get("request-id"),
            ),
        )

    def _transport_error(self, exc: Exception, url: object) -> ChainError:
        name = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, httpx.ConnectTimeout):
            return ChainError(
                "timeout", f"{self.label}: no connection to {url} within {self.connect_timeout:g}s"
            )
        if isinstance(exc, httpx.TimeoutException):
            return ChainError(
                "timeout", f"{self.label}: no response from {url} within {self.timeout:g}s ({name})"
            )
        if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol | httpx.LocalProtocolError):
            return ChainError("bad_request", f"{self.label}: cannot send to {url}: {name}")
        if isinstance(exc, httpx.DecodingError):
            return ChainError(
                "invalid_response", f"{self.label}: undecodable body from {url}: {name}"
            )
        return ChainError("connection", f"{self.label}: cannot reach {url}: {name}")


class HttpChatModel(abc.ABC):
    """The frame both HTTP providers share, so each one only speaks its own wire format.

    It keeps the settings, reads the key from the argument or ``_key_variable``,
    owns the transport and its closing, refuses a keyless call to the provider's
    own endpoint, and turns a reply's pieces into the assistant message.
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
        max_retries: int,
        backoff: float,
        max_backoff: float,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.settings = settings or ModelSettings()
        self.stream = stream or self.settings.stream
        self._api_key = api_key if api_key is not None else os.environ.get(self._key_variable)
        wire_headers = dict(headers)
        if self._api_key:
            wire_headers.update(self._key_headers(self._api_key))
        self._http = HttpTransport(
            self.name,
            self.base_url,
            headers=wire_headers,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
        )

    @property
    def name(self) -> str:
        return f"{self._provider}:{self.model}"

    def __repr__(self) -> str:
        options = f"base_url={self.base_url!r}, stream={self.stream}"
        return f"{type(self).__name__}({self.model!r}, {options})"

    async def aclose(self) -> None:
        """Close the pooled connections."""
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
        """One request; the assistant reply, or a ChainError."""
        if not self._api_key and self.base_url == self._official_url:
            raise ChainError(
                "authentication",
                f"{self.name}: no API key. Pass api_key=... or set {self._key_variable}"
                f"{self._key_hint}.",
            )
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
    def _usage(self, usage: Mapping[str, Any]) -> dict[str, int]:
        """The provider's token counts as ``input_tokens`` and ``output_tokens``."""

    def _message(
        self,
        text: str | None,
        calls: Sequence[ToolCall],
        reason: Any,
        usage: Any,
        data: Mapping[str, Any],
        **extra: Any,
    ) -> Message:
        """The reply with its metadata; ``extra`` entries are kept when they are set."""
        metadata: dict[str, Any] = {"model": self.name}
        if isinstance(usage, Mapping):
            metadata["usage"] = self._usage(usage)
        if reason is not None:
            metadata[self._reason_key] = reason
        if data.get("id"):
            metadata["response_id"] = data["id"]
        if data.get("model"):
            metadata["response_model"] = data["model"]
        metadata.update({key: value for key, value in extra.items() if value})
        status = self._statuses.get(reason, "complete") if isinstance(reason, str) else "complete"
        return Message.assistant(text or None, calls, status=status, metadata=metadata)

    def _invalid(self, what: str) -> ChainError:
        return ChainError("invalid_response", f"{self.name}: {what}")
