"""The child's side of the conversation it starts: requests to the parent and their replies.

Each outgoing request gets the next integer id and a slot in the pending table; the server
routes every incoming response or error response here by id, never to the dispatcher. A waiter
that is cancelled (its run was cancelled) drops its slot, so a late reply is just logged.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import msgspec

from tether.child.transport import LineWriter
from tether.protocol import (
    ErrorCode,
    ErrorResponse,
    RemoteError,
    RemoteProtocolError,
    RequestId,
    Response,
    decode_result,
    encode_notification,
    encode_request,
)

log = logging.getLogger("tether.child")


class ConnectionClosed(Exception):
    """The wire ended while a request was waiting for its reply."""


class _Pending:
    __slots__ = ("done", "method", "outcome")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = anyio.Event()
        self.outcome: Response | ErrorResponse | ConnectionClosed | None = None


class Peer:
    def __init__(self, writer: LineWriter) -> None:
        self._writer = writer
        self._next_id = 0
        self._pending: dict[RequestId, _Pending] = {}
        self._closed = False

    async def request(self, method: str, params: Any) -> Any:
        """Send a request and return its typed result (decoded through the method table).

        Raises `RemoteError` when the parent answers with an error, `RemoteProtocolError` when
        its result does not fit the method's result type, `ConnectionClosed` when the wire
        ends first, and `LocalProtocolError` when the request itself passes the parent's cap.
        """
        if self._closed:
            raise ConnectionClosed("the parent's pipe is closed")
        self._next_id += 1
        rid = self._next_id
        slot = self._pending[rid] = _Pending(method)
        try:
            await self._writer.send(encode_request(rid, method, params))
            await slot.done.wait()
        finally:
            self._pending.pop(rid, None)
        outcome = slot.outcome
        if isinstance(outcome, ConnectionClosed):
            raise outcome
        if isinstance(outcome, ErrorResponse):
            err = outcome.error
            raise RemoteError(err.code, err.message, err.data)
        assert isinstance(outcome, Response)
        try:
            return decode_result(method, outcome.result)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise RemoteProtocolError(
                f"the parent's reply to {method} does not fit: {exc}", ErrorCode.INVALID_REQUEST
            ) from None

    async def notify(self, method: str, params: Any) -> None:
        await self._writer.send(encode_notification(method, params))

    def deliver(self, reply: Response | ErrorResponse) -> None:
        """Hand a reply to whoever waits for it; stray replies are logged and dropped."""
        if reply.id is None:
            # An error with a null id is the parent saying it could not read something we sent.
            assert isinstance(reply, ErrorResponse)
            log.warning(
                "the parent reported an error: %s (%s)", reply.error.message, reply.error.code
            )
            return
        slot = self._pending.get(reply.id)
        if slot is None:
            log.warning("dropping a reply to unknown or abandoned request id %r", reply.id)
            return
        slot.outcome = reply
        slot.done.set()

    def close(self) -> None:
        """The wire is gone: fail every waiting request at once."""
        self._closed = True
        for slot in self._pending.values():
            slot.outcome = ConnectionClosed("the parent's pipe closed before it replied")
            slot.done.set()
