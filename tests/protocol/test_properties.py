"""Property tests: chunking never changes what decodes, no input escapes as an exception, and the
cap is exact whatever the chunking."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.protocol import (
    Decoder,
    ErrorCode,
    ErrorResponse,
    Incoming,
    Invalid,
    LineFramer,
    Notification,
    Oversize,
    Request,
    Response,
    StreamFault,
    WrongFraming,
    decode_line,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)

PROPS = settings(
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies -----------------------------------------------------------------------------------

# Text with newlines, carriage returns, U+2028 and anything else unicode (surrogates excluded:
# they cannot be encoded as UTF-8 at all).
texts = st.text(
    alphabet=st.one_of(st.sampled_from('\n\r\t"\\\u2028\u0000{}[]'), st.characters(codec="utf-8")),
    max_size=30,
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)
params_values = st.one_of(
    st.none(), st.dictionaries(texts, json_values, max_size=4), st.lists(json_values, max_size=4)
)
ids = st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), texts)
methods = st.one_of(st.sampled_from(["initialize", "agent/run", "agent/event", "ping"]), texts)


@st.composite
def messages(draw: st.DrawFn) -> tuple[bytes, tuple[Any, ...]]:
    """One encoded line and what a receiver must see for it."""
    kind = draw(st.sampled_from(["request", "notification", "response", "error"]))
    if kind == "request":
        rid, method, params = draw(ids), draw(methods), draw(params_values)
        return encode_request(rid, method, params), ("request", rid, method, _raw(params))
    if kind == "notification":
        method, params = draw(methods), draw(params_values)
        return encode_notification(method, params), ("notification", method, _raw(params))
    if kind == "response":
        rid, result = draw(ids), draw(json_values)
        return encode_response(rid, result), ("response", rid, msgspec.json.encode(result))
    rid = draw(st.one_of(st.none(), ids))
    code = draw(st.integers(min_value=-32768, max_value=32767))
    msg, data = draw(texts), draw(json_values)
    return encode_error(rid, code, msg, data), ("error", rid, code, msg, data)


def _raw(params: Any) -> bytes | None:
    return None if params is None else msgspec.json.encode(params)


def _seen(item: Incoming) -> tuple[Any, ...]:
    if isinstance(item, Request):
        return (
            "request",
            item.id,
            item.method,
            None if item.params is None else bytes(item.params),
        )
    if isinstance(item, Notification):
        return ("notification", item.method, None if item.params is None else bytes(item.params))
    if isinstance(item, Response):
        return ("response", item.id, bytes(item.result))
    if isinstance(item, ErrorResponse):
        return ("error", item.id, item.error.code, item.error.message, item.error.data)
    return (type(item).__name__, item.code)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def _feed_all(dec: Decoder, chunks: list[bytes]) -> list[Incoming]:
    out: list[Incoming] = []
    for chunk in chunks:
        out += dec.feed(chunk)
    return out


# --- (a) chunking never changes what decodes ------------------------------------------------------


@PROPS
@given(
    st.lists(
        st.tuples(messages(), st.booleans(), st.sampled_from([b"", b"\n", b"\r\n", b"  \n"])),
        max_size=12,
    ),
    st.lists(st.integers(min_value=0), max_size=20),
)
def test_any_message_sequence_decodes_the_same_whatever_the_chunking(
    items: list[tuple[tuple[bytes, tuple[Any, ...]], bool, bytes]], cuts: list[int]
) -> None:
    stream = b""
    expected = []
    for (line, seen), crlf, blank in items:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        stream += (line[:-1] + b"\r\n" if crlf else line) + blank
        expected.append(seen)
    whole = Decoder()
    at_once = whole.feed(stream)
    assert whole.eof() is None
    chunked = Decoder()
    in_chunks = _feed_all(chunked, _split(stream, cuts))
    assert chunked.eof() is None
    assert [_seen(x) for x in in_chunks] == [_seen(x) for x in at_once] == expected


@PROPS
@given(messages())
def test_every_encoded_message_decodes_back_from_its_own_line(
    msg: tuple[bytes, tuple[Any, ...]],
) -> None:
    line, seen = msg
    assert _seen(decode_line(line.rstrip(b"\n"))) == seen


# --- (b) no input escapes as an exception ---------------------------------------------------------

caps = st.integers(min_value=1, max_value=300)
garbage = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"Content-Length: 12\r\n\r\n",
            b"\n",
            b"\r\n",
            b"[" * 2000,
            b'{"jsonrpc":"2.0","id":null,"method":"x"}\n',
            b'{"jsonrpc":"2.0","result":1}\n',
            b"\xff\xfe\xfd\n",
            b'"\\ud800"\n',
        ]
    ),
    messages().map(lambda m: m[0]),
)


def _check_stream(cap: int, chunks: list[bytes]) -> None:
    dec = Decoder(max_message_bytes=cap)
    for chunk in chunks:
        for item in dec.feed(chunk):
            assert isinstance(
                item, Request | Notification | Response | ErrorResponse | Invalid | StreamFault
            )
            if isinstance(item, Invalid | StreamFault):
                assert item.code in set(ErrorCode)
        assert dec.framer.buffered <= cap
    tail = dec.eof()
    assert tail is None or (0 < len(tail) <= cap and b"\n" not in tail)


@PROPS
@given(caps, st.binary(max_size=2000), st.lists(st.integers(min_value=0), max_size=30))
def test_arbitrary_bytes_never_raise_and_never_pass_the_cap(
    cap: int, data: bytes, cuts: list[int]
) -> None:
    _check_stream(cap, _split(data, cuts))


@PROPS
@given(
    st.one_of(caps, st.just(1 << 20)),
    st.lists(garbage, max_size=15),
    st.lists(st.integers(min_value=0), max_size=30),
)
def test_valid_lines_mixed_with_garbage_never_raise_and_never_pass_the_cap(
    cap: int, parts: list[bytes], cuts: list[int]
) -> None:
    _check_stream(cap, _split(b"".join(parts), cuts))


# --- (c) the cap is exact -------------------------------------------------------------------------


@PROPS
@given(
    st.integers(min_value=1, max_value=400),
    st.integers(min_value=1, max_value=800),
    st.lists(st.integers(min_value=0), max_size=20),
)
def test_a_line_within_the_cap_is_delivered_and_a_longer_one_is_oversize(
    cap: int, length: int, cuts: list[int]
) -> None:
    line = b"a" * length
    stream = line + b"\nok\n"
    f = LineFramer(cap)
    events = []
    for chunk in _split(stream, cuts):
        events += f.feed(chunk)
        assert f.buffered <= cap
    after = [b"ok"] if cap >= 2 else [Oversize(limit=cap, seen=2)]
    if length <= cap:
        assert events == [line, *after]
    else:
        assert len(events) == 1 + len(after)
        assert isinstance(events[0], Oversize)
        assert events[0].limit == cap
        assert cap < events[0].seen <= length
        assert events[1:] == after


def _reference(stream: bytes, cap: int) -> list[Any]:
    """The framing rules written as plainly as possible: split on `\\n`, then judge each line."""
    out: list[Any] = []
    started = False
    *lines, tail = stream.split(b"\n")
    for raw in lines:
        if len(raw) > cap:
            out.append(Oversize)
            continue
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line.strip():
            continue
        if not started:
            started = True
            if line.lstrip().lower().startswith(b"content-length:"):
                out.append(WrongFraming)
                continue
        out.append(line)
    if len(tail) > cap:
        out.append(Oversize)  # reported as soon as the partial line passes the cap
    return out


@PROPS
@given(
    caps,
    st.lists(
        st.one_of(
            st.binary(max_size=60),
            st.sampled_from([b"\n", b"\r\n", b" ", b"Content-Length: 1\r\n", b"x" * 400]),
        ),
        max_size=20,
    ),
    st.lists(st.integers(min_value=0), max_size=30),
)
def test_the_framer_agrees_with_a_plain_split_on_newlines(
    cap: int, parts: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(parts)
    f = LineFramer(cap)
    events: list[Any] = []
    for chunk in _split(stream, cuts):
        events += f.feed(chunk)
    got = [e if isinstance(e, bytes) else type(e) for e in events]
    assert got == _reference(stream, cap)
    rest = stream.rsplit(b"\n", 1)[-1] if b"\n" in stream else stream
    assert f.eof() == (rest if 0 < len(rest) <= cap else None)
