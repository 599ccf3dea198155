"""The informer's own reader of a chunked watch body (:func:`keyqueue.informer.informer._chunked_lines`): the same
lines as urllib3's ``stream`` for every way the bytes can arrive, and broken framing told apart from a clean end."""

from __future__ import annotations

import io
import json

import pytest

from keyqueue.informer.informer import WatchStreamError, _chunked_lines


class Pieces(io.RawIOBase):
    """A file whose ``read1`` hands out the body in the given pieces (then EOF)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = list(pieces)

    def read1(self, size: int = -1) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n" + trailer + b"\r\n"


EVENTS = [json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": f"n{i}", "resourceVersion": str(i)}}})
          .encode() for i in range(4)]


def lines(pieces: list[bytes]) -> list[bytes]:
    return [line for line, _ in _chunked_lines(Pieces(pieces))]


def test_one_event_per_chunk_in_one_read_and_split_at_every_byte() -> None:
    body = chunked(*(e + b"\n" for e in EVENTS))
    assert lines([body]) == EVENTS
    for cut in range(1, len(body)):
        assert lines([body[:cut], body[cut:]]) == EVENTS, cut
    assert lines([body[i:i + 1] for i in range(len(body))]) == EVENTS


def test_events_split_across_chunks_several_per_chunk_and_chunk_extensions() -> None:
    stream = b"".join(e + b"\n" for e in EVENTS)
    body = chunked(stream[:7], stream[7:90], stream[90:])
    assert lines([body]) == EVENTS
    with_ext = body.replace(b"\r\n", b";name=value\r\n", 1)
    assert lines([with_ext]) == EVENTS
    assert lines([chunked(b"\n\n" + EVENTS[0] + b"\n\n")]) == EVENTS[:1]  # empty lines are skipped
    assert lines([chunked(EVENTS[0])]) == EVENTS[:1]  # a last line without its newline still counts
    assert lines([chunked(EVENTS[0] + b"\n", trailer=b"X-Trailer: 1\r\n")]) == EVENTS[:1]


def test_each_line_carries_the_time_of_the_read_that_completed_it() -> None:
    body = chunked(EVENTS[0] + b"\n", EVENTS[1] + b"\n")
    half = body.index(b"\r\n", body.index(EVENTS[0])) + 2 + 5  # in the second chunk
    stamped = list(_chunked_lines(Pieces([body[:half], body[half:]])))
    assert [line for line, _ in stamped] == EVENTS[:2]
    assert 0 < stamped[0][1] < stamped[1][1]


@pytest.mark.parametrize("body, match", [
    (b"1a\r\n" + b"x" * 10, "ended before its last chunk"),  # the connection ended mid-chunk
    (b"5\r\nabc\n\r\n", "ended before its last chunk"),
    (b"", "ended before its last chunk"),
    (b"zz\r\nabc\r\n", "invalid chunk-size line"),
    (b"-3\r\nabc\r\n", "invalid chunk-size line"),
    (b"3\r\nabcXY", "not followed by CRLF"),
    (b"1" * 2000, "exceeded 1024 bytes"),
    (b"0\r\n" + b"X" * 2000, "exceeded 1024 bytes"),
])
def test_broken_framing_is_a_broken_stream_not_a_clean_end(body: bytes, match: str) -> None:
    with pytest.raises(WatchStreamError, match=match):
        lines([body])
