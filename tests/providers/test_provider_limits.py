"""What a hostile or broken server cannot do to the providers, over loopback: grow
memory without bound, stream forever, or get a credential echoed into an error;
and random bytes as a stream or a body end in a typed ChainError, nothing else."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import ChainError, Message
from agentfsm.providers import AnthropicChat, Limits, OpenAIChat, RetryPolicy
from agentfsm.providers._errors import redact
from agentfsm.providers._sse import SSEDecoder, SSELimitError
from tests.providers.fake_server import FakeServer, Reply

HELLO = [Message.user("Hi")]
KEY = "sk-live-0123456789abcdef"
PROVIDERS = [OpenAIChat, AnthropicChat]


def _model(cls: Any, server: FakeServer, **options: Any) -> Any:
    return cls(
        "m",
        api_key=KEY,
        base_url=server.url,
        timeout=2.0,
        retry=RetryPolicy(attempts=1),
        **options,
    )


@pytest.fixture
def model(
    request: pytest.FixtureRequest, server: FakeServer, closing: Callable[[Any], Any]
) -> Callable[..., Any]:
    return lambda **options: closing(_model(request.param, server, **options))


def _over(error: ChainError, setting: str) -> None:
    assert error.type == "response_too_large"
    assert f"limits=Limits({setting}=...)" in error.message
    assert not error.retryable


# ---------------------------------------------------------------- limits


@pytest.mark.parametrize("model", PROVIDERS, indirect=True)
async def test_a_line_that_never_ends(server: FakeServer, model: Callable[..., Any]) -> None:
    # 10 MB with no newline, in 64 KiB chunks: refused past the default 8 MiB line
    piece = b"x" * 65536
    server.push(Reply(events=[b"data: "] + [piece] * 160))
    with pytest.raises(ChainError) as caught:
        await model(stream=True).complete(HELLO, [])
    _over(caught.value, "max_line_bytes")


@pytest.mark.parametrize("model", PROVIDERS, indirect=True)
async def test_an_event_too_large(server: FakeServer, model: Callable[..., Any]) -> None:
    server.push(Reply(events=[b"data: " + b"y" * 1000 + b"\n"] * 20))
    with pytest.raises(ChainError) as caught:
        await model(stream=True, limits=Limits(max_event_bytes=10_000)).complete(HELLO, [])
    _over(caught.value, "max_event_bytes")


@pytest.mark.parametrize("model", PROVIDERS, indirect=True)
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_too_large(
    server: FakeServer, model: Callable[..., Any], declared: bool
) -> None:
    body = json.dumps({"padding": "z" * 50_000}).encode()
    if declared:
        server.push(Reply(body=body))
    else:
        server.push(Reply(events=[body[i : i + 4096] for i in range(0, len(body), 4096)]))
    with pytest.raises(ChainError) as caught:
        await model(limits=Limits(max_response_bytes=20_000)).complete(HELLO, [])
    _over(caught.value, "max_response_bytes")


def _endless(server: FakeServer) -> Iterator[bytes]:
    while not server.stopping.is_set():
        yield b": still here\n\n"
        time.sleep(0.02)


@pytest.mark.parametrize("model", PROVIDERS, indirect=True)
async def test_a_stream_that_never_ends(server: FakeServer, model: Callable[..., Any]) -> None:
    server.push(Reply(events=_endless(server)))  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(ChainError) as caught:
        await model(stream=True, limits=Limits(max_stream_seconds=0.3)).complete(HELLO, [])
    assert time.monotonic() - started < 5  # loosely: it ended, and soon
    assert caught.value.type == "timeout"
    assert "limits=Limits(max_stream_seconds=...)" in caught.value.message


def test_decoding_a_long_line_reads_each_byte_once() -> None:
    # linear: the held part of a line is never rescanned (counted, not timed)
    calls: list[int] = []
    decoder = SSEDecoder(max_line=1 << 30)
    original = decoder._grow

    def grow(size: int) -> None:
        calls.append(size)
        original(size)

    decoder._grow = grow  # type: ignore[method-assign]
    assert decoder.feed(b"data: ") == []
    for _ in range(1000):
        assert decoder.feed(b"a" * 1000) == []
    assert sum(calls) == 6 + 1_000_000
    assert [e.data for e in decoder.feed(b"\n\n")] == ["a" * 1_000_000]
    with pytest.raises(SSELimitError):
        SSEDecoder(max_line=10).feed(b"data: " + b"q" * 20)


# ---------------------------------------------------------------- secrets


@pytest.mark.parametrize("model", PROVIDERS, indirect=True)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_error_that_echoes_the_key_does_not_carry_it(
    server: FakeServer, model: Callable[..., Any], stream: bool
) -> None:
    def echo(request: Any) -> Reply:
        headers = {k: v for k, v in request.headers.items() if k in ("authorization", "x-api-key")}
        text = f"bad request {json.dumps(headers)}; also seen: sk-other-ABCDEFGHIJKL"
        return Reply(400, {"error": {"message": text, "type": "invalid_request_error"}})

    server.push(echo)
    with pytest.raises(ChainError) as caught:
        await model(stream=stream).complete(HELLO, [])
    error = caught.value
    shown = error.message + json.dumps(dict(error.details))
    assert KEY not in shown and "sk-other-ABCDEFGHIJKL" not in shown
    assert "[redacted]" in error.message and error.type == "bad_request"
    assert error.__cause__ is None and error.__suppress_context__  # no unredacted chain


def test_redact_patterns() -> None:
    error = ChainError(
        "bad_request",
        "Authorization: Bearer abcdefghijklmnop x-api-key=zzz-123 {'api_key': 'q1w2e3r4'} "
        "token sk-proj-abcdefghijk and the key itself: MYSECRET",
        details={"echo": ["Bearer abcdefghijklmnop", {"k": "MYSECRET"}], "status": 400},
    )
    cleaned = redact(error, ["MYSECRET"])
    for secret in ("abcdefghijklmnop", "zzz-123", "q1w2e3r4", "sk-proj-abcdefghijk", "MYSECRET"):
        assert secret not in cleaned.message + json.dumps(cleaned.details)
    assert cleaned.details["status"] == 400 and cleaned.type == "bad_request"
    plain = ChainError("timeout", "no response within 2s")
    assert redact(plain, ["MYSECRET"]) is plain


# ---------------------------------------------------------------- fuzz

_KEYS = st.sampled_from(
    [
        "type", "choices", "delta", "content", "tool_calls", "index", "message", "id",
        "content_block", "usage", "error", "name", "function", "arguments", "partial_json",
        "thinking", "signature", "stop_reason", "finish_reason", "refusal", "text", "input",
        "reasoning_content", "prompt_tokens_details", "output_tokens_details", "data",
    ]
)  # fmt: skip
_TYPES = st.sampled_from(
    [
        "message_start", "content_block_start", "content_block_delta", "message_delta",
        "message_stop", "error", "text", "tool_use", "thinking", "redacted_thinking",
        "text_delta", "input_json_delta", "thinking_delta", "signature_delta", "pause_turn",
    ]
)  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | _TYPES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(_KEYS | st.text(), inner, max_size=5)
    ),
    max_leaves=20,
)


def _event(value: Any) -> bytes:
    return f"data: {json.dumps(value)}\n\n".encode()


_STREAMS = st.one_of(
    st.binary(max_size=500),
    st.lists(
        st.one_of(_JSON.map(_event), st.binary(max_size=40), st.just(b"data: [DONE]\n\n"))
    ).map(b"".join),
)


class _Fuzz:
    """One server, one event loop and one model per provider and mode for every example
    (a new HTTP client per example would cost more than the example)."""

    def __init__(self) -> None:
        self.server = FakeServer()
        self.runner = asyncio.Runner()
        self.models = {
            (cls, stream): _model(cls, self.server, stream=stream)
            for cls in PROVIDERS
            for stream in (False, True)
        }

    def check(self, body: bytes, content_type: str, stream: bool) -> None:
        """Both providers end in a reply or a ChainError; anything else fails."""
        for cls in PROVIDERS:
            self.server.push(Reply(body=body, headers={"content-type": content_type}))
            try:
                reply = self.runner.run(self.models[cls, stream].complete(HELLO, []))
            except ChainError:
                continue
            assert isinstance(reply, Message) and reply.role == "assistant"

    def close(self) -> None:
        for model in self.models.values():
            self.runner.run(model.aclose())
        self.runner.close()
        self.server.close()


@pytest.fixture(scope="module")
def fuzz() -> Iterator[_Fuzz]:
    state = _Fuzz()
    yield state
    state.close()


_FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_FUZZ
@given(body=_STREAMS)
def test_random_streams_end_in_a_reply_or_a_chain_error(fuzz: _Fuzz, body: bytes) -> None:
    fuzz.check(body, "text/event-stream", stream=True)


@_FUZZ
@given(body=st.one_of(_JSON.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200)))
def test_random_bodies_end_in_a_reply_or_a_chain_error(fuzz: _Fuzz, body: bytes) -> None:
    fuzz.check(body, "application/json", stream=False)
