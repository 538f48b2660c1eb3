"""One run's egress proxy: an HTTP proxy in the parent, the run's only way out.

Theory of operation
-------------------
`EgressProxy` serves the listening sockets it is given (`serve`): one the sandbox made inside
the child's private network namespace and passed back (as root), or a loopback port of the
run's own (`listen_loopback`: without root, where the sandbox's Landlock rule lets the child
connect to that port only, and at the process level). It owns a task group (an async context
manager, entered by the run), one task per connection.

A connection's first request is read with h11 (its head within `header_timeout` of the
accept, at most `max_head_bytes`), and is one of:

- `CONNECT host:port` (TLS, or anything else tunnelled): the target is checked against the
  run's policy (`policy.decide`: the host and the port; an IP literal only when listed),
  resolved by the parent (`addresses.py`; the child has no resolver), every resolved address
  checked (never loopback, link-local or this host's own unless that literal is listed), and
  the connection made to a checked address — pinned, never resolved again. Then
  `200 Connection established`, and the tunnel relays bytes both ways, except that the first
  bytes the client sends are read before any is relayed: a TLS ClientHello whose server name
  (SNI) is not the `CONNECT` host, or a plain HTTP request whose `Host` is not (a `CONNECT`
  inside the tunnel among them), ends the tunnel there — a TLS `access_denied` alert, or a
  403 — so a tunnel opened to an allowed name cannot be steered to another virtual host;
  past those first bytes the tunnel is spliced socket to socket (`sockets.splice_relay`);
- an absolute-form request (`GET http://host[:port]/path`): the same checks (port 80 by
  default), and its `Host` header must name the same host; it is relayed in origin form
  with the hop-by-hop headers removed, streamed both ways; a kept-alive connection may carry
  more requests, each checked on its own (the upstream connection is reused for the same
  target); a response body of declared length from `SPLICED_BODY` up is spliced too, and
  that connection ends after it;
- anything else is a 400 that says what the proxy is.

For a destination whose policy entry carries a credential, the `CONNECT` is not a tunnel: the
proxy terminates the child's TLS with a leaf certificate of the run's CA (`tls.RunCA`; the
child trusts that CA through the variables `seat.py` sets), checks each request's `Host`,
replaces the credential header with the real one (the value read from the parent's own
environment, held here and nowhere else), asks for an unencoded response and overwrites the
secret wherever the response repeats it (`scrub.py`), and re-encrypts to the real server,
verifying it against the upstream trust (the system's, or a test's CA). Credentials travel
over TLS only: plain HTTP to such a destination is refused.

Every decision is an event (`NetEvent`: `net.allowed` with the bytes each way once the tunnel
or request is done, `net.denied` with the reason), and a refusal reaches the child as an HTTP
answer it can read — 403 with the policy's reason, 502 when the parent could not resolve or
connect, 503 past the connection limit — never a hang.

Bounds, per run: `policy.max_connections` at once (past it a new connection is answered 503
and closed: a child that opens and abandons connections fills its own run's count, and each
is closed within `header_timeout` if it sends no request, or after `idle_timeout` of silence
both ways); bytes sent out and received in all (`policy.max_bytes_up` / `_down`): past either
the proxy cuts every connection, refuses the rest, and tells the run (`on_limit`), which ends
as `net_limit` (a spliced chunk may pass the limit by at most 1 MiB). What it holds per
connection is one read (`CHUNK`) per direction and h11's bounded head, or a spliced chunk in a
kernel pipe per direction (in worker threads of the run's own, two per tunnel at most);
nothing is buffered whole. `close()` revokes the proxy: the listeners close,
every connection is cut, and a request that still arrives is refused — a credential's
capability ends with the run.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import h11
from anyio.abc import ByteStream, TaskGroup
from anyio.streams.tls import TLSStream

from tether.parent.egress.addresses import (
    ResolveError,
    Resolver,
    SystemResolver,
    forbidden,
    own_addresses,
)
from tether.parent.egress.events import NetEvent, Via
from tether.parent.egress.policy import Allowed, Credential, Denied, NetworkPolicy, normalize_host
from tether.parent.egress.scrub import Scrubber
from tether.parent.egress.sockets import Meter, RawStream, accept, connect, splice_relay
from tether.parent.egress.tls import MAX_HELLO, NEED_MORE, RunCA, client_hello_server_name

log = logging.getLogger(__name__)

CHUNK = 256 * 1024
"""The most one read takes (per direction of a connection)."""
SPLICED_BODY = 1 << 20
"""A plain HTTP response body of at least this declared length is relayed socket to socket
(`splice`), and its connection ends after it."""
DENIALS_KEPT = 16
"""Denials a run's report lists (each is an event as well)."""
ACCESS_DENIED_ALERT = b"\x15\x03\x03\x00\x02\x02\x31"
"""A fatal TLS alert, access_denied: what a tunnel whose hello names another host gets."""
ESTABLISHED = h11.Response(status_code=200, headers=[], reason=b"Connection established")
TLS_FAILURES = (TimeoutError, ssl.SSLError, OSError, anyio.EndOfStream, anyio.BrokenResourceError)
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)


@dataclass(frozen=True)
class ProxyLimits:
    header_timeout: float = 10.0
    """A request's head, and a tunnel's TLS hello once begun, must arrive within this."""
    connect_timeout: float = 10.0
    """Resolving and connecting to the destination, together."""
    idle_timeout: float = 120.0
    """A connection with no byte either way for this long is closed."""
    send_timeout: float = 30.0
    """Each write to a peer that does not read."""
    max_head_bytes: int = 64 * 1024
    max_headers: int = 100


@dataclass
class Traffic:
    """What a run's proxy let through and refused (the result's `network` report)."""

    up: Meter
    """Bytes sent out, in all (its limit: the policy's `max_bytes_up`)."""
    down: Meter
    """Bytes received, in all (`max_bytes_down`)."""
    allowed: int = 0
    denied: int = 0
    active: int = 0
    """Connections open now."""
    peak: int = 0
    denials: list[tuple[str, int, str]] = field(default_factory=list)
    """(host, port, reason) of the first `DENIALS_KEPT` refusals."""
    limits_hit: list[str] = field(default_factory=list)

    @property
    def bytes_up(self) -> int:
        return self.up.used

    @property
    def bytes_down(self) -> int:
        return self.down.used


class _Refused(Exception):
    """A request the proxy answers itself (then closes the connection)."""

    def __init__(self, status: int, reason: str, host: str = "", port: int = 0) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.host = host
        self.port = port


class _Gone(Exception):
    """The peer closed, stopped reading, or broke the protocol: the connection just ends."""


class _Peer:
    """One side of a relayed HTTP exchange: a byte stream and its h11 connection, reads and
    writes bounded in time, every byte counted by `count`."""

    def __init__(
        self,
        stream: ByteStream,
        conn: h11.Connection,
        limits: ProxyLimits,
        count: Callable[[int], None] | None = None,
        sent: Callable[[int], None] | None = None,
    ) -> None:
        self.stream = stream
        self.conn = conn
        self.limits = limits
        self.count = count
        self.sent = sent
        self._held: list[bytes] = []

    async def next_event(self, seconds: float, before_wait: _Peer | None = None) -> Any:
        """The next h11 event, reading as needed; `before_wait`: a peer whose held writes go
        out before this one waits for bytes (`send(..., hold=True)`)."""
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Refused(exc.error_status_hint, f"malformed HTTP: {exc}") from None
            if event is not h11.NEED_DATA:
                return event
            if before_wait is not None:
                await before_wait.flush()
            data = b""
            with anyio.move_on_after(seconds) as waited:
                try:
                    data = await self.stream.receive(CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    data = b""
                except (OSError, ssl.SSLError):
                    data = b""
            if waited.cancelled_caught:
                raise _Gone("timed out")
            if data and self.count is not None:
                self.count(len(data))
            self.conn.receive_data(data)

    async def send(self, event: Any, *, hold: bool = False) -> None:
        """Send an h11 event; `hold`: keep its bytes until the next `send` without it or
        `flush` (a response's head and a small body go out in one write)."""
        try:
            pieces = self.conn.send_with_data_passthrough(event)
        except h11.LocalProtocolError as exc:
            raise _Gone(str(exc)) from None
        if pieces:
            self._held.extend(pieces)
        if not hold:
            await self.flush()

    async def flush(self) -> None:
        held, self._held = self._held, []
        if held:
            # A lone body chunk passes through as it came (no join).
            await self.write(held[0] if len(held) == 1 else b"".join(held))

    async def write(self, data: bytes) -> None:
        try:
            if isinstance(self.stream, RawStream):
                await self.stream.send_within(data, self.limits.send_timeout)
            else:
                with anyio.fail_after(self.limits.send_timeout):
                    await self.stream.send(data)
        except (
            TimeoutError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
            ssl.SSLError,
        ):
            raise _Gone("the peer went away") from None
        if self.sent is not None:
            self.sent(len(data))


class _Prefixed(ByteStream):
    """A byte stream whose first reads return bytes already taken from it."""

    def __init__(self, stream: ByteStream, first: bytes) -> None:
        self._stream = stream
        self._first = first

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._first:
            data, self._first = self._first[:max_bytes], self._first[max_bytes:]
            return data
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


@dataclass
class _Target:
    host: str
    """As the request named it, normalized (`policy.normalize_host`)."""
    port: int
    allowed: Allowed
    addresses: tuple[str, ...]


class EgressProxy:
    """See the module docstring. `secrets`: the value of each credential's variable, by name;
    `ca`: the run's CA when its policy carries a credential; `upstream`: how servers are
    verified behind a credential destination (default: the system's trust)."""

    def __init__(
        self,
        run_id: str,
        policy: NetworkPolicy,
        *,
        resolver: Resolver | None = None,
        upstream: ssl.SSLContext | None = None,
        secrets: Mapping[str, str] | None = None,
        ca: RunCA | None = None,
        on_event: Callable[[NetEvent], None] | None = None,
        on_limit: Callable[[str], None] | None = None,
        limits: ProxyLimits | None = None,
        own: frozenset[str] | None = None,
    ) -> None:
        self.run_id = run_id
        self.policy = policy
        self.resolver = resolver or SystemResolver()
        self.upstream = upstream or ssl.create_default_context()
        self.secrets = dict(secrets or {})
        self.ca = ca
        self.on_event = on_event
        self.on_limit = on_limit
        self.limits = limits or ProxyLimits()
        self.own = own if own is not None else own_addresses()
        self.traffic = Traffic(Meter(policy.max_bytes_up), Meter(policy.max_bytes_down))
        self.revoked: str | None = None
        """Why the proxy refuses everything now (the run ended, or a limit was hit)."""
        self._tg: TaskGroup | None = None
        self._threads: anyio.CapacityLimiter | None = None
        self._listeners: list[socket.socket] = []
        self._scopes: set[anyio.CancelScope] = set()

    async def __aenter__(self) -> EgressProxy:
        # Each tunnel's two directions splice in worker threads of the run's own.
        self._threads = anyio.CapacityLimiter(2 * self.policy.max_connections)
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

    # --- listeners ----------------------------------------------------------------------------

    async def serve(self, sock: socket.socket) -> int:
        """Serve an already-listening TCP socket (the proxy takes it over); its port."""
        port = int(sock.getsockname()[1])
        if self._tg is None or self.revoked is not None:
            sock.close()
            raise RuntimeError("the egress proxy is not running")
        sock.setblocking(False)
        self._listeners.append(sock)
        self._tg.start_soon(self._accept, sock)
        return port

    async def listen_loopback(self) -> int:
        """A listener of this run's own on 127.0.0.1 (a free port); its port."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        return await self.serve(sock)

    async def close(self, why: str = "the run has ended") -> None:
        """Revoke the proxy: close its listeners and cut every connection."""
        self.revoke(why)
        for listener in self._listeners:
            anyio.notify_closing(listener)
            listener.close()
        self._listeners.clear()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        if self.ca is not None:
            self.ca.forget()
        self.secrets.clear()

    def revoke(self, why: str) -> None:
        """Refuse every request from now on and cut the connections open now."""
        if self.revoked is None:
            self.revoked = why
        for scope in list(self._scopes):
            scope.cancel()

    async def _accept(self, listener: socket.socket) -> None:
        assert self._tg is not None
        while True:
            try:
                stream = await accept(listener)
            except (anyio.ClosedResourceError, OSError):
                return  # closed by close()
            self._tg.start_soon(self._connection, stream)

    # --- bookkeeping --------------------------------------------------------------------------

    def _emit(self, event: NetEvent) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # a listener's bug must not break the proxy
                log.exception("egress: an event listener failed")

    def _deny(self, host: str, port: int, reason: str) -> None:
        t = self.traffic
        t.denied += 1
        if len(t.denials) < DENIALS_KEPT:
            t.denials.append((host, port, reason))
        self._emit(NetEvent(self.run_id, "net.denied", host, port, reason=reason))

    def _allowed(self, target: _Target, via: Via, up: int, down: int, address: str) -> None:
        self.traffic.allowed += 1
        self._emit(
            NetEvent(
                self.run_id,
                "net.allowed",
                target.host,
                target.port,
                address=address,
                via=via,
                bytes_up=up,
                bytes_down=down,
            )
        )

    def _hit(self, what: str) -> None:
        if what not in self.traffic.limits_hit:
            self.traffic.limits_hit.append(what)

    def _up(self, n: int) -> None:
        if not self.traffic.up.take(n):
            self._trip(f"net_bytes_up={self.policy.max_bytes_up}")

    def _down(self, n: int) -> None:
        if not self.traffic.down.take(n):
            self._trip(f"net_bytes_down={self.policy.max_bytes_down}")

    def _trip(self, what: str) -> None:
        if self.revoked is not None:
            return
        self._hit(what)
        self.revoke(f"the run's network limit was reached ({what})")
        if self.on_limit is not None:
            self.on_limit(what)

    # --- one connection -----------------------------------------------------------------------

    async def _connection(self, client: RawStream) -> None:
        t = self.traffic
        limit = self.policy.max_connections
        try:
            if self.revoked is not None:
                await _answer(client, 403, f"tether: {self.revoked}", self.limits)
                return
            if t.active >= limit:
                self._hit(f"net_connections={limit}")
                self._deny("", 0, f"too many connections at once (at most {limit})")
                await _answer(
                    client,
                    503,
                    f"tether: this run has {limit} connections open through its proxy already",
                    self.limits,
                )
                return
            t.active += 1
            t.peak = max(t.peak, t.active)
            try:
                with anyio.CancelScope() as scope:
                    self._scopes.add(scope)
                    try:
                        await self._serve(client)
                    except Exception:  # one connection's failure must not end the run's proxy
                        log.exception("egress: run %s: a connection failed", self.run_id)
                    finally:
                        self._scopes.discard(scope)
            finally:
                t.active -= 1
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _serve(self, client: RawStream) -> None:
        limits = self.limits
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        peer = _Peer(client, conn, limits)
        upstream: _Upstream | None = None
        first = True
        try:
            while True:
                try:
                    event = await peer.next_event(
                        limits.header_timeout if first else limits.idle_timeout
                    )
                except _Gone:
                    return
                if not isinstance(event, h11.Request):
                    return
                first = False
                if len(event.headers) > limits.max_headers:
                    raise _Refused(431, "too many headers")
                if event.method == b"CONNECT":
                    await self._connect(peer, client, event)
                    return
                upstream = await self._plain(peer, event, upstream)
                if upstream is None or not _next_cycle(conn):
                    return
        except _Refused as exc:
            if exc.status == 403:
                self._deny(exc.host, exc.port, exc.reason)
            await _refuse(peer, exc)
        except _Gone:
            return
        finally:
            if upstream is not None:
                with anyio.CancelScope(shield=True):
                    await upstream.peer.stream.aclose()

    async def _target(self, host_text: str, port: int) -> _Target:
        """Check `host_text`:`port` against the policy, resolve it and check its addresses;
        raises `_Refused` (403 policy, 502 resolution)."""
        if self.revoked is not None:
            raise _Refused(403, self.revoked, host_text, port)
        try:
            host = normalize_host(host_text)
        except ValueError as exc:
            raise _Refused(403, str(exc), host_text, port) from None
        verdict = self.policy.decide(host, port)
        if isinstance(verdict, Denied):
            raise _Refused(403, verdict.reason, host, port)
        if verdict.destination.literal:
            return _Target(host, port, verdict, (host,))
        try:
            with anyio.fail_after(self.limits.connect_timeout):
                resolved = await self.resolver.resolve(host, port)
        except (ResolveError, TimeoutError) as exc:
            reason = str(exc) or f"resolving {host} took too long"
            self._deny(host, port, reason)
            raise _Refused(502, reason, host, port) from None
        if not resolved.stand_in:
            for address in resolved.addresses:
                why = forbidden(address, self.own)
                if why is not None:
                    raise _Refused(403, f"{host} resolves to {why}", host, port)
        return _Target(host, port, verdict, resolved.addresses)

    async def _open(self, target: _Target) -> tuple[RawStream, str]:
        """A TCP connection to one of the target's checked addresses (pinned: nothing is
        resolved again), and that address; raises `_Refused(502)`."""
        last = "no address"
        with anyio.move_on_after(self.limits.connect_timeout):
            for address in target.addresses:
                try:
                    stream = await connect(address, target.port)
                except OSError as exc:
                    last = f"{address}: {exc.strerror or exc}"
                    continue
                return stream, address
        reason = f"cannot connect to {target.host}:{target.port} ({last})"
        self._deny(target.host, target.port, reason)
        raise _Refused(502, reason, target.host, target.port)

    # --- CONNECT --------------------------------------------------------------------------------

    async def _connect(self, peer: _Peer, client: RawStream, request: h11.Request) -> None:
        authority = request.target.decode("ascii", errors="replace")
        host_text, port = _authority(authority, None)
        if port is None:
            raise _Refused(400, f"CONNECT needs host:port, not {authority!r}")
        target = await self._target(host_text, port)
        try:
            await _event(peer, h11.EndOfMessage)
        except _Refused:
            raise
        except _Gone:
            return
        credential = target.allowed.credential
        if credential is not None:
            await self._credential_tunnel(peer, target, credential)
            return
        stream, address = await self._open(target)
        async with stream:
            await peer.send(ESTABLISHED)
            early, _ = peer.conn.trailing_data
            await self._tunnel(client, stream, bytes(early), target, address)

    async def _tunnel(
        self, client: RawStream, server: RawStream, early: bytes, target: _Target, address: str
    ) -> None:
        """Relay both ways, the client's first bytes checked before any is relayed."""
        limits = self.limits
        assert self._threads is not None
        threads = self._threads
        up_meter = Meter(parent=self.traffic.up)
        down_meter = Meter(parent=self.traffic.down)
        denied: str | None = None
        ended = [0]

        def spent(how: str, meter: Meter) -> None:
            if how == "limit":
                what = "up" if meter is up_meter else "down"
                limit = self.policy.max_bytes_up if what == "up" else self.policy.max_bytes_down
                self._trip(f"net_bytes_{what}={limit}")

        try:
            async with anyio.create_task_group() as tg:

                def one_side_done() -> None:
                    ended[0] += 1
                    if ended[0] == 2:
                        tg.cancel_scope.cancel()  # both ways closed: the idle watch goes

                async def watch_idle() -> None:
                    while True:
                        quiet = time.monotonic() - max(up_meter.last, down_meter.last)
                        if quiet >= limits.idle_timeout:
                            tg.cancel_scope.cancel()
                            return
                        await anyio.sleep(limits.idle_timeout - quiet)

                async def client_to_server() -> None:
                    nonlocal denied
                    first, denied = await self._first_bytes(client, early, target)
                    if denied is not None:
                        tg.cancel_scope.cancel()
                        return
                    if first:
                        if not up_meter.take(len(first)):
                            spent("limit", up_meter)
                        await _send(server, first, limits)
                    spent(await splice_relay(client, server, up_meter, threads), up_meter)
                    one_side_done()

                async def server_to_client() -> None:
                    spent(await splice_relay(server, client, down_meter, threads), down_meter)
                    one_side_done()

                tg.start_soon(watch_idle)
                tg.start_soon(server_to_client)
                tg.start_soon(client_to_server)
        except* _Gone:
            pass
        finally:
            if denied is None:  # also a tunnel cut at the end of the run: what it moved
                self._allowed(target, "tunnel", up_meter.used, down_meter.used, address)
        if denied is not None:
            self._deny(target.host, target.port, denied)
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await _send_quietly(client, _denial_bytes(denied))
            return

    async def _first_bytes(
        self, client: ByteStream, early: bytes, target: _Target
    ) -> tuple[bytes, str | None]:
        """What the client sent first in a tunnel (to relay), or why the tunnel is refused:
        a TLS hello or an HTTP request naming another host than the `CONNECT` did."""
        data = early
        if not data:
            with anyio.move_on_after(self.limits.idle_timeout):
                try:
                    data = await client.receive(CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    raise _Gone("closed") from None
            if not data:
                raise _Gone("the client sent nothing")
        deadline = anyio.current_time() + self.limits.header_timeout
        while True:
            why = self._inspect(data, target)
            if why is not NEED_MORE:
                return data, why if isinstance(why, str) else None
            if len(data) >= MAX_HELLO or anyio.current_time() >= deadline:
                return data, None  # not a hello or a head we read: relayed as it is
            more = b""
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                try:
                    more = await client.receive(CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    raise _Gone("closed") from None
            if not more:
                return data, None
            data += more

    def _inspect(self, data: bytes, target: _Target) -> str | object | None:
        """Why `data`, a tunnel's first bytes, is refused; `None` when it is not; `NEED_MORE`
        while undecided."""
        if data[:1] == b"\x16":
            sni = client_hello_server_name(data)
            if sni is NEED_MORE:
                return NEED_MORE
            if isinstance(sni, str) and sni != target.host:
                return (
                    f"the tunnel to {target.host}:{target.port} asks TLS for {sni[:200]}: "
                    "a tunnel reaches the host it was opened for only"
                )
            return None
        if _looks_like_http(data):
            head_end = data.find(b"\r\n\r\n")
            if head_end < 0:
                return NEED_MORE if len(data) < self.limits.max_head_bytes else None
            line, _, rest = data[:head_end].partition(b"\r\n")
            method = line.split(b" ", 1)[0]
            if method == b"CONNECT":
                return "a CONNECT inside a tunnel is refused (the proxy relays one hop)"
            host = _header(rest, b"host")
            if host is not None:
                named, port = _authority(host, None)
                try:
                    same = normalize_host(named) == target.host and port in (None, target.port)
                except ValueError:
                    same = False
                if not same:
                    return (
                        f"the tunnel to {target.host}:{target.port} carries a request for "
                        f"{host[:200]}: a tunnel reaches the host it was opened for only"
                    )
        return None

    # --- a credential destination ---------------------------------------------------------------

    async def _credential_tunnel(
        self, peer: _Peer, target: _Target, credential: Credential
    ) -> None:
        secret = self.secrets.get(credential.env)
        if self.ca is None or secret is None:
            raise _Refused(
                502,
                f"the credential for {target.host} is not available (${credential.env})",
                target.host,
                target.port,
            )
        upstream = await self._open_tls(target)
        try:
            await peer.send(ESTABLISHED)
            early, _ = peer.conn.trailing_data
            first, denied = await self._first_bytes(peer.stream, bytes(early), target)
            if denied is None and first[:1] != b"\x16":
                denied = f"{target.host} takes TLS only (the proxy adds its credential over TLS)"
            if denied is not None:
                self._deny(target.host, target.port, denied)
                with anyio.move_on_after(1):
                    await _send_quietly(peer.stream, _denial_bytes(denied))
                return
            try:
                with anyio.fail_after(self.limits.header_timeout):
                    tls = await TLSStream.wrap(
                        _Prefixed(peer.stream, first),
                        server_side=True,
                        ssl_context=self.ca.server_context(target.host),
                        standard_compatible=False,
                    )
            except TLS_FAILURES:
                return  # the child did not trust the run's CA, or went away
            inner = _Peer(
                tls,
                h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes),
                self.limits,
            )
            await self._credential_requests(inner, target, credential, secret, upstream)
        finally:
            with anyio.CancelScope(shield=True):
                await upstream.peer.stream.aclose()

    async def _open_tls(self, target: _Target) -> _Upstream:
        stream, address = await self._open(target)
        try:
            with anyio.fail_after(self.limits.connect_timeout):
                tls = await TLSStream.wrap(
                    stream,
                    hostname=target.host,
                    ssl_context=self.upstream,
                    standard_compatible=False,
                )
        except TLS_FAILURES as exc:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            reason = f"TLS to {target.host}:{target.port} failed: {_short(exc)}"
            self._deny(target.host, target.port, reason)
            raise _Refused(502, reason, target.host, target.port) from None
        return _Upstream(target, address, tls, self)

    async def _credential_requests(
        self,
        client: _Peer,
        target: _Target,
        credential: Credential,
        secret: str,
        upstream: _Upstream,
    ) -> None:
        value = f"{credential.prefix}{secret}"
        scrub = [secret.encode(), value.encode()]
        try:
            while True:
                try:
                    event = await client.next_event(self.limits.idle_timeout)
                except _Gone:
                    return
                if not isinstance(event, h11.Request):
                    return
                if self.revoked is not None:
                    raise _Refused(403, self.revoked, target.host, target.port)
                host = _request_host(event)
                if host is not None and _authority_differs(host, target):
                    raise _Refused(
                        403,
                        f"a request for {host[:200]} on the connection to {target.host}",
                        target.host,
                        target.port,
                    )
                headers = [
                    (k, v)
                    for k, v in _forwarded(event.headers)
                    if k.lower() not in (credential.header.lower().encode(), b"accept-encoding")
                ]
                headers += [(credential.header.encode(), value.encode())]
                headers.append((b"accept-encoding", b"identity"))
                if upstream.closed:
                    upstream = await self._reopen_tls(upstream)
                request = h11.Request(method=event.method, target=event.target, headers=headers)
                keep = await upstream.exchange(client, request, Scrubber(scrub), "credential")
                if not keep or not _next_cycle(client.conn):
                    return
        except _Refused as exc:
            if exc.status == 403:
                self._deny(exc.host, exc.port, exc.reason)
            await _refuse(client, exc)
        finally:
            with anyio.CancelScope(shield=True):
                await upstream.peer.stream.aclose()

    async def _reopen_tls(self, old: _Upstream) -> _Upstream:
        with anyio.CancelScope(shield=True):
            await old.peer.stream.aclose()
        return await self._open_tls(old.target)

    # --- plain HTTP -----------------------------------------------------------------------------

    async def _plain(
        self, client: _Peer, request: h11.Request, upstream: _Upstream | None
    ) -> _Upstream | None:
        """Relay one absolute-form request; the upstream connection to keep for the next one
        (`None`: the client connection ends)."""
        url = request.target.decode("ascii", errors="replace")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() != "http" or not parts.netloc:
            if request.target.startswith(b"/"):
                raise _Refused(
                    400,
                    "this is the run's egress proxy: send absolute-form requests "
                    "(GET http://host/path) or CONNECT host:port",
                )
            raise _Refused(400, f"the proxy relays http:// URLs and CONNECT, not {url[:100]!r}")
        if "@" in parts.netloc:
            raise _Refused(400, "a URL with credentials in it is refused")
        host_text, port = _authority(parts.netloc, 80)
        assert port is not None
        target = await self._target(host_text, port)
        if target.allowed.credential is not None:
            raise _Refused(
                403,
                f"{target.host} carries a credential, which the proxy sends over TLS only: "
                "use https",
                target.host,
                target.port,
            )
        named = _request_host(request)
        if named is not None and _authority_differs(named, target):
            raise _Refused(
                403,
                f"the request for {target.host} names another host ({named[:200]})",
                target.host,
                target.port,
            )
        if upstream is not None and (upstream.target.host, upstream.target.port) != (
            target.host,
            target.port,
        ):
            with anyio.CancelScope(shield=True):
                await upstream.peer.stream.aclose()
            upstream = None
        if upstream is None or upstream.closed:
            stream, address = await self._open(target)
            upstream = _Upstream(target, address, stream, self)
        path = parts.path or "/"
        origin = f"{path}?{parts.query}" if parts.query else path
        headers = _forwarded(request.headers)
        if named is None:
            headers.insert(0, (b"host", parts.netloc.encode()))
        forwarded = h11.Request(method=request.method, target=origin.encode(), headers=headers)
        try:
            keep = await upstream.exchange(client, forwarded, None, "http")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await upstream.peer.stream.aclose()
            raise
        if not keep:
            with anyio.CancelScope(shield=True):
                await upstream.peer.stream.aclose()
            return None
        return upstream


class _Upstream:
    """A connection to a destination, reused for the next request to the same one."""

    def __init__(self, target: _Target, address: str, stream: ByteStream, proxy: EgressProxy):
        self.target = target
        self.address = address
        self.proxy = proxy
        self.counted = [0, 0]

        def up(n: int) -> None:
            self.counted[0] += n
            proxy._up(n)

        def down(n: int) -> None:
            self.counted[1] += n
            proxy._down(n)

        self.peer = _Peer(stream, h11.Connection(h11.CLIENT), proxy.limits, count=down, sent=up)
        self.closed = False

    async def exchange(
        self, client: _Peer, request: h11.Request, scrub: Scrubber | None, via: Via
    ) -> bool:
        """Send `request` and the client's body, relay the response; whether both
        connections may carry another request."""
        limits = self.proxy.limits
        before = list(self.counted)
        up = self.peer
        try:
            await up.send(request)
            if client.conn.they_are_waiting_for_100_continue:
                await client.send(h11.InformationalResponse(status_code=100, headers=[]))
            while True:
                event = await client.next_event(limits.idle_timeout)
                if isinstance(event, h11.Data):
                    await up.send(h11.Data(data=event.data))
                elif isinstance(event, h11.EndOfMessage):
                    await up.send(h11.EndOfMessage())
                    break
                else:
                    raise _Gone("the client's request ended early")
            while True:
                try:
                    event = await up.next_event(limits.idle_timeout, before_wait=client)
                except _Refused:
                    raise _Refused(502, f"{self.target.host} sent a malformed response") from None
                if isinstance(event, h11.InformationalResponse):
                    if event.status_code != 101:
                        await client.send(event)
                    continue
                if isinstance(event, h11.Response):
                    headers = _forwarded(event.headers, response=True)
                    if scrub is not None:
                        headers = [(k, scrub.clean(v)) for k, v in headers]
                    length = self._spliced_length(client, request, event, scrub)
                    if length is not None:
                        headers.append((b"connection", b"close"))
                    answer = h11.Response(
                        status_code=event.status_code, headers=headers, reason=event.reason
                    )
                    await client.send(answer, hold=length is None)
                    if length is not None:
                        await self._splice_body(client, length)
                        self._done(before, via)
                        self.closed = True
                        return False
                    continue
                if isinstance(event, h11.Data):
                    data = scrub.feed(event.data) if scrub is not None else event.data
                    if data:
                        await client.send(h11.Data(data=data), hold=True)
                    continue
                if isinstance(event, h11.EndOfMessage):
                    if scrub is not None:
                        rest = scrub.end()
                        if rest:
                            await client.send(h11.Data(data=rest))
                    await client.send(h11.EndOfMessage())
                    break
                raise _Refused(502, f"{self.target.host} closed the connection mid-response")
        except _Gone:
            self.closed = True
            self._done(before, via)
            raise
        except _Refused:
            self.closed = True
            self._done(before, via)
            raise
        self._done(before, via)
        if not _next_cycle(up.conn):
            self.closed = True
        return True

    def _spliced_length(
        self, client: _Peer, request: h11.Request, response: h11.Response, scrub: Scrubber | None
    ) -> int | None:
        """The body length of a response relayed inside the kernel (`splice_body`): a large
        body of declared length, between plain sockets, with nothing to scrub; else `None`."""
        if scrub is not None or request.method == b"HEAD" or response.status_code in (204, 304):
            return None
        if not (isinstance(client.stream, RawStream) and isinstance(self.peer.stream, RawStream)):
            return None
        length = _declared_length(response.headers)
        return length if length is not None and length >= SPLICED_BODY else None

    async def _splice_body(self, client: _Peer, length: int) -> None:
        """Relay a response body of `length` bytes: what h11 already holds of it through h11,
        the rest spliced from socket to socket. Neither connection carries another request
        afterwards (h11 no longer knows where they stand): the response said so."""
        up = self.peer
        while length > 0:
            try:
                event = up.conn.next_event()
            except h11.RemoteProtocolError:
                raise _Gone("a malformed response body") from None
            if not isinstance(event, h11.Data):
                break
            length -= len(event.data)
            await client.send(h11.Data(data=event.data))
        if length <= 0:
            return
        assert isinstance(up.stream, RawStream) and isinstance(client.stream, RawStream)
        assert self.proxy._threads is not None
        meter = Meter(parent=self.proxy.traffic.down)
        how = await splice_relay(up.stream, client.stream, meter, self.proxy._threads, length)
        self.counted[1] += meter.used
        if how == "limit":
            self.proxy._trip(f"net_bytes_down={self.proxy.policy.max_bytes_down}")
        if how != "eof":
            raise _Gone("the body was cut")

    def _done(self, before: list[int], via: Via) -> None:
        self.proxy._allowed(
            self.target,
            via,
            self.counted[0] - before[0],
            self.counted[1] - before[1],
            self.address,
        )


# --- helpers ----------------------------------------------------------------------------------


async def _send(dst: ByteStream, data: bytes, limits: ProxyLimits) -> None:
    try:
        with anyio.fail_after(limits.send_timeout):
            await dst.send(data)
    except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        raise _Gone("the peer went away") from None


async def _send_quietly(dst: ByteStream, data: bytes) -> None:
    try:
        await dst.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


async def _event(peer: _Peer, kind: type) -> Any:
    event = await peer.next_event(peer.limits.header_timeout)
    if not isinstance(event, kind):
        raise _Gone("unexpected")
    return event


def _denial_bytes(reason: str) -> bytes:
    """What a refused tunnel's client gets: the TLS alert when it spoke TLS, else a 403."""
    if reason.startswith("the tunnel to") and "asks TLS" in reason:
        return ACCESS_DENIED_ALERT
    body = f"tether: network policy: {reason}\n".encode()
    return (
        b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\nconnection: close\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )


async def _refuse(peer: _Peer, exc: _Refused) -> None:
    """Answer `exc` on `peer` when its h11 state lets us, then the connection ends."""
    if peer.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    prefix = "network policy: " if exc.status == 403 else ""
    body = f"tether: {prefix}{exc.reason}\n".encode()
    try:
        await peer.send(
            h11.Response(
                status_code=exc.status,
                headers=[
                    ("content-type", "text/plain"),
                    ("content-length", str(len(body))),
                    ("connection", "close"),
                ],
            )
        )
        await peer.send(h11.Data(data=body))
        await peer.send(h11.EndOfMessage())
    except (_Gone, h11.LocalProtocolError):
        pass


async def _answer(stream: ByteStream, status: int, text: str, limits: ProxyLimits) -> None:
    """A whole answer on a connection whose request is never read (refused at the accept)."""
    body = (text + "\n").encode()
    reason = {403: b"Forbidden", 503: b"Service Unavailable"}.get(status, b"Refused")
    data = (
        b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n" % (status, reason, len(body))
    ) + body
    with anyio.move_on_after(min(1.0, limits.send_timeout)):
        await _send_quietly(stream, data)


def _next_cycle(conn: h11.Connection) -> bool:
    if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
        return False
    try:
        conn.start_next_cycle()
    except h11.LocalProtocolError:
        return False
    return True


def _forwarded(
    headers: Sequence[tuple[bytes, bytes]], *, response: bool = False
) -> list[tuple[bytes, bytes]]:
    """The end-to-end headers of a message (hop-by-hop ones, and those its `Connection`
    header names, removed)."""
    named = set(HOP_BY_HOP)
    for key, value in headers:
        if key.lower() == b"connection":
            named.update(v.strip().decode("latin-1").lower() for v in value.split(b","))
    return [(k, v) for k, v in headers if k.decode("latin-1").lower() not in named]


def _declared_length(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    if any(key.lower() == b"transfer-encoding" for key, _ in headers):
        return None
    for key, value in headers:
        if key.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _header(block: bytes, name: bytes) -> str | None:
    for line in block.split(b"\r\n"):
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None


def _request_host(request: h11.Request) -> str | None:
    for key, value in request.headers:
        if key == b"host":
            return bytes(value).decode("latin-1")
    return None


def _authority(text: str, default: int | None) -> tuple[str, int | None]:
    """`host[:port]` / `[v6][:port]` → (host, port or `default`)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not port_text:
        return host, default
    try:
        return host, int(port_text)
    except ValueError:
        return host, -1


def _authority_differs(named: str, target: _Target) -> bool:
    host, port = _authority(named, None)
    try:
        same_host = normalize_host(host) == target.host
    except ValueError:
        return True
    return not same_host or port not in (None, target.port)


def _looks_like_http(data: bytes) -> bool:
    method, space, _ = data[:16].partition(b" ")
    return bool(space) and method.isalpha() and method.isupper()


def _short(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:200]


__all__ = ["EgressProxy", "NetEvent", "ProxyLimits", "Traffic"]
