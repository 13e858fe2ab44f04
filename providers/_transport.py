"""The HTTP transport of the real providers: a pooled client, bounded retries, limits.

A model owns one :class:`HttpTransport`, which owns one ``httpx.AsyncClient``,
created on first use so calls reuse connections (and created anew when the
event loop changed, as with repeated ``asyncio.run``), unless the caller passes
its own client (proxies, mTLS, custom transports), which it then keeps and
closes itself. A request is retried per the :class:`RetryPolicy` on 429, 5xx,
timeouts and connection failures, after the server's ``Retry-After`` or an
exponential backoff with jitter; ``x-should-retry`` from the server wins.

Only the opening of a stream is retried, up to its first event: once events
have been handed out, a retry would repeat them. Every reply is bounded by :class:`Limits`.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import random
import socket
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import httpx

from agentfsm._errors import ChainError, ProviderError

from ._errors import error_for_provider_type, error_for_status, parse_json, snippet
from ._sse import ServerSentEvent, SSEDecoder, SSELimitError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "EventStream",
    "HttpTransport",
    "Limits",
    "RetryPolicy",
    "retry_after",
]

#: Seconds to wait for the next byte of a response (a long reply streams in many reads).
DEFAULT_TIMEOUT: Final = 120.0
#: Seconds to wait for a connection.
DEFAULT_CONNECT_TIMEOUT: Final = 10.0

#: How long a finished stream may take to send its last bytes; reading them lets
#: the connection go back to the pool instead of being closed.
_DRAIN_SECONDS: Final = 0.25
#: Linux: send the ACK now rather than delay it (None where there is no such option).
_QUICKACK: Final = getattr(socket, "TCP_QUICKACK", None)
#: Of an error body, this much is read; the rest is not needed to say what failed.
_ERROR_BODY_BYTES: Final = 64 * 1024
#: Provider error codes that waiting will not cure.
_FINAL_CODES: Final = frozenset({"insufficient_quota"})
#: Content types a stream may come in (some compatible servers send text/plain or none).
_STREAM_TYPES: Final = ("text/event-stream", "text/plain", "")


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


def _not_negative(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{attribute.name} must be 0 or more, got {value!r}")


def _attempts(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"attempts must be a positive integer, got {value!r}")


@attrs.frozen
class RetryPolicy:
    """How a failed request is tried again.

    ``attempts`` counts the first try. The wait before a retry is the server's
    ``Retry-After`` when given, else ``backoff`` doubled per retry up to
    ``max_backoff``, with jitter. A server asking for more than ``max_wait``
    seconds is not waited for: the error is raised at once, so a fallback model
    can answer instead.
    """

    attempts: int = attrs.field(default=3, validator=_attempts)
    backoff: float = attrs.field(default=0.5, validator=_not_negative)
    max_backoff: float = attrs.field(default=8.0, validator=_not_negative)
    max_wait: float = attrs.field(default=60.0, validator=_not_negative)

    def delay(self, retry: int) -> float:
        """The backoff before retry number ``retry`` (0 first): capped, with jitter so
        clients that failed together spread out."""
        delay: float = min(self.max_backoff, self.backoff * 2**retry)
        return delay * (0.5 + random.random() / 2)


@attrs.frozen
class Limits:
    """Bounds on what a provider may send back; passing one is ``response_too_large``
    (sizes) or ``timeout`` (stream duration), with the limit to raise named."""

    #: One line of an event stream (a line with no newline is held until it ends).
    max_line_bytes: int = attrs.field(default=8 * 1024 * 1024, validator=_positive)
    #: The data of one event.
    max_event_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_positive)
    #: A whole reply, streamed or not.
    max_response_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_positive)
    #: A stream, from its first byte to its last.
    max_stream_seconds: float = attrs.field(default=1800.0, validator=_positive)


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


def _socket(response: httpx.Response) -> Any:
    """The response's socket, where the transport has one (a custom one may not)."""
    stream = response.extensions.get("network_stream")
    get = getattr(stream, "get_extra_info", None)
    return get("socket") if get is not None else None


def _ack_now(sock: Any) -> None:
    """ACK what was read at once. A server that writes each event (or headers and
    body) separately with Nagle on holds each write until the last one is ACKed;
    a delayed ACK on a reused connection would stall every reply ~40 ms."""
    if sock is None or _QUICKACK is None:
        return
    try:  # noqa: SIM105 (not ``suppress``: a streamed reply comes here once per chunk)
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
    except (OSError, AttributeError, TypeError):
        pass


def _too_large(label: str, what: str, limit: int, setting: str) -> ChainError:
    return ProviderError(
        "response_too_large",
        f"{label}: {what} is larger than {limit} bytes; if that is expected, raise it "
        f"with limits=Limits({setting}=...)",
        retryable=False,
        details={"limit": setting, "bytes": limit},
    )


class EventStream:
    """The events of one streamed response, in order.

    Transport failures while reading become ChainErrors: a read timeout is
    ``timeout``, a connection dropped mid-way ``invalid_response`` marked
    retryable (the partial reply is lost; a new attempt may succeed). Past a
    limit, the stream ends in ``response_too_large`` or ``timeout``.
    """

    def __init__(
        self, response: httpx.Response, transport: HttpTransport, *, started: float
    ) -> None:
        self._response = response
        self._transport = transport
        self._label = transport.label
        limits = transport.limits
        self._limits = limits
        self._deadline = started + limits.max_stream_seconds
        self._max_bytes = limits.max_response_bytes
        self._received = 0
        self._chunks = response.aiter_bytes()
        self._socket = _socket(response)
        self._decoder = SSEDecoder(max_line=limits.max_line_bytes, max_event=limits.max_event_bytes)
        self._ready: collections.deque[ServerSentEvent] = collections.deque()
        self._ended = False
        self._finished = False

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ServerSentEvent:
        ready = self._ready
        if ready:
            return ready.popleft()
        while not self._ended:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                ready.extend(self._decoder.flush())
                break
            except httpx.TimeoutException:
                raise ProviderError(
                    "timeout",
                    f"{self._label}: the stream sent nothing for {self._transport.timeout:g}s",
                ) from None
            except httpx.RequestError as exc:
                raise ProviderError(
                    "invalid_response",
                    f"{self._label}: the stream was cut off mid-way ({type(exc).__name__}: {exc})",
                    retryable=True,
                ) from None
            _ack_now(self._socket)
            self._received += len(chunk)
            if self._received > self._max_bytes or time.monotonic() > self._deadline:
                self._check()
            try:
                events = self._decoder.feed(chunk)
            except SSELimitError as exc:
                setting = "max_line_bytes" if exc.what == "line" else "max_event_bytes"
                raise _too_large(
                    self._label, f"an event-stream {exc.what}", exc.limit, setting
                ) from None
            if events:  # most often one: handed out without the queue
                ready.extend(events[1:])
                return events[0]
        if ready:
            return ready.popleft()
        raise StopAsyncIteration

    async def prime(self) -> None:
        """Read up to the first event, so a stream that fails before it fails here,
        where nothing has been handed out yet (an empty stream fails too)."""
        if not self._ready:
            try:
                self._ready.appendleft(await self.__anext__())
            except StopAsyncIteration:
                raise self.cut_off("its first event") from None

    def _check(self) -> None:
        """A bound passed: the stream's size or its time."""
        limits = self._limits
        if self._received > limits.max_response_bytes:
            raise _too_large(
                self._label, "the stream", limits.max_response_bytes, "max_response_bytes"
            )
        if time.monotonic() > self._deadline:
            raise ProviderError(
                "timeout",
                f"{self._label}: the stream went on for more than {limits.max_stream_seconds:g}s; "
                "if that is expected, raise it with limits=Limits(max_stream_seconds=...)",
                details={"limit": "max_stream_seconds"},
            )

    def cut_off(self, expected: str) -> ChainError:
        """The error for a stream that ended before its final event."""
        return ProviderError(
            "invalid_response",
            f"{self._label}: the stream ended before {expected}; the reply is incomplete",
            retryable=True,
        )

    def finish(self) -> None:
        """The final event arrived: on close, what is left is read (briefly) so the
        connection goes back to the pool."""
        self._finished = True

    async def aclose(self) -> None:
        """Close the response; an unread remainder closes the connection with it."""
        try:
            if self._finished and not self._ended:
                async with asyncio.timeout(_DRAIN_SECONDS):
                    async for _ in self._chunks:
                        pass
        except (TimeoutError, httpx.RequestError):
            pass
        finally:
            try:
                aclose = getattr(self._chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                await self._response.aclose()


class HttpTransport:
    """POST JSON to one endpoint, with retries, mapping every failure to a ChainError.

    ``label`` names the model in error messages. ``base_url`` may carry a query
    (``?api-version=...``), sent with every request. Close with :meth:`aclose`;
    a ``client`` passed in is the caller's to close.
    """

    def __init__(
        self,
        label: str,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        retry: RetryPolicy | None = None,
        limits: Limits | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.label = label
        base, _, query = base_url.partition("?")
        self.base_url = base.rstrip("/")
        self._query = query
        self.headers: dict[str, str] = {"user-agent": "agentfsm", **(headers or {})}
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retry = retry or RetryPolicy()
        self.limits = limits or Limits()
        self._own = client is None
        self._client = client
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------ client

    @property
    def client(self) -> httpx.AsyncClient:
        """The pooled client: the caller's, or ours of the running loop, made on first use."""
        if not self._own:
            assert self._client is not None
            return self._client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._loop is not loop:
            # A client from a finished loop cannot be closed from this one;
            # its connections died with that loop.
            self._client = httpx.AsyncClient()
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the pooled connections (not a caller's client); the next call opens new ones."""
        if not self._own:
            return
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
        url = f"{self.base_url}/{path.lstrip('/')}"
        return f"{url}?{self._query}" if self._query else url

    async def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` and return the decoded JSON reply."""
        response, content, _ = await self._open(path, body, stream=False)
        if response.status_code == 204 or not content:
            raise ProviderError(
                "invalid_response",
                f"{self.label}: HTTP {response.status_code} with an empty body",
            )
        return parse_json(content, self.label, "the response body")

    @asynccontextmanager
    async def stream(self, path: str, body: Mapping[str, Any]) -> AsyncIterator[EventStream]:
        """POST ``body`` and yield the reply's server-sent events; closed on exit,
        cancellation included.

        A stream that fails before its first event (cut off, silent, empty) has
        handed nothing out, so it is tried again as a plain request would be; one
        that passed a bound of :class:`Limits` is not.
        """
        attempt = 1
        while True:
            started = time.monotonic()
            response, _, attempt = await self._open(path, body, stream=True, attempt=attempt)
            events = EventStream(response, self, started=started)
            try:
                content_type = (
                    response.headers.get("content-type", "").split(";")[0].strip().lower()
                )
                if content_type not in _STREAM_TYPES:
                    await self._not_a_stream(response, content_type)
                try:
                    await events.prime()
                except ChainError as error:
                    if "limit" in error.details:  # past a bound of Limits: not tried again
                        raise
                    delay = self._retry_delay(error, attempt, None, None)
                else:
                    yield events
                    return
            finally:
                await events.aclose()
            attempt += 1
            await asyncio.sleep(delay)

    async def _not_a_stream(self, response: httpx.Response, content_type: str) -> None:
        """Something else where events were expected: the provider's error, or a page."""
        try:
            content, _ = await self._read(response, _ERROR_BODY_BYTES)
        except httpx.RequestError as exc:
            raise self._transport_error(exc, response.request.url) from None
        text = content.decode("utf-8", errors="replace")
        if content_type.endswith("json"):
            data = parse_json(content, self.label, "the response body")
            if isinstance(data, Mapping) and data.get("error"):
                raise error_for_provider_type(self.label, data)
        raise ProviderError(
            "invalid_response",
            f"{self.label}: expected an event stream (text/event-stream), got "
            f"{content_type} from {response.request.url}: {snippet(text)!r}. Check base_url.",
        )

    async def _read(self, response: httpx.Response, limit: int) -> tuple[bytes, bool]:
        """At most ``limit`` bytes of the body, and whether there was more."""
        parts: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                await response.aclose()
                return b"".join(parts)[:limit], True
        return b"".join(parts), False

    async def _open(
        self, path: str, body: Mapping[str, Any], *, stream: bool, attempt: int = 1
    ) -> tuple[httpx.Response, bytes, int]:
        """A 2xx response, its body (unless ``stream``) and the attempt it took, after
        bounded retries (``attempt``: how many were made before this call, plus one)."""
        client = self.client
        url = self.url(path)
        timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        while True:
            wait: float | None = None
            should_retry: bool | None = None
            try:
                request = client.build_request(
                    "POST", url, json=body, headers=self.headers, timeout=timeout
                )
                response = await client.send(request, stream=True)
                _ack_now(_socket(response))
            except (httpx.RequestError, httpx.InvalidURL) as exc:
                error = self._transport_error(exc, url)
            else:
                try:
                    if response.is_success:
                        if stream:
                            return response, b"", attempt
                        return response, await self._body(response), attempt
                    content, _ = await self._read(response, _ERROR_BODY_BYTES)
                    error = error_for_status(
                        self.label,
                        response.status_code,
                        response.request.url,
                        content,
                        response.headers,
                    )
                    wait = retry_after(response.headers)
                    should_retry = _should_retry(response.headers)
                except httpx.RequestError as exc:
                    error = self._transport_error(exc, response.request.url)
                finally:
                    if not (stream and response.is_success):
                        await response.aclose()
            delay = self._retry_delay(error, attempt, wait, should_retry)
            attempt += 1
            await asyncio.sleep(delay)

    def _retry_delay(
        self, error: ChainError, attempt: int, wait: float | None, should_retry: bool | None
    ) -> float:
        """How long to wait before trying again after ``error``; the error itself
        (with the attempts made) when this was the last try."""
        retry = self.retry
        retryable = error.retryable if should_retry is None else should_retry
        final = (
            not retryable or attempt >= retry.attempts or error.details.get("code") in _FINAL_CODES
        )
        delay = wait if wait is not None else retry.delay(attempt - 1)
        if not final and delay > retry.max_wait:
            final = True
            error = ProviderError(
                error.type,
                f"{error.message} (the server asked to wait {delay:g}s; "
                f"more than RetryPolicy.max_wait={retry.max_wait:g}s)",
                details=error.details,
            )
        if final:
            raise ProviderError(
                error.type,
                error.message,
                retryable=error.retryable,
                details={**error.details, "attempts": attempt},
            )
        return delay

    async def _body(self, response: httpx.Response) -> bytes:
        limit = self.limits.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(self.label, "the response body", limit, "max_response_bytes")
        content, more = await self._read(response, limit)
        if more:
            raise _too_large(self.label, "the response body", limit, "max_response_bytes")
        return content

    def _transport_error(self, exc: Exception, url: object) -> ChainError:
        name = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, httpx.ConnectTimeout):
            return ProviderError(
                "timeout", f"{self.label}: no connection to {url} within {self.connect_timeout:g}s"
            )
        if isinstance(exc, httpx.TimeoutException):
            return ProviderError(
                "timeout", f"{self.label}: no response from {url} within {self.timeout:g}s ({name})"
            )
        if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol | httpx.LocalProtocolError):
            return ProviderError("bad_request", f"{self.label}: cannot send to {url}: {name}")
        if isinstance(exc, httpx.DecodingError):
            return ProviderError(
                "invalid_response", f"{self.label}: undecodable body from {url}: {name}"
            )
        return ProviderError("connection", f"{self.label}: cannot reach {url}: {name}")


def _should_retry(headers: Mapping[str, str]) -> bool | None:
    """The server's own say on retrying (``x-should-retry: true|false``), if any."""
    value = headers.get("x-should-retry", "").strip().lower()
    return {"true": True, "false": False}.get(value)
