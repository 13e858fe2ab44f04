"""The server-sent events decoder, against the HTML standard's rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.providers._sse import ServerSentEvent, SSEDecoder, SSELimitError


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


@pytest.mark.parametrize(
    ("limits", "what"),
    [
        ({"max_line": 12}, "line"),
        ({"max_event": 8}, "event"),
        ({"max_line": 12, "max_event": 8}, "line"),
    ],
)
@pytest.mark.parametrize(
    "chunk",
    [
        b"data: y\n\ndata: 0123456789\n\ndata: z\n\n",
        b"event: e\ndata: y\n\nevent: e\ndata: 0123456789\n\n",
    ],
    ids=["data", "named"],
)
def test_a_chunk_read_at_once_keeps_the_bounds(
    limits: dict[str, int], what: str, chunk: bytes
) -> None:
    # a chunk of one-line data events, or of named events, is read at once; a line or
    # an event past its bound in it still raises, and the first one past a bound names it
    decoder = SSEDecoder(**limits)
    assert decoder.feed(b"data: x\n\n") == [ServerSentEvent("message", "x")]
    with pytest.raises(SSELimitError) as caught:
        decoder.feed(chunk)
    assert caught.value.what == what


def test_named_events_before_a_line_past_the_bound() -> None:
    # the events the chunk ends are within the bound, read at once; the line of the
    # one it begins is not
    decoder = SSEDecoder(max_line=20, max_event=20)
    assert decoder.feed(b": start\n") == []
    with pytest.raises(SSELimitError) as caught:
        decoder.feed(b"event: e\ndata: y\n\nevent: 0123456789abcdef\n")
    assert caught.value.what == "line"
    decoder = SSEDecoder(max_line=20, max_event=20)
    assert decoder.feed(b": start\n") == []
    assert decoder.feed(b"event: e\ndata: y\n\nevent: 01234\n") == [ServerSentEvent("e", "y")]
    assert decoder.pending


def test_a_chunk_of_named_events() -> None:
    # the shape Anthropic's and OpenAI's Responses streams take: one name, one data
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 3\nretry: 5\n\n") == []
    chunk = (
        b'event: content_block_delta\ndata: {"a":1}\n\n'
        b"event: \ndata: no name\n\n"
        b"event: ping\ndata:  two spaces\n\n"
        b"event: message_stop\ndata: {"
    )
    assert decoder.feed(chunk) == [
        ServerSentEvent("content_block_delta", '{"a":1}', "3", 5),
        ServerSentEvent("message", "no name", "3", 5),
        ServerSentEvent("ping", " two spaces", "3", 5),
    ]
    assert decoder.pending
    assert decoder.feed(b"}\n\n") == [ServerSentEvent("message_stop", "{}", "3", 5)]
    assert not decoder.pending


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        (b"event:e\ndata: x\n\nevent: f\ndata:y\n\n", [("e", "x"), ("f", "y")]),
        (b"event: e\ndata: x\ndata: y\n\nevent: f\ndata: z\n\n", [("e", "x\ny"), ("f", "z")]),
        (b"event: e\n\nevent: f\ndata: y\n\n", [("f", "y")]),
        (b"event: e\ndata: x\n\n\nevent: f\ndata: y\n\n", [("e", "x"), ("f", "y")]),
        (b"event: e\ndata: x\n\ndata: y\n\n", [("e", "x"), ("message", "y")]),
        (b"event: e\ndata: x\n\n: note\nevent: f\ndata: y\n\n", [("e", "x"), ("f", "y")]),
        (b"event:\ndata: x\n\nevent: e\nevent: f\ndata: y\n\n", [("message", "x"), ("f", "y")]),
        (b"event: e\ndata: x\n\nevent: f\nid: 9\ndata: y\n\n", [("e", "x"), ("f", "y", "9")]),
        (b"event: e\ndata: x\nid: 9\nevent: f\ndata: y\n\n", [("f", "x\ny", "9")]),
    ],
)
def test_named_events_not_quite_the_shape(chunk: bytes, expected: list[tuple[str, ...]]) -> None:
    # no space after a colon, two data lines, a name with no data, an extra blank
    # line, a data-only event, a comment, an empty or a second name, an id (in the
    # line a blank one would be in, the next name and data belong to the same event)
    decoder = SSEDecoder()
    assert decoder.feed(b": start\n") == []
    assert decoder.feed(chunk) == [ServerSentEvent(*fields) for fields in expected]
    assert decode(b": start\n" + chunk) == decode(*(bytes([b]) for b in chunk))


# ---------------------------------------------------------------- any cut, any stream

#: Pieces streams are made of: the common shape (one ``data: `` line per event) and
#: everything that takes it off that path.
_PIECES = st.sampled_from(
    [
        b'data: {"a":1}\n\n',
        b"data: x\n\n",
        b"data: " + b"z" * 24 + b"\n\n",
        b"data: ",
        b"data:",
        b"data",
        b"event: e\n",
        b"id: 7\n",
        b"retry: 15\n",
        b": note\n",
        b"\n",
        b"\n\n",
        b"\r",
        b"\r\n",
        b"\xef\xbb\xbf",
        b"\xc3\xa9",
        b"\xe2\x82",
        b"\n\ndata: ",
        b"y",
        b" ",
    ]
)
#: The other common shape, one ``event: `` line and one ``data: `` line per event, in
#: runs that may end in an event begun; and what takes it off its path.
_NAMED_RUNS = st.builds(
    lambda blocks, begun: b"".join(blocks) + begun,
    st.lists(
        st.sampled_from(
            [
                b"event: e\ndata: x\n\n",
                b"event: content_block_delta\ndata: " + b"z" * 24 + b"\n\n",
                b"event: \ndata: y\n\n",
                b"event: \xc3\xa9\ndata: \xe2\x82\n\n",
            ]
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([b"", b"event: f\n", b"event: f\ndata: ", b"event: e\ndata: x\n"]),
)
_NAMED = st.sampled_from(
    [
        b"event:e\ndata: x\n\n",
        b"event: e\ndata:x\n\n",
        b"event: e\ndata: x\ndata: y\n\n",
        b"event: e\ndata: x\n: c\n",
        b"event: ",
    ]
)
_BOUNDS = st.one_of(st.none(), st.integers(min_value=1, max_value=40))


def _fed(decoder: SSEDecoder, chunk: bytes) -> list[ServerSentEvent] | SSELimitError:
    try:
        return decoder.feed(chunk)
    except SSELimitError as error:
        return error


@settings(max_examples=500, deadline=None)
@given(
    pieces=st.lists(_PIECES | _NAMED_RUNS | _NAMED, max_size=40),
    at_pieces=st.lists(st.integers(min_value=0, max_value=40), max_size=8),
    at_bytes=st.lists(st.integers(min_value=0, max_value=400), max_size=4),
    max_line=_BOUNDS,
    max_event=_BOUNDS,
)
def test_any_cut_decodes_as_byte_by_byte(
    pieces: list[bytes],
    at_pieces: list[int],
    at_bytes: list[int],
    max_line: int | None,
    max_event: int | None,
) -> None:
    # cut between pieces (whole events, an event begun in the chunk before) and
    # anywhere; after each chunk: the events so far and ``pending`` as fed one byte
    # at a time; a bound passed in the chunk that holds the byte it is passed at, as
    # the same error
    stream = b"".join(pieces)
    one = SSEDecoder(max_line=max_line, max_event=max_event)
    after: list[tuple[list[ServerSentEvent], bool]] = [([], False)]  # after each byte
    failed_at: int | None = None
    for index in range(len(stream)):
        fed = _fed(one, stream[index : index + 1])
        if isinstance(fed, SSELimitError):
            failed_at, failure = index, (fed.what, fed.limit)
            break
        after.append((after[-1][0] + fed, one.pending))
    decoder = SSEDecoder(max_line=max_line, max_event=max_event)
    events: list[ServerSentEvent] = []
    cuts = {len(b"".join(pieces[:at])) for at in at_pieces}
    cuts |= {min(at, len(stream)) for at in at_bytes}
    start = 0
    for end in sorted(cuts | {len(stream)}):
        fed = _fed(decoder, stream[start:end])
        if isinstance(fed, SSELimitError):
            assert failed_at is not None and start <= failed_at < end
            assert (fed.what, fed.limit) == failure
            return
        assert failed_at is None or end <= failed_at
        events += fed
        assert (events, decoder.pending) == after[end]
        start = end
    assert failed_at is None
    assert decoder.flush() == []


# ---------------------------------------------------------------- against the standard, plainly


def _reference(stream: bytes) -> list[ServerSentEvent]:
    """The HTML standard's event-stream interpretation, written as plainly as it reads:
    the stream cut into lines at CRLF, LF or CR, a leading byte-order mark dropped, each
    line a field, a blank line dispatching the event; an unended event is dropped."""
    text = stream.removeprefix(b"\xef\xbb\xbf")
    lines, line = [], bytearray()
    index = 0
    while index < len(text):
        byte = text[index : index + 1]
        if byte in (b"\r", b"\n"):
            lines.append(bytes(line))
            line.clear()
            if byte == b"\r" and text[index + 1 : index + 2] == b"\n":
                index += 1
        else:
            line += byte
        index += 1
    events, kind, data, last_id, retry = [], "", [], None, None
    for raw in lines:
        if not raw:
            if data:
                events.append(ServerSentEvent(kind or "message", "\n".join(data), last_id, retry))
            kind, data = "", []
            continue
        if raw.startswith(b":"):
            continue
        field, colon, value = raw.decode("utf-8", "replace").partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            kind = value
        elif field == "id" and "\0" not in value:
            last_id = value
        elif field == "retry" and value.isdigit():
            retry = int(value)
    return events


#: Whole events of the shapes a server writes one a chunk, and what may come between.
_WHOLE = st.sampled_from(
    [
        b"data: x\n\n",
        b'data: {"a":1}\n\n',
        b"data: \n\n",
        b"data: \xc3\xa9 \xff\n\n",
        b"event: e\ndata: x\n\n",
        b"event: \ndata: y\n\n",
        b"event:  e\ndata:  y\n\n",
        b"event: e\ndata: x\r\n\r\n",
        b"data: a\r\n\r\n",
        b"data: a\rdata: b\r\r",
        b"id: 3\n",
        b"retry: 10\n",
        b": c\n",
        b"\n",
        b"\r",
        b"data: ",
        b"event: e\n",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(_WHOLE, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=6),
    whole=st.booleans(),
)
def test_chunks_decode_as_the_standard_reads_the_stream(
    pieces: list[bytes], cuts: list[int], whole: bool
) -> None:
    # chunks at the pieces (each event in a chunk of its own, the fast path's case)
    # or anywhere: the events are the standard's, however the stream is cut
    stream = b"".join(pieces)
    if whole:
        chunks = pieces
    else:
        ends = sorted({min(cut, len(stream)) for cut in cuts} | {len(stream)})
        chunks = [stream[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    assert decode(*chunks) == _reference(stream)
