"""Encoding and two-step decoding of JSON-RPC 2.0 messages, sans-I/O.

Step one decodes a line into an `Envelope` whose members may be `UNSET` and whose params/result
stay `Raw`; classification turns it into exactly one `Incoming` value. Step two, the typed decode
of params/result, is done by the receiver through the method table (`methods.decode_params`),
because only the receiver knows which request a response belongs to. (A `Connection` reads the
usual messages in one typed pass, `onepass.py`, and brings every other line here.)

Nothing here raises on bad input: `Decoder.feed` turns any bytes into values. Before msgspec sees
a line, its nesting depth is measured (`depth.py`): a line nested deeper than the limit is refused
whole, so decoding it never recurses past the limit, and params/result, which are slices of a line
that passed, stay within it too.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from tether.protocol.depth import DEFAULT_MAX_MESSAGE_DEPTH, exceeds_depth
from tether.protocol.errors import ErrorCode
from tether.protocol.framing import DEFAULT_MAX_MESSAGE_BYTES, LineFramer, Oversize, WrongFraming

RequestId = int | str


class ErrorObject(Struct, frozen=True, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class Envelope(Struct, frozen=True):
    """A JSON-RPC message with every member optional, params/result left undecoded."""

    jsonrpc: str | UnsetType = UNSET
    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: ErrorObject | UnsetType = UNSET


class _IdOnly(Struct):
    id: int | str | UnsetType | None = UNSET


# --- what a receiver can get ------------------------------------------------------------------


class Request(Struct, frozen=True):
    id: RequestId
    method: str
    params: Raw | None = None


class Notification(Struct, frozen=True):
    method: str
    params: Raw | None = None


class Response(Struct, frozen=True):
    id: RequestId
    result: Raw


class ErrorResponse(Struct, frozen=True):
    id: RequestId | None
    error: ErrorObject


class Invalid(Struct, frozen=True):
    """A line that is not a valid JSON-RPC message.

    `id` is the request id when one could be recovered, so the receiver can answer the error to
    the right request; `code` is PARSE_ERROR or INVALID_REQUEST.
    """

    code: ErrorCode
    message: str
    id: RequestId | None = None
    line: bytes = b""


class StreamFault(Struct, frozen=True):
    """The byte stream itself broke the framing: an oversized line or a `Content-Length` header."""

    code: ErrorCode
    message: str


Incoming = Request | Notification | Response | ErrorResponse | Invalid | StreamFault

_envelope_decoder = msgspec.json.Decoder(Envelope)
_id_decoder = msgspec.json.Decoder(_IdOnly)
_any_decoder = msgspec.json.Decoder()
_TOO_DEEP = "Parse error: JSON nested too deeply"


def _recover_id(line: bytes) -> RequestId | None:
    try:
        got = _id_decoder.decode(line).id
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return None if got is UNSET or got is None else got


def _recover_id_before_nesting(line: bytes) -> RequestId | None:
    """The id of a line too deep to decode, read from the part before its first nested bracket.

    JSON-RPC peers (tether's own encoder among them) write `id` before `params`/`result`, so the
    envelope cut at its first inner `[`/`{` and closed with `null}` still holds the id, at depth 1.
    A cut inside a string leaves that string unterminated, so the decode fails and no wrong id is
    read."""
    body = line.lstrip()
    if body[:1] != b"{":
        return None
    cuts = [i for i in (body.find(b"[", 1), body.find(b"{", 1)) if i > 0]
    if not cuts:
        return None
    return _recover_id(body[: min(cuts)] + b"null}")


def decode_line(line: bytes, max_depth: int = DEFAULT_MAX_MESSAGE_DEPTH) -> Incoming:
    """Decode one framed line into exactly one `Incoming` value. Never raises.

    A line nested deeper than `max_depth` is `Invalid` with INVALID_REQUEST: it may well be valid
    JSON (RFC 8259 lets a receiver limit nesting), what it breaks is tether's announced limit, and
    unlike a parse error the answer can carry the request's id."""
    if exceeds_depth(line, max_depth):
        return Invalid(
            ErrorCode.INVALID_REQUEST,
            f"Invalid request: nested deeper than the limit of {max_depth} levels",
            _recover_id_before_nesting(line),
            line,
        )
    try:
        env = _envelope_decoder.decode(line)
    except msgspec.ValidationError as exc:
        # Valid JSON of the wrong shape: tell it apart from JSON that does not parse.
        try:
            _any_decoder.decode(line)
        except msgspec.DecodeError:
            return Invalid(ErrorCode.PARSE_ERROR, "Parse error: not valid JSON", None, line)
        except RecursionError:
            return Invalid(ErrorCode.PARSE_ERROR, _TOO_DEEP, None, line)
        return Invalid(
            ErrorCode.INVALID_REQUEST, f"Invalid request: {exc}", _recover_id(line), line
        )
    except msgspec.DecodeError:
        return Invalid(ErrorCode.PARSE_ERROR, "Parse error: not valid JSON", None, line)
    except RecursionError:
        # Only reachable with a `max_depth` above what the interpreter lets msgspec recurse.
        return Invalid(ErrorCode.PARSE_ERROR, _TOO_DEEP, None, line)
    return classify(env, line)


def classify(env: Envelope, line: bytes = b"") -> Incoming:
    """Turn a decoded envelope into a request, notification, response or `Invalid`."""
    rid = None if env.id is UNSET else env.id
    if env.jsonrpc != "2.0":
        return Invalid(
            ErrorCode.INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"', rid, line
        )
    has_method = env.method is not UNSET
    has_result = env.result is not UNSET
    has_error = env.error is not UNSET
    if has_method:
        if has_result or has_error:
            return Invalid(
                ErrorCode.INVALID_REQUEST,
                "Invalid request: a message has either a method or a result/error",
                rid,
                line,
            )
        params = None if env.params is UNSET else env.params
        if params is not None and bytes(params)[:1] not in (b"{", b"["):
            return Invalid(
                ErrorCode.INVALID_REQUEST,
                "Invalid request: params must be an object or an array",
                rid,
                line,
            )
        assert isinstance(env.method, str)
        if env.id is UNSET:
            return Notification(env.method, params)
        if env.id is None:
            return Invalid(
                ErrorCode.INVALID_REQUEST,
                "Invalid request: a request id must not be null",
                None,
                line,
            )
        return Request(env.id, env.method, params)
    if has_result and has_error:
        return Invalid(
            ErrorCode.INVALID_REQUEST,
            "Invalid response: it has both a result and an error",
            rid,
            line,
        )
    if has_error:
        assert isinstance(env.error, ErrorObject)
        return ErrorResponse(rid, env.error)
    if has_result:
        if rid is None:
            return Invalid(ErrorCode.INVALID_REQUEST, "Invalid response: it has no id", None, line)
        assert isinstance(env.result, Raw)
        return Response(rid, env.result)
    return Invalid(
        ErrorCode.INVALID_REQUEST,
        "Invalid request: it has no method, result or error",
        rid,
        line,
    )


def decode_frame(
    ev: bytes | Oversize | WrongFraming, max_depth: int = DEFAULT_MAX_MESSAGE_DEPTH
) -> Incoming:
    """One framing event (a line, or a framing fault) as exactly one `Incoming` value."""
    if isinstance(ev, bytes):
        return decode_line(ev, max_depth)
    if isinstance(ev, Oversize):
        return StreamFault(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"message too large: a line passed the {ev.limit}-byte cap",
        )
    return StreamFault(
        ErrorCode.WRONG_FRAMING,
        "wrong framing: got a Content-Length header; tether speaks one JSON message per line "
        "(NDJSON)",
    )


class Decoder:
    """Bytes in, `Incoming` values out: framing plus envelope decoding, never raising."""

    __slots__ = ("framer", "max_depth")

    def __init__(
        self,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_depth: int = DEFAULT_MAX_MESSAGE_DEPTH,
    ) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1 (the envelope object)")
        self.framer = LineFramer(max_message_bytes)
        self.max_depth = max_depth

    def feed(self, data: bytes) -> list[Incoming]:
        return [decode_frame(ev, self.max_depth) for ev in self.framer.feed(data)]

    def eof(self) -> bytes | None:
        """The unterminated tail of the stream, if it ended mid-message."""
        return self.framer.eof()


# --- encoding ---------------------------------------------------------------------------------


class _OutRequest(Struct, frozen=True, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId
    method: str
    params: Any = None


class _OutRequestNoParams(Struct, frozen=True, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId
    method: str


class _OutNotification(Struct, frozen=True, kw_only=True):
    jsonrpc: str = "2.0"
    method: str
    params: Any = None


class _OutNotificationNoParams(Struct, frozen=True, kw_only=True):
    jsonrpc: str = "2.0"
    method: str


class _OutResponse(Struct, frozen=True, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId
    result: Any


class _OutError(Struct, frozen=True, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId | None
    error: ErrorObject


_encoder = msgspec.json.Encoder()


def _line(obj: Any) -> bytes:
    buf = bytearray()
    _encoder.encode_into(obj, buf)
    buf += b"\n"
    return bytes(buf)


def encode_request(id: RequestId, method: str, params: Any = None) -> bytes:
    if params is None:
        return _line(_OutRequestNoParams(id=id, method=method))
    return _line(_OutRequest(id=id, method=method, params=params))


def encode_notification(method: str, params: Any = None) -> bytes:
    if params is None:
        return _line(_OutNotificationNoParams(method=method))
    return _line(_OutNotification(method=method, params=params))


def encode_response(id: RequestId, result: Any) -> bytes:
    return _line(_OutResponse(id=id, result=result))


def encode_error(id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
    return _line(_OutError(id=id, error=ErrorObject(int(code), message, data)))
