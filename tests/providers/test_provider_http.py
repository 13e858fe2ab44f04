"""The shared transport over real HTTP on loopback: retries, timeouts, errors, pooling."""

from __future__ import annotations

import asyncio
import email.utils
import gc
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentfsm import ChainError
from agentfsm.providers import Limits, RetryPolicy
from agentfsm.providers._model import parse_arguments
from agentfsm.providers._transport import HttpTransport, retry_after
from tests.providers.fake_server import FakeServer, Reply, sse

BODY = {"hello": "world"}


def transport(
    server: FakeServer, *, attempts: int = 3, backoff: float = 0.01, **options: Any
) -> HttpTransport:
    retry = RetryPolicy(attempts=attempts, backoff=backoff, max_backoff=0.05)
    return HttpTransport("test:model", server.url, **{"timeout": 2.0, "retry": retry, **options})


@pytest.fixture
def make(server: FakeServer, closing: Callable[[Any], Any]) -> Callable[..., HttpTransport]:
    def build(**options: Any) -> HttpTransport:
        return closing(transport(server, **options))  # type: ignore[no-any-return]

    return build


def _pool(http: HttpTransport) -> Any:
    return http.client._transport._pool  # type: ignore[attr-defined]


def busy_connections(http: HttpTransport) -> list[Any]:
    """Connections of the pool still serving a request."""
    return [c for c in _pool(http).connections if not (c.is_idle() or c.is_closed())]


# ---------------------------------------------------------------- retries


async def test_429_with_retry_after_then_success(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.push(
        Reply(429, {"error": {"message": "slow down"}}, headers={"retry-after": "0.3"}),
        Reply(200, {"ok": True}),
    )
    started = time.monotonic()
    assert await make(backoff=0.001).post_json("/x", BODY) == {"ok": True}
    assert time.monotonic() - started >= 0.3  # the server's wait, not the 1 ms backoff
    assert len(server.requests) == 2
    assert server.bodies == [BODY, BODY]


async def test_500_then_success(server: FakeServer, make: Callable[..., HttpTransport]) -> None:
    server.push(Reply(500, {"error": {"message": "boom"}}), Reply(200, {"ok": 1}))
    assert await make().post_json("/x", BODY) == {"ok": 1}
    assert len(server.requests) == 2


async def test_retries_are_bounded(server: FakeServer, make: Callable[..., HttpTransport]) -> None:
    server.default = Reply(503, {"error": {"message": "down for maintenance"}})
    with pytest.raises(ChainError) as caught:
        await make(attempts=3).post_json("/x", BODY)
    assert caught.value.type == "server_error"
    assert caught.value.retryable
    assert "down for maintenance" in caught.value.message
    assert caught.value.details["attempts"] == 3
    assert caught.value.details["status"] == 503
    assert len(server.requests) == 3


async def test_a_long_retry_after_is_not_waited_for(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(429, {"error": {"message": "quota"}}, headers={"retry-after": "3600"})
    started = time.monotonic()
    with pytest.raises(ChainError) as caught:
        await make().post_json("/x", BODY)
    assert time.monotonic() - started < 60  # not the hour it asked for; no tighter bound
    assert caught.value.type == "rate_limited"
    assert "3600" in caught.value.message
    assert len(server.requests) == 1


async def test_insufficient_quota_is_not_retried(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(
        429,
        {
            "error": {
                "message": "You exceeded your quota",
                "type": "insufficient_quota",
                "code": "insufficient_quota",
            }
        },
    )
    with pytest.raises(ChainError) as caught:
        await make().post_json("/x", BODY)
    assert caught.value.type == "rate_limited"
    assert len(server.requests) == 1


async def test_read_timeout_is_retried_then_reported(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(200, {"late": True}, delay=5)
    started = time.monotonic()
    with pytest.raises(ChainError) as caught:
        await make(timeout=0.15, attempts=2).post_json("/x", BODY)
    assert time.monotonic() - started < 9  # neither attempt waited out the 5 s reply
    assert caught.value.type == "timeout"
    assert caught.value.retryable
    assert "0.15s" in caught.value.message
    assert len(server.requests) == 2


async def test_a_timeout_then_success(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.push(Reply(200, {"late": True}, delay=5), Reply(200, {"on_time": True}))
    assert await make(timeout=0.15).post_json("/x", BODY) == {"on_time": True}


async def test_connection_refused(closing: Callable[[Any], Any]) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    http = closing(
        HttpTransport("test:model", f"http://127.0.0.1:{port}", retry=RetryPolicy(backoff=0.01))
    )
    with pytest.raises(ChainError) as caught:
        await http.post_json("/x", BODY)
    assert caught.value.type == "connection"
    assert caught.value.retryable
    assert caught.value.details["attempts"] == 3


# ---------------------------------------------------------------- error mapping


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "bad_request"),
        (401, "authentication"),
        (403, "authentication"),
        (404, "bad_request"),
        (408, "timeout"),
        (422, "bad_request"),
        (429, "rate_limited"),
        (500, "server_error"),
        (502, "server_error"),
        (529, "overloaded"),
    ],
)
async def test_status_mapping(
    server: FakeServer, make: Callable[..., HttpTransport], status: int, kind: str
) -> None:
    server.default = Reply(status, {"error": {"message": f"provider says {status}"}})
    with pytest.raises(ChainError) as caught:
        await make(attempts=1).post_json("/x", BODY)
    assert caught.value.type == kind
    assert f"provider says {status}" in caught.value.message
    assert f"HTTP {status}" in caught.value.message
    retryable = kind in {"rate_limited", "overloaded", "server_error", "timeout"}
    assert caught.value.retryable is retryable


async def test_overloaded_error_type_in_the_body_wins_over_the_status(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.default = Reply(500, body)
    with pytest.raises(ChainError) as caught:
        await make(attempts=1).post_json("/x", BODY)
    assert caught.value.type == "overloaded"


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        (b'{"error": "plain string error"}', "plain string error"),
        (b'{"detail": [{"loc": ["body"], "msg": "field required"}]}', "field required"),
        (b'{"message": "top-level message"}', "top-level message"),
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", "(empty body)"),
    ],
)
async def test_error_messages_of_compatible_servers(
    server: FakeServer, make: Callable[..., HttpTransport], body: bytes, shown: str
) -> None:
    server.default = Reply(400, body=body)
    with pytest.raises(ChainError) as caught:
        await make(attempts=1).post_json("/x", BODY)
    assert shown in caught.value.message


async def test_a_malformed_body_is_an_invalid_response(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(200, body=b'{"choices": [')
    with pytest.raises(ChainError) as caught:
        await make().post_json("/x", BODY)
    assert caught.value.type == "invalid_response"
    assert not caught.value.retryable
    assert len(server.requests) == 1


async def test_a_bad_url_is_a_bad_request(closing: Callable[[Any], Any]) -> None:
    http = closing(
        HttpTransport("test:model", "ftp://127.0.0.1:1", retry=RetryPolicy(backoff=0.01))
    )
    with pytest.raises(ChainError) as caught:
        await http.post_json("/x", BODY)
    assert caught.value.type == "bad_request"


# ---------------------------------------------------------------- streams


async def test_stream_events(server: FakeServer, make: Callable[..., HttpTransport]) -> None:
    server.default = Reply(
        events=[*sse({"n": 1}, {"n": 2}), ": keep-alive\n\n", "data: [DONE]\n\n"]
    )
    async with make().stream("/x", BODY) as events:
        data = [event.data async for event in events]
    assert data == ['{"n": 1}', '{"n": 2}', "[DONE]"]


async def test_a_stream_opening_is_retried(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.push(Reply(502, body=b"bad gateway"), Reply(events=sse({"n": 1})))
    async with make().stream("/x", BODY) as events:
        assert [e.data async for e in events] == ['{"n": 1}']
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "failure",
    [
        Reply(events=['data: {"n": '], cut=True),
        Reply(events=[], stall=5),
        Reply(events=[]),
    ],
    ids=["cut", "silent", "empty"],
)
async def test_a_stream_that_fails_before_its_first_event_is_retried(
    server: FakeServer, make: Callable[..., HttpTransport], failure: Reply
) -> None:
    server.push(failure, Reply(events=sse({"n": 1}, {"n": 2})))
    async with make(timeout=0.3).stream("/x", BODY) as events:
        assert [e.data async for e in events] == ['{"n": 1}', '{"n": 2}']
    assert len(server.requests) == 2


async def test_a_stream_failing_before_its_first_event_each_time_counts_its_attempts(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.push(Reply(503, body=b"busy"))
    server.default = Reply(events=['data: {"n": '], cut=True)
    with pytest.raises(ChainError) as caught:
        async with make().stream("/x", BODY):
            pass
    assert caught.value.type == "invalid_response" and caught.value.retryable
    assert caught.value.details["attempts"] == 3  # the 503 was the first of the three
    assert len(server.requests) == 3


async def test_a_stream_past_its_duration_before_any_event_is_not_retried(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    def endless() -> Any:
        while not server.stopping.wait(0.02):
            yield b": keep-alive\n\n"

    server.default = Reply(events=endless())
    with pytest.raises(ChainError) as caught:
        async with make(limits=Limits(max_stream_seconds=0.2)).stream("/x", BODY):
            pass
    assert caught.value.type == "timeout"
    assert caught.value.details["limit"] == "max_stream_seconds"
    assert len(server.requests) == 1


async def test_409_is_retried(server: FakeServer, make: Callable[..., HttpTransport]) -> None:
    server.push(
        Reply(409, {"error": {"message": "a conflicting request is in flight"}}),
        Reply(200, {"ok": True}),
    )
    assert await make().post_json("/x", BODY) == {"ok": True}
    assert len(server.requests) == 2
    server.default = Reply(409, {"error": {"message": "still locked"}})
    with pytest.raises(ChainError) as caught:
        await make(attempts=2).post_json("/x", BODY)
    assert caught.value.type == "conflict" and caught.value.retryable
    assert caught.value.details["attempts"] == 2


async def test_a_stream_cut_mid_way(server: FakeServer, make: Callable[..., HttpTransport]) -> None:
    server.default = Reply(events=[*sse({"n": 1}), 'data: {"n": '], cut=True)
    seen = []
    with pytest.raises(ChainError) as caught:
        async with make().stream("/x", BODY) as events:
            async for event in events:
                seen.append(event.data)
    assert seen == ['{"n": 1}']
    assert caught.value.type == "invalid_response"
    assert "cut off" in caught.value.message
    assert caught.value.retryable  # the partial reply is lost; another attempt may succeed
    assert len(server.requests) == 1  # never retried once events were handed out


async def test_a_stream_that_stalls(server: FakeServer, make: Callable[..., HttpTransport]) -> None:
    server.default = Reply(events=sse({"n": 1}), stall=5)
    with pytest.raises(ChainError) as caught:
        async with make(timeout=0.15).stream("/x", BODY) as events:
            async for _ in events:
                pass
    assert caught.value.type == "timeout"


async def test_a_json_error_where_a_stream_was_expected(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(200, {"error": {"message": "model not loaded", "type": "server_error"}})
    with pytest.raises(ChainError) as caught:
        async with make().stream("/x", BODY):
            pass
    assert caught.value.type == "server_error"
    assert "model not loaded" in caught.value.message


# ---------------------------------------------------------------- pooling and cancellation


async def test_connections_are_reused(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(200, {"ok": True})
    http = make()
    for _ in range(3):
        await http.post_json("/x", BODY)
    assert len({r.client_port for r in server.requests}) == 1


async def test_a_drained_stream_gives_its_connection_back(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(events=sse({"n": 1}, "[DONE]"))
    http = make()
    for _ in range(2):
        async with http.stream("/x", BODY) as events:
            async for event in events:
                if event.data == "[DONE]":
                    events.finish()
                    break
    assert len({r.client_port for r in server.requests}) == 1
    assert busy_connections(http) == []


async def test_cancelling_a_request_leaves_no_connection_checked_out(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.push(Reply(200, {"late": True}, delay=5), Reply(200, {"ok": True}))
    http = make()
    task = asyncio.create_task(http.post_json("/x", BODY))
    await asyncio.sleep(0.2)
    assert len(busy_connections(http)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert busy_connections(http) == []
    assert _pool(http)._requests == []
    assert await http.post_json("/x", BODY) == {"ok": True}


async def test_cancelling_a_stream_closes_it(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.push(Reply(events=sse({"n": 1}), stall=5), Reply(200, {"ok": True}))
    http = make()
    first = asyncio.Event()

    async def consume() -> None:
        async with http.stream("/x", BODY) as events:
            async for _ in events:
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert busy_connections(http) == []
    assert await http.post_json("/x", BODY) == {"ok": True}


async def test_aclose_then_use_again(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(200, {"ok": True})
    http = make()
    await http.post_json("/x", BODY)
    client = http.client
    await http.aclose()
    assert client.is_closed
    assert await http.post_json("/x", BODY) == {"ok": True}
    assert http.client is not client


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_new_event_loop_gets_a_new_client(server: FakeServer) -> None:
    # as with repeated asyncio.run: the first loop's connection cannot be closed
    # from the second loop and is dropped (collected here, where its warning is expected)
    server.default = Reply(200, {"ok": True})
    http = transport(server)
    assert asyncio.run(http.post_json("/x", BODY)) == {"ok": True}
    first = http._client
    assert asyncio.run(http.post_json("/x", BODY)) == {"ok": True}
    assert http._client is not first
    asyncio.run(http.aclose())
    del first
    gc.collect()


async def test_requests_carry_the_transport_headers(
    server: FakeServer, make: Callable[..., HttpTransport]
) -> None:
    server.default = Reply(200, {"ok": True})
    await make(headers={"x-extra": "1"}).post_json("/x", BODY)
    headers = server.requests[0].headers
    assert headers["x-extra"] == "1"
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("agentfsm")


# ---------------------------------------------------------------- Retry-After, backoff, arguments


def test_retry_after_forms() -> None:
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after({"Retry-After": "7"}) == 7
    assert retry_after({"retry-after": "0.5"}) == 0.5
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert 28 <= (retry_after({"Retry-After": date}, now=now) or 0) <= 31
    assert retry_after({"Retry-After": email.utils.formatdate(now - 60, usegmt=True)}) == 0
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after({}) is None


def test_backoff_grows_with_jitter_and_a_cap() -> None:
    policy = RetryPolicy(backoff=1.0, max_backoff=4.0)
    for attempt, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (5, 4.0)]:
        delays = [policy.delay(attempt) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1


@pytest.mark.parametrize(
    ("raw", "arguments", "reason"),
    [
        ('{"q": "x"}', {"q": "x"}, None),
        ({"q": "x"}, {"q": "x"}, None),
        ("", {}, None),
        (None, {}, None),
        ('{"q": ', {}, "Expecting value"),
        ("[1, 2]", {}, "not a JSON object: got array"),
        ('"text"', {}, "not a JSON object: got string"),
        ("3", {}, "not a JSON object: got number"),
    ],
)
def test_parse_arguments(raw: Any, arguments: dict[str, Any], reason: str | None) -> None:
    parsed, invalid = parse_arguments(raw)
    assert parsed == arguments
    if reason is None:
        assert invalid is None
    else:
        assert invalid is not None
        assert invalid.startswith(f"{raw} (")
        assert reason in invalid
