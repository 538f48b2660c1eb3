"""A small, strict HTTP/1.1 server: h11 over anyio, for the model gateway.

Theory of operation
-------------------
`HttpServer.listen(listener)` accepts connections on an anyio listener (any number of listeners
may share one server: the default loopback one, and one per run — a loopback socket of its
own, or one made inside a sandboxed child's network namespace). Each connection is one task in
the server's task group, which the server owns; `close()` stops accepting, lets requests in
progress finish for a grace, then cancels what is left.

A connection reads one request at a time (keep-alive, no pipelining: h11 holds a pipelined
request until the response before it is done), in two steps:

1. **The head.** When it is whole, the server's `admit` callback decides, from the request
   line and headers alone, whether the request may go on. It answers either an `Answer` (a
   refusal, or a probe's reply), which is sent at once and the connection closed, its body
   never read; or the `Quota` of the tenant (a run) the request belongs to.
2. **The body**, read only once admitted, bounded by that quota: no more than its
   `max_body_bytes` per request (413, checked against `Content-Length` before reading and
   while reading a chunked body), and all of its requests in progress together hold no more
   than its `max_held_bytes` (a declared length is reserved before the first byte is read;
   past the bound, 429). The bytes stay reserved until the handler is done with the request.
   Then the handler gets the whole `Request` and a `Responder` that sends either a whole
   response or a stream (chunked; used for server-sent events).

So a client that cannot show a token is answered from its head, holding no body bytes, and a
client that can is bounded by its own run's limits, not by what the server holds for all.

Connections are counted per tenant too. A connection on a listener registered with a quota
(a run's own listener) belongs to it from the accept; one on a shared listener belongs to no
one ("unclaimed", at most `max_unclaimed` of them) until an admitted request claims it for
that request's quota. Each quota holds at most its `max_connections`, the server at most
`max_connections` in all. When a pool is full, its oldest connection that is not serving a
request (idle between requests, unclaimed, or only closing after a refusal) is closed to make
room; if there is none, the new connection is refused (closed at the accept, or 429 at the
claim). So one run that opens hundreds of connections fills its own pool and the unclaimed
one, never a sibling's.

Time is bounded everywhere: a request's head must be whole within `header_timeout` of its
first byte (a fresh connection's first request: of the accept; a connection that never sends
anything is closed then), its body within `body_timeout` of the head (408 past either); an
idle keep-alive connection is closed after `idle_timeout`; each write to a client that does
not read is bounded by `send_timeout`. After a refusal sent before the body was read, the
server stops writing and discards what the client still sends for at most `linger`, so the
client reads the refusal rather than a reset, holding none of it.

A handler (or `admit`) that raises gets a 500 (with no detail) if nothing was sent yet,
else the connection is closed. Malformed HTTP gets a 400 and the connection is closed. `held_bytes`
(and `peak_held_bytes`) count the body bytes buffered at this moment across all connections:
what the server holds for its clients beyond a bounded head per connection.
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

from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
"""The most one receive reads (and so the most h11 holds unparsed per connection)."""


@dataclass(frozen=True)
class HttpLimits:
    max_head_bytes: int = 64 * 1024
    max_headers: int = 100
    header_timeout: float = 10.0
    """A request's head must be whole within this of its first byte (408); a fresh
    connection's first request, of the accept (a connection that sends nothing is closed)."""
    body_timeout: float = 30.0
    """A request's body must be whole within this of its head (408)."""
    idle_timeout: float = 60.0
    """An idle keep-alive connection is closed after this."""
    send_timeout: float = 30.0
    linger: float = 1.0
    """After a refusal sent before the body was read: how long what the client still sends
    is read and dropped, so it reads the refusal rather than a connection reset."""
    max_connections: int = 512
    """Connections at once, in all; past it a new one is closed at once."""
    max_unclaimed: int = 64
    """Connections on a shared listener that no admitted request has claimed yet."""
    close_grace: float = 5.0
    """How long requests in progress may run on after `close()`."""


@dataclass(eq=False)
class Quota:
    """What one tenant of the server (a run) may hold at once, and what it holds now."""

    max_connections: int = 16
    max_body_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """The largest body one request may have."""
    max_held_bytes: int = 64 * 1024 * 1024
    """The most body bytes all of its requests in progress may hold together."""
    connections: int = 0
    reserved_bytes: int = 0
    """Body bytes reserved by its requests in progress (declared lengths, chunks read)."""
    refused: int = 0
    """Connections and requests refused for one of these limits."""

    def __post_init__(self) -> None:
        if min(self.max_connections, self.max_body_bytes) < 1:
            raise ValueError("a quota allows at least one connection and a one-byte body")
        if self.max_held_bytes < self.max_body_bytes:
            raise ValueError(
                f"a quota's held bytes ({self.max_held_bytes}) must fit its largest body "
                f"({self.max_body_bytes})"
            )


@dataclass(frozen=True)
class Head:
    """A request's line and headers, before any of its body is read."""

    method: str
    target: str
    """The request target as sent (path and query)."""
    headers: Sequence[tuple[str, str]]
    """Names lower-cased, values decoded as Latin-1."""
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


@dataclass(frozen=True)
class Request(Head):
    """A whole, admitted request."""

    body: bytes | bytearray = b""


@dataclass(frozen=True)
class Answer:
    """A response sent from the head alone; the connection is closed after it."""

    status: int
    body: bytes = b""
    headers: Sequence[tuple[str, str]] = ()


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
        # One write for the whole response: each write to a loopback socket wakes the client,
        # and a second one costs as much again (a model call's answer, on every call's path).
        self.started = True
        events: list[h11.Event] = [
            h11.Response(status_code=status, headers=[*headers, ("content-length", str(len(body)))])
        ]
        if body and not self._head:
            events.append(h11.Data(data=body))
        events.append(h11.EndOfMessage())
        await self._put(*events)
        self.finished = True

    async def start(self, status: int, headers: Sequence[tuple[str, str]] = ()) -> None:
        """Send the status line and headers; without a content-length the body is chunked."""
        self.started = True
        await self._put(h11.Response(status_code=status, headers=list(headers)))

    async def write(self, data: bytes) -> None:
        await self._put(h11.Data(data=data))

    async def end(self) -> None:
        await self._put(h11.EndOfMessage())
        self.finished = True

    async def _put(self, *events: h11.Event) -> None:
        data = b"".join(self._conn.send(event) or b"" for event in events)
        if not data:
            return
        try:
            with anyio.fail_after(self._send_timeout):
                await self._stream.send(data)
        except TimeoutError:
            raise ClientGone(f"the client did not read for {self._send_timeout:g}s") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise ClientGone(f"the client went away ({type(exc).__name__})") from None


Admit = Callable[[Head], "Quota | Answer"]
"""Decides from a request's head: its tenant's quota, or an answer sent at once."""
Handler = Callable[[Request, Responder], Awaitable[None]]


class _Reject(Exception):
    """A request the server itself refuses (a plain-text answer, then the connection closes)."""

    def __init__(self, status: int, reason: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(reason)
        body = (reason + "\n").encode()
        self.answer = Answer(status, body, [("content-type", "text/plain"), *headers])


_RETRY = ("retry-after", "1")


class _Conn:
    """One connection's place in a pool (see the module docstring)."""

    __slots__ = ("busy", "joined", "quota", "scope")

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.quota: Quota | None = None
        """Its tenant, or `None` while unclaimed."""
        self.joined = False
        self.busy = False
        """Serving an admitted request (not to be closed to make room)."""


class _Held:
    """What one request's body holds: bytes reserved on its quota, bytes buffered."""

    __slots__ = ("buffered", "quota", "reserved")

    def __init__(self) -> None:
        self.quota: Quota | None = None
        self.reserved = 0
        self.buffered = 0


class HttpServer:
    """See the module docstring. Use as `async with HttpServer(admit, handler) as server:` and
    `await server.listen(listener)`."""

    def __init__(self, admit: Admit, handler: Handler, limits: HttpLimits | None = None) -> None:
        self.admit = admit
        self.handler = handler
        self.limits = limits or HttpLimits()
        self._tg: TaskGroup | None = None
        self._listeners: list[Listener[Any]] = []
        self._connections = 0
        self._pools: dict[Quota | None, dict[_Conn, None]] = {}
        self._drained = anyio.Event()
        self._idle_waits: set[anyio.CancelScope] = set()
        self._closing = False
        self.requests = 0
        """Requests handled, for tests and diagnostics."""
        self.held_bytes = 0
        """Body bytes buffered now, across every connection."""
        self.peak_held_bytes = 0
        self.refused_connections = 0
        """Connections closed at the accept (a full pool) or to make room for a newer one."""

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

    @property
    def connections(self) -> int:
        return self._connections

    @property
    def unclaimed(self) -> int:
        """Connections on shared listeners that no request has claimed yet."""
        return len(self._pools.get(None, ()))

    async def listen(
        self, listener: Listener[Any], context: object = None, quota: Quota | None = None
    ) -> None:
        """Start accepting on `listener` (the server owns and closes it); every request that
        comes in on it carries `context`; with `quota`, its connections belong to that tenant
        from the accept."""
        if self._tg is None or self._closing:
            await listener.aclose()
            raise RuntimeError("the server is not running")
        self._listeners.append(listener)
        self._tg.start_soon(self._accept, listener, context, quota)

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

    # --- connections and their pools ----------------------------------------------------------

    async def _accept(self, listener: Listener[Any], context: object, home: Quota | None) -> None:
        assert self._tg is not None
        tg = self._tg

        async def on_connection(stream: ByteStream) -> None:
            with anyio.CancelScope() as scope:
                member = _Conn(scope)
                if self._connections >= self.limits.max_connections or not self._join(member, home):
                    self.refused_connections += 1
                    if home is not None:
                        home.refused += 1
                    with anyio.CancelScope(shield=True):
                        await stream.aclose()
                    return
                self._connections += 1
                try:
                    await self._serve_connection(stream, context, member)
                finally:
                    self._leave(member)
                    self._connections -= 1
                    if self._closing and not self._connections:
                        self._drained.set()
                    with anyio.CancelScope(shield=True):
                        await stream.aclose()

        try:
            await listener.serve(on_connection, task_group=tg)
        except* (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # closed by close() (a multi-listener's arrives in a group)

    def _join(self, member: _Conn, quota: Quota | None) -> bool:
        """Put `member` in `quota`'s pool (`None`: the unclaimed one), closing the pool's
        oldest connection that serves no request if it is full; `False` if none can go."""
        pool = self._pools.setdefault(quota, {})
        limit = self.limits.max_unclaimed if quota is None else quota.max_connections
        if len(pool) >= limit:
            victim = next((c for c in pool if not c.busy), None)
            if victim is None:
                return False
            self._leave(victim)
            victim.scope.cancel()
            self.refused_connections += 1
        pool[member] = None
        member.quota = quota
        member.joined = True
        if quota is not None:
            quota.connections += 1
        return True

    def _leave(self, member: _Conn) -> None:
        if not member.joined:
            return
        member.joined = False
        pool = self._pools.get(member.quota)
        if pool is not None:
            pool.pop(member, None)
            if not pool:
                del self._pools[member.quota]
        if member.quota is not None:
            member.quota.connections -= 1

    def _claim(self, member: _Conn, quota: Quota) -> None:
        """The connection counts against `quota` from this admitted request on (a request of
        another tenant on it moves it, within that tenant's limit)."""
        if member.joined and member.quota is quota:
            return
        self._leave(member)
        if not self._join(member, quota):
            quota.refused += 1
            why = f"too many connections for this run (at most {quota.max_connections})"
            raise _Reject(429, why, [_RETRY])

    # --- one connection -----------------------------------------------------------------------

    async def _serve_connection(self, stream: ByteStream, context: object, member: _Conn) -> None:
        limits = self.limits
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        first = True
        while not self._closing:
            held = _Held()
            try:
                try:
                    request = await self._read_request(conn, stream, context, member, first, held)
                except _Reject as exc:
                    request = exc.answer  # (out of the except block: its frames, body, go)
                if request is None:
                    return
                if isinstance(request, Answer):
                    # Nothing of it is held while it is answered, and a connection that is
                    # only closing may make room for a newer one of its tenant.
                    self._release(held)
                    member.busy = False
                    await self._answer(conn, stream, request)
                    return
                first = False
                responder = Responder(conn, stream, limits.send_timeout, request.method == "HEAD")
                self.requests += 1
                try:
                    await self.handler(request, responder)
                except ClientGone:
                    return
                except Exception:
                    log.exception(
                        "the gateway's handler failed on %s %s", request.method, request.path
                    )
                    if not responder.started:
                        await self._answer(conn, stream, Answer(500, b"internal error\n"))
                    return
                request = None  # its body is not kept while the connection idles
            finally:
                member.busy = False
                self._release(held)
            if not responder.finished or conn.our_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_request(
        self,
        conn: h11.Connection,
        stream: ByteStream,
        context: object,
        member: _Conn,
        first: bool,
        held: _Held,
    ) -> Request | Answer | None:
        """The next whole admitted request, an `Answer` to send from its head, `None` when the
        client is done, or `_Reject`."""
        limits = self.limits
        event = await self._read_head(conn, stream, first)
        if event is None:
            return None
        if len(event.headers) > limits.max_headers:
            raise _Reject(431, "too many headers")
        head = Head(
            method=event.method.decode("ascii", errors="replace"),
            target=event.target.decode("ascii", errors="replace"),
            headers=[(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in event.headers],
            context=context,
        )
        try:
            verdict = self.admit(head)
        except Exception:
            log.exception("the gateway's admission failed on %s %s", head.method, head.path)
            raise _Reject(500, "internal error") from None
        if isinstance(verdict, Answer):
            return verdict
        quota = verdict
        self._claim(member, quota)
        member.busy = True
        # The body, within the quota: a declared length is reserved before any of it is read.
        length = _content_length(event.headers)
        if length is not None:
            self._reserve(quota, held, length)
        if conn.they_are_waiting_for_100_continue:
            go_on = h11.InformationalResponse(status_code=100, headers=[])
            try:
                with anyio.fail_after(limits.send_timeout):
                    await stream.send(conn.send(go_on) or b"")
            except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return None
        body = await self._read_body(conn, stream, quota, held)
        if body is None:
            return None
        return Request(
            method=head.method,
            target=head.target,
            headers=head.headers,
            context=context,
            body=body,
        )

    async def _read_head(
        self, conn: h11.Connection, stream: ByteStream, first: bool
    ) -> h11.Request | None:
        """The request's head; `None` when the client is quiet until its deadline, closed, or
        sent what a server never sees."""
        limits = self.limits
        # A fresh connection must send it within header_timeout of the accept; a kept-alive
        # one may idle first, and then has header_timeout from the first byte.
        deadline = anyio.current_time() + limits.header_timeout if first else None
        spoke = False
        while True:
            event = self._next(conn)
            if event is h11.NEED_DATA:
                data, spoke = await self._receive(stream, deadline, spoke, "head")
                if data is None:
                    return None  # quiet until its deadline, or closed: just close it
                if deadline is None:
                    deadline = anyio.current_time() + limits.header_timeout
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                return event
            return None  # ConnectionClosed, PAUSED, or an event a server never sees

    async def _read_body(
        self, conn: h11.Connection, stream: ByteStream, quota: Quota, held: _Held
    ) -> bytearray | None:
        """The request's whole body within body_timeout, each chunk reserved against `quota`
        as it comes; `None` when the client went quiet or closed."""
        deadline = anyio.current_time() + self.limits.body_timeout
        body = bytearray()
        while True:
            got = self._next(conn)
            if got is h11.NEED_DATA:
                data, _ = await self._receive(stream, deadline, True, "body")
                if data is None:
                    return None
                conn.receive_data(data)
                continue
            if isinstance(got, h11.Data):
                size = len(body) + len(got.data)
                if size > held.reserved:  # a chunked body: reserve as it comes
                    self._reserve(quota, held, size - held.reserved, total=size)
                body += got.data
                held.buffered += len(got.data)
                self.held_bytes += len(got.data)
                self.peak_held_bytes = max(self.peak_held_bytes, self.held_bytes)
                continue
            if isinstance(got, h11.EndOfMessage):
                return body
            return None

    def _next(self, conn: h11.Connection) -> Any:
        try:
            return conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise _Reject(exc.error_status_hint, "malformed request") from None

    async def _receive(
        self, stream: ByteStream, deadline: float | None, spoke: bool, part: str
    ) -> tuple[bytes | None, bool]:
        """The next bytes (`None` at the end, or when a client that has not begun a request
        stays quiet until `deadline`, else the idle timeout); `_Reject(408)` when a request
        begun does not arrive by `deadline`."""
        now = anyio.current_time()
        timeout = self.limits.idle_timeout if deadline is None else deadline - now
        data = b""
        with anyio.move_on_after(max(0.0, timeout)) as waited:
            if not spoke:
                if self._closing:
                    return None, spoke
                self._idle_waits.add(waited)
            try:
                data = await stream.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                data = b""
            finally:
                self._idle_waits.discard(waited)
        if waited.cancelled_caught:
            if not spoke:
                return None, spoke
            raise _Reject(408, f"the request {part} did not arrive in time")
        if not data:
            return None, spoke
        return data, True

    def _reserve(self, quota: Quota, held: _Held, more: int, total: int | None = None) -> None:
        size = more if total is None else total
        if size > quota.max_body_bytes:
            quota.refused += 1
            raise _Reject(
                413, f"the request body is too large (at most {quota.max_body_bytes} bytes)"
            )
        if quota.reserved_bytes + more > quota.max_held_bytes:
            quota.refused += 1
            raise _Reject(
                429,
                f"this run's requests in progress hold too many bytes "
                f"(at most {quota.max_held_bytes})",
                [_RETRY],
            )
        quota.reserved_bytes += more
        held.quota = quota
        held.reserved += more

    def _release(self, held: _Held) -> None:
        if held.quota is not None:
            held.quota.reserved_bytes -= held.reserved
        self.held_bytes -= held.buffered
        held.reserved = held.buffered = 0

    async def _answer(self, conn: h11.Connection, stream: ByteStream, answer: Answer) -> None:
        """Send `answer` and close: what the client still sends of its request is dropped
        for at most `linger` (see the module docstring)."""
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [
            *answer.headers,
            ("content-length", str(len(answer.body))),
            ("connection", "close"),
        ]
        try:
            data = conn.send(h11.Response(status_code=answer.status, headers=headers)) or b""
            if answer.body:
                data += conn.send(h11.Data(data=answer.body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
            with anyio.fail_after(self.limits.send_timeout):
                await stream.send(data)
        except (h11.LocalProtocolError, TimeoutError, anyio.BrokenResourceError, OSError):
            return
        except anyio.ClosedResourceError:
            return
        if _unread(conn):
            await self._linger(stream)

    async def _linger(self, stream: ByteStream) -> None:
        with anyio.move_on_after(self.limits.linger):
            try:
                await stream.send_eof()
                while True:
                    await stream.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            except OSError:
                pass


def _unread(conn: h11.Connection) -> bool:
    """Whether the client may still be sending the request just answered (what h11 already
    holds of it is dropped here)."""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return True
            if not isinstance(event, h11.Request | h11.Data):
                return False  # its end, the connection's, or a pipelined request's pause
    except h11.RemoteProtocolError:
        return True


def _content_length(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
