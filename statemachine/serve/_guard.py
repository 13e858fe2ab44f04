"""Who may talk to a served agent, and how much they may send.

A served agent runs tools and spends tokens for whoever reaches it, so the app is
closed by default, as the studio is: without a token it answers requests addressed
to a loopback host only (no DNS rebinding); with one, every request carries it.
No other site's page may drive it: a request from a browser page of another origin
is refused unless that origin is named, and only named origins get CORS headers.
Bodies are bounded before they are parsed.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Final

__all__ = ["COOKIE", "Guard", "_TooLargeError", "read_body"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The cookie a browser keeps the token in once it opened a link carrying it.
COOKIE: Final = "agentfsm_serve"

_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class _TooLargeError(ValueError):
    """A request body past the app's bound."""


def _host_of(header: str) -> str:
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _query_token(scope: Scope) -> str | None:
    # import time: only a token link needs it
    from urllib.parse import parse_qs

    query = scope.get("query_string", b"").decode("latin-1")
    found = parse_qs(query).get("token")
    return found[0] if found else None


async def read_body(receive: Receive, limit: int, declared: str | None) -> bytes:
    """The request's body, refused past ``limit`` bytes before more is read."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLargeError(f"the body is {declared} bytes; this app takes at most {limit}")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLargeError(f"the body is over {limit} bytes, the most this app takes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class Guard:
    """ASGI middleware: host or token, origin, CORS for named origins, bounded bodies.

    A plain ASGI wrapper (not a BaseHTTPMiddleware) so the event streams it lets
    through are streamed as they are written and see the client go away.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        origins: Iterable[str] = (),
        max_body: int,
    ) -> None:
        self.app = app
        self.token = token
        self.origins = frozenset(origins)
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        origin = headers.get("origin")
        refused = self._refusal(scope, headers, origin)
        if refused is not None:
            await _plain(send, *refused, self._cors(origin))
            return
        if self.token is not None and scope["method"] == "GET" and _query_token(scope):
            # A link with the token (checked above): kept in a cookie, dropped from the
            # address bar, so the page's own requests carry it and no other site's can.
            cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            moved = [
                (b"location", scope.get("path", "/").encode("latin-1")),
                (b"set-cookie", cookie.encode("latin-1")),
            ]
            await _plain(send, 303, "", moved)
            return
        if scope["method"] == "OPTIONS" and origin is not None:
            cors = self._cors(origin)
            await _plain(send, 204, "", cors)
            return
        body = b""
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                body = await read_body(receive, self.max_body, headers.get("content-length"))
            except _TooLargeError as exc:
                await _plain(send, 413, str(exc), self._cors(origin))
                return
        sent_body = False

        async def replay() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        extra = self._cors(origin) + _SAFETY

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, replay, with_headers)

    def _refusal(
        self, scope: Scope, headers: dict[str, str], origin: str | None
    ) -> tuple[int, str] | None:
        """Why the request is refused (status, text), or None."""
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
        if origin is not None and origin != own and origin not in self.origins:
            return 403, "requests from another site's page are refused (name its origin)"
        if scope["method"] == "OPTIONS":
            return None  # a preflight carries no credentials; it is answered with CORS only
        if self.token is None:
            if _host_of(headers.get("host", "")) not in _LOOPBACK:
                return 403, "this app answers on loopback only; serve it with a token"
            return None
        bearer = headers.get("authorization", "").removeprefix("Bearer ").strip()
        linked = _query_token(scope) if scope["method"] == "GET" else None
        sent = linked or bearer or _cookie(headers.get("cookie", ""), COOKIE) or ""
        if not sent or not hmac.compare_digest(sent.encode(), self.token.encode()):
            return 401, "a token is needed: Authorization: Bearer TOKEN"
        return None

    def _cors(self, origin: str | None) -> list[tuple[bytes, bytes]]:
        if origin is None or origin not in self.origins:
            return []
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
            (
                b"access-control-allow-headers",
                b"authorization, content-type, last-event-id, a2a-version",
            ),
            (b"access-control-max-age", b"600"),
            (b"vary", b"Origin"),
        ]


_SAFETY: Final = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


async def _plain(send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": text}).encode() if text else b""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
                *_SAFETY,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
