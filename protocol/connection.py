"""One side of a JSON-RPC conversation, sans-I/O: bytes in, events out; calls in, bytes out.

Theory of operation
-------------------
A `Connection` holds everything about a conversation that is not I/O: the framing decoder
with its byte cap, the next request id, the table of requests this side sent and still waits
for (id → method, so a reply is decoded into that method's result type), the ids a caller gave
up on, and whether the conversation is over. Each side of the wire has one (`role="parent"` or
`"child"`); the role says which requests and notifications this side may receive.

Driving it (what a pump over a byte stream does):

- `receive_data(bytes)` → a list of events, in wire order; `receive_eof()` → the last ones.
- `send_request(method, params)` → `(id, line)`; the pump writes the line and later gets
  `ResponseReceived` / `ErrorReceived` / `ResultInvalid` for that id, or finds the id among
  `Closed.pending` when the conversation ends first. A caller that stops waiting calls
  `abandon(id)`: its reply, if one still comes, is a harmless `ReplyLate`, not a fault.
- `send_response`, `send_error`, `send_notification` → a line to write.

Incoming requests and notifications are typed through the one method table (`METHODS`) before
they become events; what cannot be served becomes `RequestRefused` (answer it with
`send_error`) or `NotificationDropped`. What the peer got wrong at the message or stream level
(`MessageInvalid`, `StreamFaulted`, `ReplyUnexpected`) is reported, not acted on: whether it
ends the conversation is the pump's policy (the parent ends it, the child answers and serves
on). The pump ends it with `close(reason)`, which, like end of stream, returns `Closed` with
every request still pending, so all of them fail at once. After `Closed`, the connection is
inert: it takes no more data and sends nothing.

Lines over the peer's cap (`peer_max_message_bytes`, learnt at `initialize`) are refused with
`LocalProtocolError` before any byte is produced: over the cap the peer would have to drop the
line and everything waiting on it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct

from tether.protocol.codec import (
    Decoder,
    ErrorObject,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
    StreamFault,
    decode_frame,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)
from tether.protocol.depth import exceeds_depth, view_exceeds_depth
from tether.protocol.errors import ErrorCode, LocalProtocolError
from tether.protocol.framing import DEFAULT_MAX_MESSAGE_BYTES
from tether.protocol.methods import METHODS, MethodSpec, decode_params, decode_result
from tether.protocol.onepass import IncomingDecoder, decode_reply, peek_id

Role = Literal["parent", "child"]

ABANDONED_KEPT = 4096
"""How many abandoned request ids are remembered, so their late replies are recognised."""

# --- events -------------------------------------------------------------------------------------


class RequestReceived(Struct, frozen=True):
    """A request this side serves; `params` is the method's params Struct (or `None`)."""

    id: RequestId
    method: str
    params: Any
    size: int = 0
    """Bytes of the line it came in (what holding it costs, roughly)."""


class NotificationReceived(Struct, frozen=True):
    method: str
    params: Any


class RequestRefused(Struct, frozen=True):
    """A well-formed request this side cannot serve (unknown method, the wrong direction,
    params that do not fit). Answer it with `send_error(id, code, message)`."""

    id: RequestId
    method: str
    code: ErrorCode
    message: str


class NotificationDropped(Struct, frozen=True):
    """A notification this side ignores: unknown, or params it cannot read."""

    method: str
    reason: str
    known: bool
    """The method is one this side receives (its params did not fit), not an unknown one."""


class ResponseReceived(Struct, frozen=True):
    """The answer to our request `id`; `result` is decoded into `method`'s result type (or
    left `msgspec.Raw` for a method outside the table)."""

    id: RequestId
    method: str
    result: Any


class ErrorReceived(Struct, frozen=True):
    """The peer answered our request `id` with an error."""

    id: RequestId
    method: str
    error: ErrorObject


class ResultInvalid(Struct, frozen=True):
    """The peer answered our request `id` with a result that does not fit `method`."""

    id: RequestId
    method: str
    reason: str


class ReplyLate(Struct, frozen=True):
    """A reply to a request this side abandoned; nothing waits for it."""

    id: RequestId


class ReplyUnexpected(Struct, frozen=True):
    """A reply to an id this side never sent, or already had answered."""

    id: RequestId | None
    error: ErrorObject | None = None
    """Set for an error response; with a `None` id it is the peer saying it could not read
    something this side sent."""


class MessageInvalid(Struct, frozen=True):
    """A line that is not a valid JSON-RPC message (`code`: PARSE_ERROR or INVALID_REQUEST);
    `id` is the request id when one could be recovered from it."""

    code: ErrorCode
    message: str
    id: RequestId | None
    line: bytes


class StreamFaulted(Struct, frozen=True):
    """The byte stream broke the framing: a line over the cap, or an LSP `Content-Length`."""

    code: ErrorCode
    message: str


class PendingRequest(Struct, frozen=True):
    id: RequestId
    method: str


class Closed(Struct, frozen=True):
    """The conversation is over; every request in `pending` will never be answered."""

    reason: str
    pending: tuple[PendingRequest, ...] = ()
    truncated: bool = False
    """The stream ended in the middle of a message."""


Event = (
    RequestReceived
    | NotificationReceived
    | RequestRefused
    | NotificationDropped
    | ResponseReceived
    | ErrorReceived
    | ResultInvalid
    | ReplyLate
    | ReplyUnexpected
    | MessageInvalid
    | StreamFaulted
    | Closed
)

_RECEIVES = {"parent": "child_to_parent", "child": "parent_to_child"}
_HEAD = 64
"""A request names its method in its first bytes (tether's encoder and most peers write it
before `params`); a line without `"method"` there is tried as a reply first."""
_incoming_decoders: dict[str, IncomingDecoder] = {}


def _incoming_decoder(direction: str) -> IncomingDecoder:
    dec = _incoming_decoders.get(direction)
    if dec is None:
        dec = _incoming_decoders[direction] = IncomingDecoder(direction)
    return dec


class Connection:
    """See the module docstring."""

    def __init__(
        self,
        role: Role,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        peer_max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        typed_results: bool = True,
    ) -> None:
        """`typed_results=False` leaves every result `msgspec.Raw` for the caller to judge (a
        test kit that checks the exact bytes a peer answered)."""
        self.role: Role = role
        self._typed_results = typed_results
        self._receives = _RECEIVES[role]
        self._incoming = _incoming_decoder(self._receives)
        self._decoder = Decoder(max_message_bytes)
        self.peer_max_message_bytes = peer_max_message_bytes
        """The peer's read cap: no line longer than this is produced."""
        self._next_id = 0
        self._pending: dict[RequestId, str] = {}
        self._abandoned: OrderedDict[RequestId, None] = OrderedDict()
        self.closed: Closed | None = None

    @property
    def max_message_bytes(self) -> int:
        """This side's read cap."""
        return self._decoder.framer.max_bytes

    @property
    def pending(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    # --- sending ----------------------------------------------------------------------------

    def send_request(
        self, method: MethodSpec[Any, Any] | str, params: Any = None
    ) -> tuple[int, bytes]:
        """A new request: its id and its line. Raises `LocalProtocolError` when closed or when
        the line would pass the peer's cap (nothing is recorded then)."""
        name = method if isinstance(method, str) else method.name
        self._check_open()
        rid = self._next_id + 1
        line = self._fit(encode_request(rid, name, params))
        self._next_id = rid
        self._pending[rid] = name
        return rid, line

    def send_notification(self, method: MethodSpec[Any, Any] | str, params: Any = None) -> bytes:
        self._check_open()
        name = method if isinstance(method, str) else method.name
        return self._fit(encode_notification(name, params))

    def send_response(self, id: RequestId, result: Any) -> bytes:
        """The answer to the peer's request `id`. Raises `msgspec.EncodeError` for a result
        that cannot be encoded and `LocalProtocolError` for one over the peer's cap."""
        self._check_open()
        return self._fit(encode_response(id, result))

    def send_error(self, id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
        self._check_open()
        return self._fit(encode_error(id, code, message, data))

    def track(self, id: RequestId, method: str) -> None:
        """Expect a reply to a request sent by other means (raw bytes a test kit wrote), so its
        reply is matched like any other. Use ids this side never allocates (strings)."""
        self._pending[id] = method

    def abandon(self, id: RequestId) -> None:
        """The caller stopped waiting for request `id` (it was cancelled): a reply that still
        comes is `ReplyLate`, never mistaken for the peer's fault."""
        if self._pending.pop(id, None) is not None:
            self._abandoned[id] = None
            while len(self._abandoned) > ABANDONED_KEPT:
                self._abandoned.popitem(last=False)

    def close(self, reason: str) -> Closed:
        """End the conversation now (this side's decision); every pending request fails."""
        return self._end(reason)

    def fits(self, line: bytes) -> bool:
        return len(line) - 1 <= self.peer_max_message_bytes

    def _fit(self, line: bytes) -> bytes:
        if not self.fits(line):
            raise LocalProtocolError(
                f"message of {len(line) - 1} bytes passes the peer's "
                f"{self.peer_max_message_bytes}-byte cap",
                ErrorCode.MESSAGE_TOO_LARGE,
            )
        return line

    def _check_open(self) -> None:
        if self.closed is not None:
            raise LocalProtocolError(f"the conversation is over: {self.closed.reason}")

    # --- receiving --------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        if self.closed is not None:
            return []
        framer = self._decoder.framer
        try:
            return self._events(framer.feed(data))
        finally:
            framer.recycle()

    def receive_buffer(self) -> memoryview | None:
        """Where to read next while a long line is coming (then `receive_into(n)`), or `None`:
        read a chunk and `receive_data` it. The line is built in one reused buffer and decoded
        in place, never joined from chunks or copied."""
        if self.closed is not None:
            return None
        return self._decoder.framer.receive_buffer()

    def receive_into(self, n: int) -> list[Event]:
        """`n` bytes were read into the view `receive_buffer()` gave."""
        if self.closed is not None:
            return []
        framer = self._decoder.framer
        try:
            return self._events(framer.filled(n))
        finally:
            framer.recycle()

    def _events(self, frames: list[Any]) -> list[Event]:
        out: list[Event] = []
        depth = self._decoder.max_depth
        for frame in frames:
            if type(frame) is memoryview:
                # A long line, a view of the framer's reused buffer: nothing decoded from it
                # may keep referring to it (a `Raw` would), so only the one typed pass reads
                # it in place; every other path gets a copy.
                if not view_exceeds_depth(frame, depth):
                    event = self._one_pass(frame, bytes(frame[:256]))
                    if event is not None:
                        out.append(event)
                        continue
                frame = bytes(frame)
            elif type(frame) is bytes and not exceeds_depth(frame, depth):
                event = self._one_pass(frame, frame)
                if event is not None:
                    out.append(event)
                    continue
            msg = decode_frame(frame, depth)
            if isinstance(msg, Request):
                out.append(self._request(msg, len(frame) if isinstance(frame, bytes) else 0))
            else:
                out.append(self._event(msg))
        return out

    def _one_pass(self, line: bytes | memoryview, head: bytes) -> Event | None:
        """The event of a plain message read in one typed pass (`onepass.py`), or `None` for
        the two-step path, which judges everything else. `head`: the line's first bytes."""
        if head[:1] != b"{":
            return None
        got = self._incoming.decode(line) if b'"method"' in head[:_HEAD] else None
        if got is not None:
            name, rid, params = got
            if rid is UNSET:
                return NotificationReceived(name, params)
            return RequestReceived(rid, name, params, len(line))
        rid = peek_id(head)
        method = self._pending.get(rid) if rid is not UNSET else None
        if method is None or not self._typed_results:
            return None
        ok, result = decode_reply(line, rid, method)
        if not ok:
            return None
        del self._pending[rid]
        return ResponseReceived(rid, method, result)

    def receive_eof(self) -> list[Event]:
        """The peer's stream ended."""
        if self.closed is not None:
            return []
        tail = self._decoder.eof()
        if tail is not None:
            return [self._end("output ended mid-message", truncated=True)]
        return [self._end("output closed")]

    def _end(self, reason: str, *, truncated: bool = False) -> Closed:
        if self.closed is None:
            pending = tuple(PendingRequest(rid, m) for rid, m in self._pending.items())
            self._pending.clear()
            self.closed = Closed(reason, pending, truncated)
        return self.closed

    def _event(self, msg: object) -> Event:
        if isinstance(msg, Response | ErrorResponse):
            return self._reply(msg)
        if isinstance(msg, Request):
            return self._request(msg, 0)
        if isinstance(msg, Notification):
            return self._notification(msg)
        if isinstance(msg, Invalid):
            return MessageInvalid(msg.code, msg.message, msg.id, msg.line)
        assert isinstance(msg, StreamFault)
        return StreamFaulted(msg.code, msg.message)

    def _reply(self, msg: Response | ErrorResponse) -> Event:
        rid = msg.id
        method = self._pending.pop(rid, None) if rid is not None else None
        if method is None:
            if rid is not None and rid in self._abandoned:
                del self._abandoned[rid]
                return ReplyLate(rid)
            return ReplyUnexpected(rid, msg.error if isinstance(msg, ErrorResponse) else None)
        assert rid is not None
        if isinstance(msg, ErrorResponse):
            return ErrorReceived(rid, method, msg.error)
        if method not in METHODS or not self._typed_results:
            return ResponseReceived(rid, method, msg.result)
        try:
            return ResponseReceived(rid, method, decode_result(method, msg.result))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return ResultInvalid(rid, method, f"malformed {method} result: {exc}")

    def _request(self, msg: Request, size: int) -> Event:
        spec = METHODS.get(msg.method)
        if spec is None or spec.kind != "request" or spec.direction != self._receives:
            return RequestRefused(
                msg.id, msg.method, ErrorCode.METHOD_NOT_FOUND, f"Method not found: {msg.method}"
            )
        try:
            params = decode_params(msg.method, msg.params)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            # msgspec names the field and the expected type: it describes the peer's own
            # input, so it is safe and useful to send back.
            return RequestRefused(
                msg.id,
                msg.method,
                ErrorCode.INVALID_PARAMS,
                f"Invalid params for {msg.method}: {exc}",
            )
        return RequestReceived(msg.id, msg.method, params, size)

    def _notification(self, msg: Notification) -> Event:
        spec = METHODS.get(msg.method)
        if spec is None or spec.kind != "notification" or spec.direction != self._receives:
            return NotificationDropped(msg.method, f"unknown notification {msg.method!r}", False)
        try:
            params = decode_params(msg.method, msg.params)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return NotificationDropped(msg.method, f"invalid params for {msg.method}: {exc}", True)
        return NotificationReceived(msg.method, params)
