"""`LineFramer`: NDJSON lines in, with a byte cap that bounds the partial line too."""

from __future__ import annotations

import pytest

from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES, LineFramer, Oversize, WrongFraming


def test_the_default_cap_is_32_mib() -> None:
    assert DEFAULT_MAX_MESSAGE_BYTES == 32 * 1024 * 1024
    assert LineFramer().max_bytes == DEFAULT_MAX_MESSAGE_BYTES


def test_a_cap_below_one_byte_is_refused() -> None:
    with pytest.raises(ValueError):
        LineFramer(0)


def test_complete_lines_come_out_without_their_newline() -> None:
    f = LineFramer()
    assert f.feed(b'{"a":1}\n{"b":2}\n') == [b'{"a":1}', b'{"b":2}']
    assert f.buffered == 0


def test_a_line_split_across_feeds_comes_out_once_complete() -> None:
    f = LineFramer()
    assert f.feed(b'{"a":') == []
    assert f.buffered == 5
    assert f.feed(b"1}") == []
    assert f.feed(b"\n") == [b'{"a":1}']
    assert f.buffered == 0


def test_crlf_line_endings_are_accepted() -> None:
    f = LineFramer()
    assert f.feed(b'{"a":1}\r\n{"b":2}\r') == [b'{"a":1}']
    assert f.feed(b"\n") == [b'{"b":2}']


def test_only_a_trailing_carriage_return_is_removed() -> None:
    assert LineFramer().feed(b"a\rb\r\n") == [b"a\rb"]


def test_blank_and_whitespace_only_lines_are_skipped() -> None:
    f = LineFramer()
    assert f.feed(b"\n\r\n   \n\t\r\n{}\n\n") == [b"{}"]


def test_feeding_nothing_yields_nothing() -> None:
    f = LineFramer()
    assert f.feed(b"") == []
    assert f.eof() is None


def test_a_line_exactly_at_the_cap_is_delivered() -> None:
    f = LineFramer(8)
    assert f.feed(b"12345678\n") == [b"12345678"]


def test_a_line_one_byte_over_the_cap_is_oversize() -> None:
    f = LineFramer(8)
    assert f.feed(b"123456789\nok\n") == [Oversize(limit=8, seen=9), b"ok"]


def test_the_cap_counts_a_carriage_return_before_the_newline() -> None:
    # The cap counts every byte before `\n`; a CRLF sender has one byte less for the message.
    assert LineFramer(8).feed(b"1234567\r\n") == [b"1234567"]
    assert LineFramer(8).feed(b"12345678\r\n") == [Oversize(limit=8, seen=9)]


def test_ten_megabytes_without_newline_give_one_oversize_and_a_bounded_buffer() -> None:
    cap = 1024
    f = LineFramer(cap)
    chunk = b"x" * 65536
    events = []
    for _ in range(10 * 1024 * 1024 // len(chunk)):
        events += f.feed(chunk)
        assert f.buffered <= cap
    assert len(events) == 1
    assert isinstance(events[0], Oversize)
    assert events[0].limit == cap
    assert events[0].seen > cap


def test_small_chunks_past_the_cap_never_grow_the_buffer() -> None:
    cap = 100
    f = LineFramer(cap)
    events = []
    for _ in range(1000):
        events += f.feed(b"abc")
        assert f.buffered <= cap
    assert events == [Oversize(limit=cap, seen=102)]


def test_the_framer_resyncs_after_the_newline_that_ends_an_oversize_line() -> None:
    f = LineFramer(16)
    assert f.feed(b"y" * 40) == [Oversize(limit=16, seen=40)]
    assert f.feed(b"y" * 40) == []
    assert f.feed(b'yyy\n{"next":1}\n') == [b'{"next":1}']
    assert f.buffered == 0


def test_an_oversize_line_is_reported_again_for_each_new_offender() -> None:
    f = LineFramer(4)
    assert f.feed(b"aaaaa\nbbbbbb\nok\n") == [
        Oversize(limit=4, seen=5),
        Oversize(limit=4, seen=6),
        b"ok",
    ]


def test_a_content_length_header_at_the_start_is_wrong_framing() -> None:
    f = LineFramer()
    events = f.feed(b'Content-Length: 42\r\n\r\n{"jsonrpc":"2.0"}')
    assert events == [WrongFraming(head=b"Content-Length: 42")]


def test_the_content_length_check_ignores_case_and_leading_blank_lines() -> None:
    events = LineFramer().feed(b"\r\n  content-LENGTH: 7\r\n")
    assert len(events) == 1
    assert isinstance(events[0], WrongFraming)


def test_a_content_length_line_after_the_first_message_is_just_a_line() -> None:
    f = LineFramer()
    assert f.feed(b"{}\nContent-Length: 3\n") == [b"{}", b"Content-Length: 3"]


def test_wrong_framing_keeps_at_most_64_bytes_of_the_head() -> None:
    (event,) = LineFramer().feed(b"Content-Length: " + b"9" * 200 + b"\r\n")
    assert isinstance(event, WrongFraming)
    assert len(event.head) == 64


def test_eof_returns_the_unterminated_tail_once() -> None:
    f = LineFramer()
    assert f.feed(b'{}\n{"trunc') == [b"{}"]
    assert f.eof() == b'{"trunc'
    assert f.eof() is None
    assert f.buffered == 0


def test_eof_after_complete_lines_returns_nothing() -> None:
    f = LineFramer()
    f.feed(b"{}\n")
    assert f.eof() is None


def test_eof_while_discarding_an_oversize_line_returns_nothing() -> None:
    f = LineFramer(4)
    f.feed(b"0123456789")
    assert f.eof() is None
