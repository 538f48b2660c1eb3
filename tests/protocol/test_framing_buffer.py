"""The framer's long-line buffer (`receive_buffer`/`filled`/`recycle`): for any split of any
sequence of lines it gives the events the chunk path (`feed`) gives, and the buffer is reused
from message to message and bounded."""

from __future__ import annotations

import itertools

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.protocol.connection import Connection, ResponseReceived
from tether.protocol.framing import (
    KEEP_BYTES,
    LineFramer,
    Oversize,
    WrongFraming,
    spare_bytes,
)

CAP = 60


def _norm(events: list[object]) -> list[object]:
    out: list[object] = []
    for e in events:
        if isinstance(e, Oversize):
            assert e.seen > e.limit
            out.append(("oversize", e.limit))
        elif isinstance(e, WrongFraming):
            out.append(("wrong", e.head))
        else:
            assert isinstance(e, bytes)
            out.append(e)
    return out


def _by_chunks(chunks: list[bytes]) -> tuple[list[object], bytes | None]:
    framer = LineFramer(CAP)
    events: list[object] = []
    for chunk in chunks:
        events.extend(framer.feed(chunk))
    return _norm(events), framer.eof()


def _by_buffer(
    chunks: list[bytes], long_line: int, room: int, cap: int = CAP
) -> tuple[list[object], bytes | None]:
    """Like the endpoint: into the buffer while a long line is coming, chunks otherwise."""
    framer = LineFramer(cap, long_line=long_line, room=room)
    events: list[object] = []
    for chunk in chunks:
        while chunk:
            into = framer.receive_buffer()
            if into is None:
                events.extend(framer.feed(chunk))
                break
            n = min(len(into), len(chunk))
            into[:n] = chunk[:n]
            chunk = chunk[n:]
            got = framer.filled(n)
            events.extend(bytes(e) if isinstance(e, memoryview) else e for e in got)
            framer.recycle()
    return _norm(events), framer.eof()


_line = st.one_of(
    st.binary(max_size=8).map(lambda b: b.replace(b"\n", b"")),
    st.integers(0, 90).map(lambda n: b"{" + b"a" * n + b"}"),
    st.integers(0, 90).map(lambda n: b" " * n + b"x"),
    st.just(b"Content-Length: 12"),
    st.just(b""),
)
_ending = st.sampled_from([b"\n", b"\r\n"])


@st.composite
def _stream(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    lines = draw(st.lists(st.tuples(_line, _ending), max_size=12))
    data = b"".join(line + end for line, end in lines)
    if draw(st.booleans()):
        data += draw(_line)  # an unterminated tail
    cuts = sorted(draw(st.lists(st.integers(0, max(0, len(data))), max_size=10)))
    return data, cuts


@settings(max_examples=400, deadline=None)
@given(_stream(), st.integers(1, 30), st.integers(1, 40))
def test_any_split_gives_the_same_events_through_the_buffer_as_through_chunks(
    stream: tuple[bytes, list[int]], long_line: int, room: int
) -> None:
    data, cuts = stream
    bounds = [0, *cuts, len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    assert _by_buffer(chunks, long_line, room) == _by_chunks(chunks)


def test_a_chunk_fed_while_a_long_line_is_in_the_buffer_still_gives_bytes_lines() -> None:
    framer = LineFramer(1000, long_line=4, room=8)
    assert framer.feed(b"abcdef") == []
    into = framer.receive_buffer()
    assert into is not None
    into[:3] = b"ghi"
    assert framer.filled(3) == []
    assert framer.feed(b"jk\nshort\nlon") == [b"abcdefghijk", b"short"]
    assert framer.eof() == b"lon"


def test_the_buffer_is_reused_from_message_to_message_and_kept_bounded() -> None:
    framer = LineFramer()
    buffers = set()
    for size in (1 << 20, 1 << 20, 1 << 20):
        line = b"x" * size + b"\n"
        while line:
            into = framer.receive_buffer()
            if into is None:
                assert framer.feed(line[:65536]) == []
                line = line[65536:]
                continue
            buffers.add(id(into.obj))
            n = min(len(into), len(line))
            into[:n] = line[:n]
            line = line[n:]
            got = framer.filled(n)
            if got:
                assert len(got) == 1 and isinstance(got[0], memoryview)
                assert len(got[0]) == size
            framer.recycle()
        assert framer.buffered == 0
        assert spare_bytes() <= KEEP_BYTES
    assert len(buffers) == 1  # one buffer served all three
    # A line far larger than what is kept: its buffer is not kept afterwards.
    line = b"y" * (5 << 20) + b"\n"
    assert framer.feed(line[:65536]) == []
    line = line[65536:]
    while line:
        into = framer.receive_buffer()
        assert into is not None
        n = min(len(into), len(line))
        into[:n] = line[:n]
        line = line[n:]
        framer.filled(n)
        framer.recycle()
    assert 0 < spare_bytes() <= KEEP_BYTES


def test_a_long_line_over_the_cap_is_reported_once_and_discarded_to_the_next_newline() -> None:
    # 20 bytes by `feed` start a long line; the rest goes into the buffer.
    chunks = [b"a" * 20, b"b" * 200 + b"\nok\n"]
    events, tail = _by_buffer(chunks, long_line=10, room=16, cap=100)
    assert events == [("oversize", 100), b"ok"]
    assert tail is None


def _receive_long(conn: Connection, line: bytes) -> list[object]:
    events: list[object] = []
    while line:
        into = conn.receive_buffer()
        if into is None:
            events.extend(conn.receive_data(line[:4096]))
            line = line[4096:]
            continue
        n = min(len(into), len(line))
        into[:n] = line[:n]
        line = line[n:]
        events.extend(conn.receive_into(n))
    return events


def test_a_raw_result_read_from_the_buffer_does_not_change_when_the_buffer_is_reused() -> None:
    conn = Connection("parent", typed_results=False)
    conn.track("a", "x/big")
    conn.track("b", "x/big")
    first = _receive_long(conn, b'{"jsonrpc":"2.0","id":"a","result":"' + b"a" * 300_000 + b'"}\n')
    second = _receive_long(conn, b'{"jsonrpc":"2.0","id":"b","result":"' + b"b" * 300_000 + b'"}\n')
    assert isinstance(first[0], ResponseReceived) and isinstance(second[0], ResponseReceived)
    assert msgspec.json.decode(first[0].result) == "a" * 300_000
    assert msgspec.json.decode(second[0].result) == "b" * 300_000


def test_a_typed_request_is_decoded_from_the_buffer_in_one_pass() -> None:
    conn = Connection("child")
    pad = "p" * 500_000
    events = _receive_long(
        conn,
        b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"pad":"' + pad.encode() + b'"}}\r\n',
    )
    assert len(events) == 1
    assert type(events[0]).__name__ == "RequestReceived"
