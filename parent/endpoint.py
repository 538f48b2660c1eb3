"""JSON-RPC correlation and dispatch over one byte stream pair, knowing nothing of processes.

Outgoing requests get increasing integer ids and wait on a one-shot slot each. The reader task
decodes incoming bytes with the sans-I/O codec and routes: responses to their slot, requests to
the request handler (each in its own task, so a slow model call never stalls the reader),
notifications to the notification handler. When the stream ends or breaks, every pending request
fails at once with `ConnectionClosed`, carrying why.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from tether.parent.pipes import FdReader, FdWriter, PipeClosed
from tether.protocol import (
    Decoder,
    ErrorCode,
    ErrorResponse,
    Invalid,
    Notification,
    RemoteError,
    Request,
    Response,
    StreamFault,
    decode_params,
    decode_result,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)
from tether.protocol.methods import METHODS

MAX_CONCURRENT_REQUESTS = 32
"""Requests from the peer answered at once; more wait, unread, in the pipe."""

RequestHandler = Callable[[str, Any], Awaitable[Any]]
NotificationHandler = Callable[[str, Any], None]


class ConnectionClosed(Exception):
    """The peer's stream ended (or broke) while a request was waiting for its answer."""


@dataclass
class StreamEnd:
    """Why the incoming stream stopped."""

    reason: str
    fault: str | None = None
    """A protocol violation by the peer (garbage, wrong framing), if that is why."""
    oversize: str | None = None
    truncated: bool = False


class _Slot:
    __slots__ = ("error", "event", "method", "result")

    def __init__(self, method: str) -> None:
        self.method = method
        self.event = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Endpoint:
    def __init__(
        self,
        reader: FdReader,
        writer: FdWriter,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        max_message_bytes: int,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_request = on_request
        self._on_notification = on_notification
        self._decoder = Decoder(max_message_bytes)
        self._ids = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        self._closed: StreamEnd | None = None
        self.last_message_at = time.monotonic()
        """When the peer last sent a message."""
        self._last_activity_at = self.last_message_at
        self._serving = 0
        """Requests from the peer this side is still answering."""
        self.ended = anyio.Event()
        self.dropped_notifications = 0
        self._request_slots = anyio.Semaphore(MAX_CONCURRENT_REQUESTS)

    @property
    def end(self) -> StreamEnd | None:
        return self._closed

    # --- sending ------------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and return its typed result; raises `RemoteError` for an error reply
        and `ConnectionClosed` when the stream ends first."""
        if self._closed is not None:
            raise ConnectionClosed(self._closed.reason)
        rid = next(self._ids)
        slot = _Slot(method)
        self._pending[rid] = slot
        try:
            try:
                await self._writer.write_all(encode_request(rid, method, params))
            except PipeClosed as exc:
                raise ConnectionClosed("the child's stdin is closed") from exc
            await slot.event.wait()
        finally:
            self._pending.pop(rid, None)
        if slot.error is not None:
            raise slot.error
        return slot.result

    async def notify(self, method: str, params: Any = None) -> None:
        try:
            await self._writer.write_all(encode_notification(method, params))
        except PipeClosed as exc:
            raise ConnectionClosed("the child's stdin is closed") from exc

    # --- receiving ----------------------------------------------------------------------------

    async def run_reader(self, tg: TaskGroup) -> StreamEnd:
        """Read until the stream ends or the peer breaks the protocol; return why."""
        try:
            while True:
                data = await self._reader.read()
                if not data:
                    tail = self._decoder.eof()
                    if tail is not None:
                        return self._finish(StreamEnd("output ended mid-message", truncated=True))
                    return self._finish(StreamEnd("output closed"))
                for msg in self._decoder.feed(data):
                    self.last_message_at = self._last_activity_at = time.monotonic()
                    if isinstance(msg, Request):
                        # Backpressure: a peer that floods requests waits (its pipe fills)
                        # instead of making this side start unbounded work.
                        await self._request_slots.acquire()
                    end = self._route(msg, tg)
                    if end is not None:
                        return self._finish(end)
        finally:
            if self._closed is None:
                self._finish(StreamEnd("reader stopped"))

    def _route(self, msg: Any, tg: TaskGroup) -> StreamEnd | None:
        if isinstance(msg, Response | ErrorResponse):
            slot = self._pending.get(msg.id) if isinstance(msg.id, int) else None
            if slot is None:
                return StreamEnd(
                    "unexpected response", fault=f"a response to unknown id {msg.id!r}"
                )
            if isinstance(msg, Response):
                try:
                    slot.result = decode_result(slot.method, msg.result)
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    slot.error = RemoteError(
                        ErrorCode.INVALID_PARAMS, f"malformed {slot.method} result: {exc}"
                    )
            else:
                slot.error = RemoteError(msg.error.code, msg.error.message, msg.error.data)
            slot.event.set()
            return None
        if isinstance(msg, Request):
            tg.start_soon(self._answer, msg)
            return None
        if isinstance(msg, Notification):
            spec = METHODS.get(msg.method)
            if spec is None or spec.kind != "notification" or spec.direction != "child_to_parent":
                return None  # unknown notifications are ignored, as JSON-RPC requires
            try:
                params = decode_params(msg.method, msg.params)
            except (msgspec.ValidationError, msgspec.DecodeError):
                # Well-formed JSON-RPC with params we cannot read (say, an event kind from a
                # newer protocol revision): drop it, as for unknown notifications.
                self.dropped_notifications += 1
                return None
            self._on_notification(msg.method, params)
            return None
        if isinstance(msg, Invalid):
            return StreamEnd(
                "garbage",
                fault=f"the child wrote a line that is not JSON-RPC: "
                f"{msg.message} ({_preview(msg.line)})",
            )
        assert isinstance(msg, StreamFault)
        if msg.code == ErrorCode.MESSAGE_TOO_LARGE:
            return StreamEnd("oversize", oversize=msg.message)
        return StreamEnd("wrong framing", fault=msg.message)

    def quiet_for(self) -> float:
        """Seconds the peer has been silent with nothing to wait for: 0 while this side is
        still answering one of its requests (a peer waiting for a slow model turn is not idle),
        counted again from the moment that answer is sent."""
        if self._serving:
            return 0.0
        return time.monotonic() - self._last_activity_at

    async def _answer(self, req: Request) -> None:
        self._serving += 1
        try:
            await self._answer_one(req)
        finally:
            self._serving -= 1
            self._last_activity_at = time.monotonic()
            self._request_slots.release()

    async def _answer_one(self, req: Request) -> None:
        spec = METHODS.get(req.method)
        if spec is None or spec.kind != "request" or spec.direction != "child_to_parent":
            line = encode_error(req.id, ErrorCode.METHOD_NOT_FOUND, f"no method {req.method!r}")
        else:
            try:
                params = decode_params(req.method, req.params)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                line = encode_error(req.id, ErrorCode.INVALID_PARAMS, f"invalid params: {exc}")
            else:
                try:
                    result = await self._on_request(req.method, params)
                    line = encode_response(req.id, result)
                except RemoteError as exc:
                    line = encode_error(req.id, exc.code, exc.message, exc.data)
                except Exception:
                    # The one place a parent-side failure becomes a wire error: no traceback
                    # or library text crosses to the child.
                    line = encode_error(
                        req.id,
                        ErrorCode.INTERNAL_ERROR,
                        f"the parent failed to answer {req.method}",
                    )
        try:
            await self._writer.write_all(line)
        except PipeClosed:
            pass

    def _finish(self, end: StreamEnd) -> StreamEnd:
        if self._closed is None:
            self._closed = end
            for slot in self._pending.values():
                if slot.event.is_set():
                    # Answered just before the end: the answer stands. (A child that replies
                    # and exits at once has its reply and its EOF read in one go, before the
                    # waiting request gets to run.)
                    continue
                slot.error = ConnectionClosed(end.fault or end.oversize or end.reason)
                slot.event.set()
            self.ended.set()
        return self._closed


def _preview(line: bytes, n: int = 60) -> str:
    text = line[:n].decode("utf-8", "replace")
    return repr(text + ("..." if len(line) > n else ""))
