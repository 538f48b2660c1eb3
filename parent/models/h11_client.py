"""The HTTP/1.1 client the model providers post with: h11 over anyio, connections kept alive.

Why not httpx: a turn is one JSON POST and its JSON answer, and on loopback httpx spends
0.4-0.5 ms a request on it (httpcore's cancel scope and lock per read and write and its pool's
bookkeeping; the client's URL, header and cookie models), where the exchange itself, h11 both
ways and one write and one or two reads, costs under 0.2 ms. The model gateway pays that on
every call it forwards, and it was most of what the gateway added. httpx stays for what this
does not do: a client a user hands a model (`client=`), and any environment that names a proxy
(`_http.py` chooses).

What it does, and no more: `post()` sends one request over HTTP/1.1, on TCP or on TLS with the
verifying context it is given, and returns the whole answer (`Reply`). One request per
connection at a time, no pipelining, no HTTP/2, no proxies, no redirects, no cookies, no
compression asked for. Each origin keeps its idle connections (at most `max_idle` in all, each
for at most `idle_seconds`). A request takes one the server has not closed meanwhile (its socket
has nothing to read) or opens one. A kept connection found closed before any byte of the answer
(the server hung up while it idled) is replaced once by a fresh one. Every other failure is the
request's, raised as httpx's exception of the same meaning (`ConnectError`, `ReadTimeout`,
`RemoteProtocolError`, ...), so `_http.py` maps both clients' failures in one place. An answer
whose body passes `MAX_ANSWER_BYTES` is refused (`DecodingError`), its connection closed.

Timeouts are httpx's: `connect_timeout` bounds the connection (and TLS handshake), `io_timeout`
each write and each read. A connection goes back to the idle list only when its answer was read
to the end and both sides may keep it; a failure or a cancellation closes it. `aclose()` closes
the idle connections; one in use when it is called is closed when its request ends.
"""

from __future__ import annotations

import select
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit

import anyio
import h11
import httpx
from anyio.abc import ByteStream, SocketAttribute

from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES

Origin = tuple[str, str, int]

_CHUNK = 64 * 1024
_MAX_HEAD_BYTES = 256 * 1024
MAX_ANSWER_BYTES = 2 * DEFAULT_MAX_MESSAGE_BYTES
"""The most of an answer's body held: twice the most a child may be sent in one message. A
server that sends more fails the request (`DecodingError`: not retried) instead of filling the
parent's memory."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_USER_AGENT = "tether"
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
"""What a closed or reset connection raises on a read or write."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    """Lower-cased names; of a repeated header, the last."""
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300


class _Stale(Exception):
    """A kept connection was closed by the server before any byte of the answer."""


class _Connection:
    def __init__(self, origin: Origin, stream: ByteStream) -> None:
        self.origin = origin
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD_BYTES)
        self.idle_since = 0.0

    def closed_by_peer(self) -> bool:
        """Whether the socket has something to read while no request is out on it: the server
        closed it (or broke the protocol); either way it is not to be used again."""
        sock = self.stream.extra(SocketAttribute.raw_socket, None)
        if sock is None:
            return True
        try:
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))  # EOF, a reset, or bytes nobody asked for
        except (OSError, ValueError):
            return True

    async def close(self) -> None:
        await anyio.aclose_forcefully(self.stream)


def _fail(exc: BaseException, kind: type[httpx.TransportError]) -> NoReturn:
    raise kind(str(exc) or type(exc).__name__) from exc


class H11Client:
    def __init__(
        self, *, ssl_context: ssl.SSLContext, max_idle: int = 20, idle_seconds: float = 5.0
    ) -> None:
        self._ssl = ssl_context
        self._max_idle = max_idle
        self._idle_seconds = idle_seconds
        self._idle: dict[Origin, list[_Connection]] = {}
        self._closed = False

    @property
    def is_closed(self) -> bool:
        return self._closed

    def idle_connections(self) -> int:
        return sum(len(kept) for kept in self._idle.values())

    async def __aenter__(self) -> H11Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        with anyio.CancelScope(shield=True):
            for kept in idle.values():
                for conn in kept:
                    await conn.close()

    async def post(
        self,
        url: str,
        *,
        content: bytes,
        headers: Mapping[str, str],
        io_timeout: float | None,
        connect_timeout: float | None,
    ) -> Reply:
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        origin, host_header, target = _parse(url)
        head = {"user-agent": _USER_AGENT} | {k.lower(): v for k, v in headers.items()}
        head |= {"host": host_header, "content-length": str(len(content))}
        try:
            request = h11.Request(method="POST", target=target, headers=list(head.items()))
        except h11.LocalProtocolError:
            # h11's words would quote the header, and the header may be a key.
            raise httpx.LocalProtocolError("a request header is malformed") from None
        kept = await self._take_idle(origin)
        if kept is not None:
            try:
                return await self._exchange(kept, request, content, io_timeout, kept=True)
            except _Stale:
                pass
        conn = await self._connect(origin, connect_timeout)
        return await self._exchange(conn, request, content, io_timeout, kept=False)

    # --- connections ------------------------------------------------------------------------

    async def _take_idle(self, origin: Origin) -> _Connection | None:
        kept = self._idle.get(origin)
        now = time.monotonic()
        while kept:
            conn = kept.pop()
            if now - conn.idle_since < self._idle_seconds and not conn.closed_by_peer():
                return conn
            await conn.close()
        return None

    async def _connect(self, origin: Origin, seconds: float | None) -> _Connection:
        scheme, host, port = origin
        tls = scheme == "https"
        try:
            with anyio.fail_after(seconds):
                stream: ByteStream = (
                    await anyio.connect_tcp(
                        host,
                        port,
                        ssl_context=self._ssl,
                        tls_hostname=host,
                        tls_standard_compatible=False,
                    )
                    if tls
                    else await anyio.connect_tcp(host, port)
                )
        except TimeoutError as exc:
            _fail(exc, httpx.ConnectTimeout)
        except (OSError, ssl.SSLError, anyio.BrokenResourceError) as exc:
            _fail(exc, httpx.ConnectError)
        return _Connection(origin, stream)

    async def _keep(self, conn: _Connection) -> None:
        """After an answer read to the end: keep the connection for the next request if both
        sides may and there is room, else close it."""
        h = conn.h11
        if self._closed or h.our_state is not h11.DONE or h.their_state is not h11.DONE:
            await conn.close()
            return
        h.start_next_cycle()
        now = time.monotonic()
        for origin, kept in list(self._idle.items()):
            for old in [c for c in kept if now - c.idle_since >= self._idle_seconds]:
                kept.remove(old)
                await old.close()
            if not kept:
                del self._idle[origin]
        if self.idle_connections() >= self._max_idle:
            await conn.close()
            return
        conn.idle_since = now
        self._idle.setdefault(conn.origin, []).append(conn)

    # --- one exchange -----------------------------------------------------------------------

    async def _exchange(
        self,
        conn: _Connection,
        request: h11.Request,
        content: bytes,
        seconds: float | None,
        *,
        kept: bool,
    ) -> Reply:
        done = False
        try:
            await self._send(conn, request, content, seconds, kept=kept)
            reply = await self._receive(conn, seconds, kept=kept)
            done = True
        finally:
            if not done:
                with anyio.CancelScope(shield=True):
                    await conn.close()
        await self._keep(conn)
        return reply

    async def _send(
        self,
        conn: _Connection,
        request: h11.Request,
        content: bytes,
        seconds: float | None,
        *,
        kept: bool,
    ) -> None:
        h = conn.h11
        data = h.send(request) or b""
        if content:
            data += h.send(h11.Data(data=content)) or b""
        data += h.send(h11.EndOfMessage()) or b""
        try:
            with anyio.fail_after(seconds):
                await conn.stream.send(data)
        except TimeoutError as exc:
            _fail(exc, httpx.WriteTimeout)
        except _GONE as exc:
            if kept:
                raise _Stale from exc
            _fail(exc, httpx.WriteError)

    async def _receive(self, conn: _Connection, seconds: float | None, *, kept: bool) -> Reply:
        silent = kept  # a kept connection that ends before any byte of the answer is stale
        status = 0
        headers: dict[str, str] = {}
        body: list[bytes] = []
        size = 0
        while True:
            event = await _next_event(conn, seconds, stale=silent)
            silent = False
            if isinstance(event, h11.Response):
                status = event.status_code
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
                size += len(event.data)
                if size > MAX_ANSWER_BYTES:
                    raise httpx.DecodingError(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return Reply(status, headers, b"".join(body))
            elif not isinstance(event, h11.InformationalResponse):
                raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} in an answer")


async def _next_event(conn: _Connection, seconds: float | None, *, stale: bool) -> Any:
    """The next h11 event, reading as needed. A connection that ends before the answer does is
    a `RemoteProtocolError`, or `_Stale` if `stale` (a kept connection, nothing heard yet)."""
    h = conn.h11
    while True:
        try:
            event = h.next_event()
        except h11.RemoteProtocolError as exc:
            _fail(exc, httpx.RemoteProtocolError)
        if event is not h11.NEED_DATA:
            if isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection mid-answer")
            return event
        try:
            with anyio.fail_after(seconds):
                chunk = await conn.stream.receive(_CHUNK)
        except TimeoutError as exc:
            _fail(exc, httpx.ReadTimeout)
        except anyio.EndOfStream:
            if stale:
                raise _Stale from None
            chunk = b""
        except _GONE as exc:
            if stale:
                raise _Stale from exc
            _fail(exc, httpx.ReadError)
        h.receive_data(chunk)


def _parse(url: str) -> tuple[Origin, str, str]:
    """(origin, the Host header, the request target) of an http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise httpx.InvalidURL(str(exc)) from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"cannot send to a {parts.scheme!r} URL")
    host = parts.hostname
    if not host:
        raise httpx.InvalidURL("the URL names no host")
    named = f"[{host}]" if ":" in host else host
    if port is not None:
        named = f"{named}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (parts.scheme, host, port or _DEFAULT_PORTS[parts.scheme]), named, target
