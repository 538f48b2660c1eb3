"""The nesting-depth limit: measured exactly on the bytes, the same on every interpreter.

msgspec alone stops at the interpreter's recursion guard (about 1 000 levels on 3.11, 1 500 on
3.12, 10 000 on 3.13); these tests pin tether's own limit, which must not depend on it.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.protocol import (
    DEFAULT_MAX_MESSAGE_DEPTH,
    Decoder,
    ErrorCode,
    Invalid,
    Notification,
    Request,
    decode_line,
    decode_params,
    encode_request,
    exceeds_depth,
)
from tether.protocol import messages as m

PROPS = settings(
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def depth_of(value: Any) -> int:
    """The reference: how many arrays/objects are open at once, at the deepest point."""
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


def depth_of_bytes(line: bytes) -> int:
    """The reference for any bytes, valid JSON or not: a byte loop that knows strings and escapes.

    For a line that breaks off or never closes, this is the deepest nesting reached anywhere in
    it, which is at least as deep as any decoder gets before it gives up."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in line:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def nested(levels: int, leaf: Any = 0) -> Any:
    value = leaf
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


# --- examples -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "depth"),
    [
        (b"1", 0),
        (b'"[[[{{{"', 0),
        (b"{}", 1),
        (b"[1,2,3]", 1),
        (b'{"a":[{}]}', 3),
        (b"[[],[[]],[]]", 3),
        (b'{"a":"]]]]","b":[[1]]}', 3),
        (b'{"a":"\\"[[[","b":[1]}', 2),  # an escaped quote does not end the string
        (b'{"a":"\\\\","b":[[1]]}', 3),  # an escaped backslash does not escape the quote
        (b'{"a":"\\\\\\"[[[","b":1}', 1),  # \\ then \" : still inside the string
        (b'{"a":"x\\n","b":[[[1]]]}', 4),  # a letter escape right before the closing quote
        ('{"ü":["✓ [", {"🙂":[]}]}'.encode(), 4),
        (b' \t{ "a" : [ ] } ', 2),
    ],
)
def test_the_depth_of_a_line_counts_structure_and_never_string_contents(
    line: bytes, depth: int
) -> None:
    assert depth_of_bytes(line) == depth
    assert not exceeds_depth(line, depth)
    if depth:
        assert exceeds_depth(line, depth - 1)


def test_the_default_limit_is_128_levels() -> None:
    assert DEFAULT_MAX_MESSAGE_DEPTH == 128
    assert not exceeds_depth(json.dumps(nested(128)).encode())
    assert exceeds_depth(json.dumps(nested(129)).encode())


@pytest.mark.parametrize("levels", [129, 1_000, 1_500, 10_000, 100_000])
def test_a_line_deeper_than_any_interpreter_guard_is_refused_by_the_limit(levels: int) -> None:
    balanced = b"[" * levels + b"]" * levels
    assert exceeds_depth(balanced)
    assert exceeds_depth(b"[" * levels)  # never closed: still refused before anything decodes it


def test_many_long_chains_at_the_limit_pass_and_one_level_less_refuses_them() -> None:
    # The slow case for peeling innermost pairs: thousands of chains, each 126 levels deep,
    # inside an object and an array (128 levels in all).
    chain = b"[" * 126 + b"]" * 126
    line = b'{"a":[' + b",".join([chain] * 2_000) + b"]}"
    assert depth_of_bytes(line) == 128
    assert not exceeds_depth(line)
    assert exceeds_depth(line, 127)


# --- properties -----------------------------------------------------------------------------------

# Strings full of what could fool a scanner: brackets, quotes, backslashes, escapes, non-ASCII.
tricky_text = st.text(
    alphabet=st.one_of(st.sampled_from('[]{}"\\\n\t/u:,'), st.characters(codec="utf-8")),
    max_size=12,
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), tricky_text)
shallow = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(tricky_text, inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def deep_values(draw: st.DrawFn, max_spine: int = 14) -> Any:
    """A random value with a spine of nesting, random siblings at every level."""
    value = draw(shallow)
    for _ in range(draw(st.integers(0, max_spine))):
        before = draw(st.lists(shallow, max_size=2))
        after = draw(st.lists(shallow, max_size=2))
        if draw(st.booleans()):
            value = [*before, value, *after]
        else:
            keys = draw(st.lists(tricky_text, min_size=1, max_size=3, unique=True))
            value = {**dict(zip(keys[1:], before, strict=False)), keys[0]: value}
    return value


def _encode(value: Any, how: str) -> bytes:
    if how == "msgspec":
        return msgspec.json.encode(value)
    return json.dumps(value, ensure_ascii=how == "ascii", indent=None if how != "spaced" else 1)


@PROPS
@given(
    value=deep_values(),
    limit=st.integers(0, 16),
    how=st.sampled_from(["msgspec", "ascii", "utf8", "spaced"]),
)
def test_a_value_is_refused_exactly_when_it_nests_deeper_than_the_limit(
    value: Any, limit: int, how: str
) -> None:
    encoded = _encode(value, how)
    line = encoded if isinstance(encoded, bytes) else encoded.replace("\n", " ").encode()
    assert exceeds_depth(line, limit) == (depth_of(value) > limit)


@settings(PROPS, max_examples=100)
@given(
    value=deep_values(max_spine=10),
    limit=st.integers(0, 12),
    text=st.text(alphabet='ab"\\\n[]{}', min_size=1, max_size=8),
)
def test_a_line_of_long_escaped_strings_gets_the_same_verdict(
    value: Any, limit: int, text: str
) -> None:
    # Long strings full of escaped quotes and backslashes, with brackets in them.
    line = msgspec.json.encode([text * 400, value, text * 400])
    assert exceeds_depth(line, limit) == (1 + depth_of(value) > limit)


@PROPS
@given(value=deep_values(), limit=st.integers(1, 16), rid=st.integers(0, 2**31))
def test_decode_line_accepts_a_request_exactly_when_it_is_within_the_limit(
    value: Any, limit: int, rid: int
) -> None:
    line = encode_request(rid, "agent/event", {"v": value}).rstrip(b"\n")
    got = decode_line(line, limit)
    if 2 + depth_of(value) <= limit:  # the envelope and params are two levels
        assert isinstance(got, Request)
        assert msgspec.json.decode(got.params or b"null") == {"v": value}
    else:
        assert isinstance(got, Invalid)
        assert got.code == ErrorCode.INVALID_REQUEST
        assert got.id == rid  # tether writes the id first: the peer can answer the request


@PROPS
@given(
    value=deep_values(),
    limit=st.integers(0, 16),
    cut=st.floats(0, 1),
    unclosed=st.integers(0, 20),
)
def test_a_broken_line_is_never_judged_shallower_than_it_is(
    value: Any, limit: int, cut: float, unclosed: int
) -> None:
    line = msgspec.json.encode(value)
    broken = line[: int(len(line) * cut)] + b"[" * unclosed
    if depth_of_bytes(broken) > limit:
        assert exceeds_depth(broken, limit)


@PROPS
@given(st.binary(max_size=200))
def test_any_bytes_get_a_verdict_and_decode_line_never_raises(data: bytes) -> None:
    assert isinstance(exceeds_depth(data, 3), bool)
    assert decode_line(data, 3) is not None


# --- the limit through the codec ------------------------------------------------------------------


def _request_with_depth(depth: int, rid: int | str = 9) -> bytes:
    """A tool/approve request whose line nests exactly `depth` levels (depth >= 3)."""
    arguments = {"a": nested(depth - 3)}  # envelope, params, arguments: 3 levels
    line = encode_request(rid, "tool/approve", {"runId": "r", "tool": "t", "arguments": arguments})
    assert depth_of_bytes(line) == depth
    return line.rstrip(b"\n")


def test_a_request_at_the_limit_decodes_down_to_its_typed_params() -> None:
    got = decode_line(_request_with_depth(DEFAULT_MAX_MESSAGE_DEPTH))
    assert isinstance(got, Request)
    params = decode_params("tool/approve", got.params)
    assert isinstance(params, m.ToolApproveParams)
    assert depth_of(params.arguments) == DEFAULT_MAX_MESSAGE_DEPTH - 2


def test_a_request_one_level_over_the_limit_is_invalid_with_its_id() -> None:
    line = _request_with_depth(DEFAULT_MAX_MESSAGE_DEPTH + 1, rid="req-7")
    got = decode_line(line)
    assert isinstance(got, Invalid)
    assert got.code == ErrorCode.INVALID_REQUEST
    assert got.id == "req-7"
    assert "nested deeper than the limit of 128 levels" in got.message
    assert got.line == line


@pytest.mark.parametrize(
    ("line", "rid"),
    [
        (b'{"params":' + b"[" * 200 + b"]" * 200 + b',"id":3,"jsonrpc":"2.0"}', None),
        (b'{"jsonrpc":"2.0","method":"x[","id":3,"params":' + b"[" * 200 + b"]" * 200 + b"}", None),
        (b'  {"jsonrpc":"2.0","id":"x","params":' + b"{" * 200, "x"),
        (b"[" * 200, None),
    ],
    ids=["id-after-params", "bracket-in-a-string-before-the-id", "leading-space", "array"],
)
def test_the_id_of_a_too_deep_line_is_read_only_when_it_comes_before_the_nesting(
    line: bytes, rid: str | None
) -> None:
    got = decode_line(line)
    assert isinstance(got, Invalid)
    assert got.code == ErrorCode.INVALID_REQUEST
    assert got.id == rid


def test_a_decoder_with_a_smaller_limit_refuses_and_keeps_decoding() -> None:
    dec = Decoder(max_depth=3)
    out = dec.feed(
        b'{"jsonrpc":"2.0","method":"n","params":{"a":[1]}}\n'
        b'{"jsonrpc":"2.0","id":1,"method":"r","params":{"a":[[1]]}}\n'
        b'{"jsonrpc":"2.0","method":"exit"}\n'
    )
    assert isinstance(out[0], Notification)
    assert isinstance(out[1], Invalid) and out[1].id == 1
    assert out[2] == Notification("exit")


def test_a_decoder_limit_below_the_envelope_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Decoder(max_depth=0)


def test_initialize_announces_the_depth_limit_beside_the_byte_cap() -> None:
    params = msgspec.json.decode(
        msgspec.json.encode(
            m.InitializeParams(protocol_version=1, client_info=m.PeerInfo(name="p"))
        )
    )
    assert params["maxMessageDepth"] == DEFAULT_MAX_MESSAGE_DEPTH
    # Optional on the wire: a peer that does not send it gets the default.
    decoded = msgspec.json.decode(
        b'{"protocolVersion":1,"serverInfo":{"name":"c"},"pid":1}', type=m.InitializeResult
    )
    assert decoded.max_message_depth == DEFAULT_MAX_MESSAGE_DEPTH
