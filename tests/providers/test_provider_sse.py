"""The server-sent events decoder, against the HTML standard's rules."""

from __future__ import annotations

from agentfsm.providers._sse import ServerSentEvent, SSEDecoder


def decode(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events + decoder.flush()


STREAM = (
    b": a comment, ignored\n"
    b'data: {"a": 1}\n'
    b"\n"
    b"event: content_block_delta\n"
    b"data: first line\n"
    b"data:second line\n"
    b"data\n"
    b"id: 7\n"
    b"retry: 1500\n"
    b"\n"
    b"event: ping\n"
    b"\n"
    b"data: [DONE]\n"
    b"\n"
)

EXPECTED = [
    ServerSentEvent("message", '{"a": 1}'),
    ServerSentEvent("content_block_delta", "first line\nsecond line\n", "7", 1500),
    ServerSentEvent("message", "[DONE]", "7", 1500),
]


def test_fields_comments_multiline_data_and_done() -> None:
    # an event with no data ("event: ping" alone) is not dispatched; id and retry persist
    assert decode(STREAM) == EXPECTED


def test_every_split_of_the_stream_decodes_alike() -> None:
    for cut in range(len(STREAM) + 1):
        assert decode(STREAM[:cut], STREAM[cut:]) == EXPECTED, cut
    assert decode(*(bytes([b]) for b in STREAM)) == EXPECTED


def test_crlf_and_cr_line_endings() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    cr = STREAM.replace(b"\n", b"\r")
    assert decode(crlf) == EXPECTED
    assert decode(cr) == EXPECTED
    for cut in range(len(crlf) + 1):
        assert decode(crlf[:cut], crlf[cut:]) == EXPECTED, cut


def test_only_cr_and_lf_end_lines() -> None:
    # JSON may carry U+2028 unescaped; a text line splitter would break the event there
    data = '{"text": "a\u2028b\u0085c\x0cd"}'
    assert decode(f"data: {data}\n\n".encode()) == [ServerSentEvent("message", data)]


def test_utf8_split_across_chunks() -> None:
    raw = "data: héllo ✓\n\n".encode()
    for cut in range(len(raw) + 1):
        assert decode(raw[:cut], raw[cut:]) == [ServerSentEvent("message", "héllo ✓")]


def test_byte_order_mark_and_single_space_rule() -> None:
    raw = b"\xef\xbb\xbfdata:  two spaces\n\n"
    assert decode(raw) == [ServerSentEvent("message", " two spaces")]


def test_an_event_cut_off_by_the_end_is_discarded() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: complete\n\ndata: {"partial') == [
        ServerSentEvent("message", "complete")
    ]
    assert decoder.pending
    assert decoder.flush() == []


def test_bad_retry_and_nul_id_are_ignored() -> None:
    assert decode(b"retry: soon\nid: a\x00b\ndata: x\n\n") == [ServerSentEvent("message", "x")]
