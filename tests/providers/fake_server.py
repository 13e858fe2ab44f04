"""A scripted HTTP server on loopback that the provider tests talk to.

Each test queues the replies the server gives, in order (a reply may also be a
function of the request); when the queue is empty the ``default`` reply is
used. Replies are JSON bodies, raw bytes, or server-sent event streams sent in
HTTP chunks, and may be delayed, stalled or cut off to act out failures. Every
request is recorded, with the client's port, so a test can check what was
sent and over which connection.
"""

from __future__ import annotations

import collections
import copy
import functools
import json
import socket
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server answers to one request."""

    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Chunks of an event stream (``text/event-stream``), one HTTP chunk each.
    events: Sequence[str | bytes] | None = None
    #: Close the connection after ``events`` without ending the body.
    cut: bool = False
    #: Seconds before the status line is sent.
    delay: float = 0.0
    #: Seconds to stall after ``events``, before the body ends.
    stall: float = 0.0


@dataclass
class Request:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)


Responder = Reply | Callable[[Request], Reply]


def sse(*payloads: Any, event: str | None = None) -> list[str]:
    """``data:`` events of JSON payloads (strings are sent as they are)."""
    chunks = []
    for payload in payloads:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        prefix = f"event: {event}\n" if event else ""
        chunks.append(f"{prefix}data: {data}\n\n")
    return chunks


def named_sse(*payloads: dict[str, Any]) -> list[str]:
    """Events named after their payload's ``type``, as Anthropic sends them."""
    return [f"event: {p['type']}\ndata: {json.dumps(p)}\n\n" for p in payloads]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a cancelled or timed-out call) is not an error here."""
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handle_error(request, client_address)


class FakeServer:
    """An HTTP/1.1 server (keep-alive) on 127.0.0.1 answering from a script."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.replies: collections.deque[Responder] = collections.deque()
        self.default: Responder | None = None
        self.requests: list[Request] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def push(self, *replies: Responder) -> FakeServer:
        self.replies.extend(replies)
        return self

    def next_reply(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            responder = self.replies.popleft() if self.replies else self.default
        if responder is None:
            return Reply(500, {"error": {"message": "the test queued no reply", "type": "test"}})
        return responder(request) if callable(responder) else responder

    @property
    def bodies(self) -> list[Any]:
        return [r.json for r in self.requests]

    def check_requests(self, path: str, validate: Callable[[Any], None]) -> None:
        """Fail unless every request went to ``path`` and its body passes ``validate``."""
        for request in self.requests:
            assert request.path == path, f"a request to {request.path}, not {path}"
            validate(request.json)

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        request = Request(
            "POST",
            self.path,
            {k.lower(): v for k, v in self.headers.items()},
            body,
            self.client_address[1],
        )
        reply = self.fake.next_reply(request)
        try:
            self._answer(reply)
        except OSError:  # the client hung up
            self.close_connection = True

    def _answer(self, reply: Reply) -> None:
        if reply.delay and self.fake.stopping.wait(reply.delay):
            self.close_connection = True
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.events is not None:
            self._stream(reply)
            return
        if reply.body is not None:
            payload = reply.body
        elif reply.json is not None:
            payload = json.dumps(reply.json).encode()
        else:
            payload = b""
        if "content-type" not in {k.lower() for k in reply.headers}:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _stream(self, reply: Reply) -> None:
        assert reply.events is not None
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in reply.events:
            data = event.encode() if isinstance(event, str) else event
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        if reply.stall and self.fake.stopping.wait(reply.stall):
            self.close_connection = True
            return
        if reply.cut:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ---------------------------------------------------------------- SDK types


def strict_validator(typed_dict: Any) -> Any:
    """A validator for an SDK's request TypedDict that also rejects unknown keys.

    The SDK types allow extra keys and validate ``Iterable`` fields lazily; here
    every TypedDict forbids extras and every iterable is checked as a list, so a
    field name we get wrong fails.
    """
    from pydantic import TypeAdapter
    from pydantic_core import SchemaValidator

    schema = copy.deepcopy(TypeAdapter(typed_dict).core_schema)
    _tighten(schema)
    return SchemaValidator(schema)


def request_validator(
    streaming: Any, non_streaming: Any, *, unchecked: frozenset[str] = frozenset()
) -> Callable[[Mapping[str, Any]], None]:
    """A check that a request body fits the SDK's streaming or non-streaming TypedDict,
    but for the ``unchecked`` keys; each validator is built on first use (they are slow)."""

    @functools.cache
    def validator(stream: bool) -> Any:
        return strict_validator(streaming if stream else non_streaming)

    def validate(body: Mapping[str, Any]) -> None:
        checked = {key: value for key, value in body.items() if key not in unchecked}
        validator(bool(body.get("stream"))).validate_python(checked)

    return validate


def _tighten(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "typed-dict":
            node["extra_behavior"] = "forbid"
        if node.get("type") == "generator":
            node["type"] = "list"
        for value in node.values():
            _tighten(value)
    elif isinstance(node, list):
        for value in node:
            _tighten(value)
