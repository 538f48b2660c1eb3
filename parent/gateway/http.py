"""A small, strict HTTP/1.1 server: h11 over anyio, for the model gateway.

Theory of operation
-------------------
`HttpServer.serve(listener)` accepts connections on an anyio listener (any number of listeners
may share one server: the default loopback one, and one per sandboxed child whose socket was
made inside the child's network namespace). Each connection is one task in the server's task
group, which the server owns; `close()` stops accepting, lets requests in progress finish for a
grace, then cancels what is left.

A connection reads one request at a time (keep-alive, no pipelining: h11 holds a pipelined
request until the response before it is done). Everything a client sends is bounded:

- the request head: `max_head_bytes` (h11's cap on an incomplete event) and `max_headers`;
- the body: `max_body_bytes`, checked against `Content-Length` before reading and while
  reading a chunked body;
- time: a request must arrive whole within `request_timeout` of its first byte (a client that
  stalls mid-request is dropped with 408), an idle keep-alive connection is closed after
  `idle_timeout`, and each write to a client that does not read is bounded by `send_timeout`;
- connections: at most `max_connections` at once; past it a new one is closed at once.

The handler gets a complete `Request` and a `Responder` that sends either a whole response or
a stream (chunked; used for server-sent events). A handler that raises gets a 500 (with no
detail) if nothing was sent yet, else the connection is closed. Malformed HTTP gets a 400 and
the connection is closed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import h11
from anyio.abc import ByteStream, Listener, TaskGroup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpLimits:
    max_head_bytes: int = 64 * 1024
    max_headers: int = 100
    max_body_bytes: int = 32 * 1024 * 1024
    request_timeout: float = 30.0
    idle_timeout: float = 60.0
    send_timeout: float = 30.0
    max_connections: int = 256
    close_grace: float = 5.0
    """How long requests in progress may run on after `close()`."""


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    """The request target as sent (path and query)."""
    headers: Sequence[tuple[str, str]]
    """Names lower-cased, values decoded as Latin-1."""
    body: bytes
    context: object = None
    """What the listener it came in on was registered with (`HttpServer.listen`)."""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None


class ClientGone(Exception):
    """The client closed the connection or stopped reading while a response was being sent."""


class Responder:
    """Sends the response to one request: `send()` whole, or `start()` + `write()` + `end()`."""

    def __init__(
        self, conn: h11.Connection, stream: ByteStream, send_timeout: float, head: bool = False
    ) -> None:
        self._head = head
        """Answering a HEAD request: headers only."""
        self._conn = conn
        self._stream = stream
        self._send_timeout = send_timeout
        self.started = False
        self.finished = False

    async def send(self, status: int, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> None:
        await self.start(status, [*headers, ("content-length", str(len(body)))])
        if body and not self._head:
            await self.write(body)
        await self.end()

    async def start(self, status: int, headers: Sequence[tuple[str, str]] = ()) -> None:
        """Send the status line and headers; without a content-length the body is chunked."""
        self.started = True
        await self._put(h11.Response(status_code=status, headers=list(headers)))

    async def write(self, data: bytes) -> None:
        await self._put(h11.Data(data=data))

    async def end(self) -> None:
        await self._put(h11.EndOfMessage())
        self.finished = True

    async def _put(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        if not data:
            return
        try:
            with anyio.fail_after(self._send_timeout):
                await self._stream.send(data)
        except TimeoutError:
            raise ClientGone(f"the client did not read for {self._send_timeout:g}s") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise ClientGone(f"the client went away ({type(exc).__name__})") from None


Handler = Callable[[Request, Responder], Awaitable[None]]


class _Reject(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class HttpServer:
    """See the module docstring. Use as `async with HttpServer(handler) as server:` and
    `await server.listen(listener)`."""

    def __init__(self, handler: Handler, limits: HttpLimits | None = None) -> None:
        self.handler = handler
        self.limits = limits or HttpLimits()
        self._tg: TaskGroup | None = None
        self._listeners: list[Listener[Any]] = []
        self._connections = 0
        self._drained = anyio.Event()
        self._idle_waits: set[anyio.CancelScope] = set()
        self._closing = False
        self.requests = 0
        """Requests handled, for tests and diagnostics."""

    async def __aenter__(self) -> HttpServer:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.close()
        assert self._tg is not None
        return await self._tg.__aexit__(exc_type, exc, tb)

    async def listen(self, listener: Listener[Any], context: object = None) -> None:
        """Start accepting on `listener` (the server owns and closes it); every request that
        comes in on it carries `context`."""
        if self._tg is None or self._closing:
            await listener.aclose()
            raise RuntimeError("the server is not running")
        self._listeners.append(listener)
        self._tg.start_soon(self._accept, listener, context)

    async def unlisten(self, listener: Listener[Any]) -> None:
        """Stop accepting on `listener` and close it (connections it accepted go on)."""
        if listener in self._listeners:
            self._listeners.remove(listener)
        with anyio.CancelScope(shield=True):
            await listener.aclose()

    async def close(self) -> None:
        """Stop accepting, give requests in progress `close_grace`, then cancel the rest."""
        if self._closing:
            return
        self._closing = True
        with anyio.CancelScope(shield=True):
            for listener in self._listeners:
                await listener.aclose()
            for waiting in self._idle_waits:
                waiting.cancel()  # idle keep-alive connections close at once
            with anyio.move_on_after(self.limits.close_grace):
                if self._connections:
                    await self._drained.wait()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    # --- connections --------------------------------------------------------------------------

    async def _accept(self, listener: Listener[Any], context: object) -> None:
        assert self._tg is not None
        tg = self._tg

        async def on_connection(stream: ByteStream) -> None:
            if self._connections >= self.limits.max_connections:
                await stream.aclose()
                return
            self._connections += 1
            try:
                await self._serve_connection(stream, context)
            finally:
                self._connections -= 1
                if self._closing and not self._connections:
                    self._drained.set()
                with anyio.CancelScope(shield=True):
                    await stream.aclose()

        try:
            await listener.serve(on_connection, task_group=tg)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # closed by close()

    async def _serve_connection(self, stream: ByteStream, context: object) -> None:
        limits = self.limits
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        while not self._closing:
            try:
                request = await self._read_request(conn, stream, context)
            except _Reject as exc:
                await self._refuse(conn, stream, exc.status, str(exc))
                return
            if request is None:
                return
            responder = Responder(conn, stream, limits.send_timeout, request.method == "HEAD")
            self.requests += 1
            try:
                await self.handler(request, responder)
            except ClientGone:
                return
            except Exception:
                log.exception("the gateway's handler failed on %s %s", request.method, request.path)
                if not responder.started:
                    await self._refuse(conn, stream, 500, "internal error")
                return
            if not responder.finished or conn.our_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_request(
        self, conn: h11.Connection, stream: ByteStream, context: object
    ) -> Request | None:
        """The next whole request, `None` when the client is done, or `_Reject`."""
        limits = self.limits
        head: h11.Request | None = None
        body = bytearray()
        deadline: float | None = None  # set by the request's first byte
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Reject(exc.error_status_hint, "malformed request") from None
            if event is h11.NEED_DATA:
                now = anyio.current_time()
                timeout = limits.idle_timeout if deadline is None else deadline - now
                data = b""
                with anyio.move_on_after(max(0.0, timeout)) as waited:
                    if deadline is None:
                        if self._closing:
                            return None
                        self._idle_waits.add(waited)
                    try:
                        data = await stream.receive(64 * 1024)
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        data = b""
                    finally:
                        self._idle_waits.discard(waited)
                if waited.cancelled_caught:
                    if deadline is None:
                        return None  # an idle keep-alive connection: just close it
                    raise _Reject(408, "the request did not arrive in time")
                if deadline is None:
                    deadline = anyio.current_time() + limits.request_timeout
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                if len(event.headers) > limits.max_headers:
                    raise _Reject(431, "too many headers")
                length = _content_length(event.headers)
                if length is not None and length > limits.max_body_bytes:
                    raise _Reject(413, "the request body is too large")
                head = event
                if conn.they_are_waiting_for_100_continue:
                    go_on = h11.InformationalResponse(status_code=100, headers=[])
                    await stream.send(conn.send(go_on) or b"")
                continue
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > limits.max_body_bytes:
                    raise _Reject(413, "the request body is too large")
                continue
            if isinstance(event, h11.EndOfMessage):
                assert head is not None
                return Request(
                    method=head.method.decode("ascii", errors="replace"),
                    target=head.target.decode("ascii", errors="replace"),
                    headers=[
                        (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in head.headers
                    ],
                    body=bytes(body),
                    context=context,
                )
            if isinstance(event, h11.ConnectionClosed):
                return None
            return None  # PAUSED, or an event a server never sees

    async def _refuse(
        self, conn: h11.Connection, stream: ByteStream, status: int, why: str
    ) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = (why + "\n").encode()
        headers = [
            ("content-type", "text/plain"),
            ("content-length", str(len(body))),
            ("connection", "close"),
        ]
        try:
            data = conn.send(h11.Response(status_code=status, headers=headers))
            data = (data or b"") + (conn.send(h11.Data(data=body)) or b"")
            data += conn.send(h11.EndOfMessage()) or b""
            with anyio.fail_after(self.limits.send_timeout):
                await stream.send(data)
        except (h11.LocalProtocolError, TimeoutError, anyio.BrokenResourceError, OSError):
            pass
        except anyio.ClosedResourceError:
            pass


def _content_length(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
