"""The egress proxy on its own, over loopback: loopback servers play the allowed and denied hosts
through a test name table, a test CA stands in for the public ones. Each test says what the
proxy let through, what it refused with which answer, and the events it logged."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from egress_kit import MiB, TestCA, in_thread, raw, site, through_connect

from tether.parent.egress.addresses import NameTable, Resolved
from tether.parent.egress.policy import Credential, NetworkPolicy, parse_destination, policy_of
from tether.parent.egress.proxy import EgressProxy, NetEvent, ProxyLimits
from tether.parent.egress.tls import RunCA

pytestmark = pytest.mark.anyio

TOKEN = "tok-5ecr3t-c4n4ry-0042"


@asynccontextmanager
async def running(
    policy: NetworkPolicy,
    resolver: object,
    *,
    events: list[NetEvent] | None = None,
    limits: ProxyLimits | None = None,
    upstream: ssl.SSLContext | None = None,
    ca: RunCA | None = None,
    limit_hits: list[str] | None = None,
) -> AsyncIterator[tuple[EgressProxy, int]]:
    async with EgressProxy(
        "run-test",
        policy,
        resolver=resolver,  # type: ignore[arg-type]
        upstream=upstream,
        secrets={"EXAMPLE_TOKEN": TOKEN},
        ca=ca,
        on_event=(events.append if events is not None else None),
        on_limit=(limit_hits.append if limit_hits is not None else None),
        limits=limits,
    ) as proxy:
        port = await proxy.listen_loopback()
        yield proxy, port


def connect(host: str, port: int) -> bytes:
    """A `CONNECT` request's head."""
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


def get(host: str, port: int, path: str = "/hello", extra: str = "") -> bytes:
    """An absolute-form `GET` with its `Host` (and `extra` header lines)."""
    return (
        f"GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}\r\n"
    ).encode()


def kinds(events: Sequence[NetEvent]) -> list[tuple[str, str, int]]:
    return [(e.kind, e.host, e.port) for e in events]


def make_ca(tmp_path: Path) -> tuple[TestCA, ssl.SSLContext]:
    ca = TestCA(["pkg.test", "api.test", "other.test"])
    return ca, ca.server_context(tmp_path)


async def test_an_allowed_host_is_reached_through_connect_end_to_end_and_logged(
    tmp_path: Path,
) -> None:
    ca, tls = make_ca(tmp_path)
    events: list[NetEvent] = []
    with site("pkg.test", tls) as pkg:
        policy = policy_of([f"pkg.test:{pkg.port}"])
        names = NameTable({"pkg.test": "127.0.0.1"})
        async with running(policy, names, events=events) as (proxy, port):
            head, body = await in_thread(
                through_connect, port, "pkg.test", pkg.port, ctx=ca.client_context()
            )
            with anyio.fail_after(5):
                while not events:
                    await anyio.sleep(0.02)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"hello from pkg.test" in body
    assert names.asked == ["pkg.test"]
    (event,) = events
    assert (event.kind, event.host, event.port, event.via) == (
        "net.allowed",
        "pkg.test",
        pkg.port,
        "tunnel",
    )
    assert event.address == "127.0.0.1" and event.bytes_up > 0 and event.bytes_down > 0
    assert proxy.traffic.allowed == 1 and proxy.traffic.bytes_down == event.bytes_down


async def test_an_absolute_form_request_is_relayed_in_origin_form_without_proxy_headers() -> None:
    events: list[NetEvent] = []
    with site("pkg.test") as pkg:
        policy = policy_of([f"pkg.test:{pkg.port}"])
        async with running(policy, NameTable({"pkg.test": "127.0.0.1"}), events=events) as (
            _,
            port,
        ):
            got = await in_thread(
                raw,
                port,
                get(
                    "pkg.test",
                    pkg.port,
                    "/hello?x=1",
                    "Proxy-Authorization: Basic c2VjcmV0\r\nConnection: close\r\n",
                ),
            )
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"hello from pkg.test\n"), got
    (seen,) = pkg.seen
    assert seen.path == "/hello?x=1" and seen.headers["host"] == f"pkg.test:{pkg.port}"
    assert "proxy-authorization" not in seen.headers
    assert kinds(events) == [("net.allowed", "pkg.test", pkg.port)] and events[0].via == "http"


async def test_a_kept_alive_connection_carries_several_requests_each_checked() -> None:
    with site("pkg.test") as pkg, site("other.test") as other:
        policy = policy_of([f"pkg.test:{pkg.port}"])
        names = NameTable({"pkg.test": "127.0.0.1", "other.test": "127.0.0.1"})
        async with running(policy, names) as (_, port):
            two = get("pkg.test", pkg.port) + get("other.test", other.port)
            got = await in_thread(raw, port, two)
    assert got.count(b"HTTP/1.1 ") == 2, got
    assert b"hello from pkg.test" in got and b"HTTP/1.1 403" in got
    assert b"other.test is not in the network policy" in got
    assert len(pkg.seen) == 1 and other.seen == []


# --- every denial, answered and logged --------------------------------------------------------


async def denied(
    policy: NetworkPolicy, names: NameTable, request: bytes
) -> tuple[bytes, list[NetEvent]]:
    events: list[NetEvent] = []
    async with running(policy, names, events=events) as (_, port):
        got = await in_thread(raw, port, request)
    return got, events


async def test_another_host_is_refused_with_403_and_the_policys_reason() -> None:
    with site("other.test") as other:
        names = NameTable({"other.test": "127.0.0.1"})
        got, events = await denied(
            policy_of(["pkg.test"]),
            names,
            connect("other.test", other.port),
        )
    assert got.startswith(b"HTTP/1.1 403"), got
    assert b"network policy: other.test is not in the network policy" in got
    assert kinds(events) == [("net.denied", "other.test", other.port)]
    assert names.asked == [] and other.seen == []  # refused before anything was resolved


async def test_another_port_of_an_allowed_host_is_refused() -> None:
    with site("pkg.test") as pkg:
        names = NameTable({"pkg.test": "127.0.0.1"})
        got, events = await denied(
            policy_of(["pkg.test:443"]),
            names,
            get("pkg.test", pkg.port),
        )
    assert got.startswith(b"HTTP/1.1 403"), got
    assert f"port {pkg.port} of pkg.test is not allowed (the policy allows 443)".encode() in got
    assert pkg.seen == [] and events[0].reason.startswith(f"port {pkg.port}")


async def test_an_ip_literal_is_refused_unless_listed_and_then_reached_as_listed() -> None:
    with site("pkg.test") as pkg:
        request = (
            f"GET http://127.0.0.1:{pkg.port}/hello HTTP/1.1\r\nHost: 127.0.0.1:{pkg.port}\r\n"
            "Connection: close\r\n\r\n"
        )
        got, _ = await denied(policy_of(["pkg.test"]), NameTable(), request.encode())
        assert got.startswith(b"HTTP/1.1 403") and b"IP address" in got, got
        assert pkg.seen == []
        listed, events = await denied(
            policy_of([f"127.0.0.1:{pkg.port}"]), NameTable(), request.encode()
        )
    assert listed.startswith(b"HTTP/1.1 200") and b"hello from pkg.test" in listed, listed
    assert kinds(events) == [("net.allowed", "127.0.0.1", pkg.port)]


async def test_a_name_that_resolves_to_loopback_or_link_local_is_refused_whatever_the_policy() -> (
    None
):
    with site("pkg.test") as pkg:
        names = NameTable(
            other={
                "rebind.test": ["192.0.2.10", "127.0.0.1"],
                "metadata.test": "169.254.169.254",
            }
        )
        policy = policy_of([f"rebind.test:{pkg.port}", "metadata.test:80"])
        got, events = await denied(
            policy,
            names,
            connect("rebind.test", pkg.port),
        )
        assert got.startswith(b"HTTP/1.1 403") and b"127.0.0.1 is a loopback address" in got
        got, _ = await denied(
            policy, names, b"GET http://metadata.test/ HTTP/1.1\r\nHost: metadata.test\r\n\r\n"
        )
        assert got.startswith(b"HTTP/1.1 403") and b"link-local" in got
    assert pkg.seen == [] and events[0].kind == "net.denied"


async def test_a_connect_to_the_proxy_itself_is_refused() -> None:
    """A relay back through the proxy's own address, by literal or by a name that resolves to
    it, is refused: the proxy is one hop."""
    events: list[NetEvent] = []
    names = NameTable(other={"self.test": "127.0.0.1"})
    async with running(policy_of(["self.test:1-65535"]), names, events=events) as (_, port):
        by_literal = await in_thread(
            raw,
            port,
            connect("127.0.0.1", port),
        )
        by_name = await in_thread(
            raw,
            port,
            connect("self.test", port),
        )
    assert by_literal.startswith(b"HTTP/1.1 403") and b"IP address" in by_literal
    assert by_name.startswith(b"HTTP/1.1 403") and b"loopback" in by_name
    assert [e.kind for e in events] == ["net.denied", "net.denied"]


async def test_a_request_whose_host_header_names_another_host_is_refused() -> None:
    with site("pkg.test") as pkg:
        names = NameTable({"pkg.test": "127.0.0.1"})
        got, events = await denied(
            policy_of([f"pkg.test:{pkg.port}"]),
            names,
            f"GET http://pkg.test:{pkg.port}/hello HTTP/1.1\r\nHost: evil.test\r\n\r\n".encode(),
        )
    assert got.startswith(b"HTTP/1.1 403") and b"names another host (evil.test)" in got, got
    assert pkg.seen == [] and events[0].kind == "net.denied"


async def test_a_tunnel_whose_tls_names_another_host_gets_a_tls_alert_and_reaches_nothing(
    tmp_path: Path,
) -> None:
    ca, tls = make_ca(tmp_path)
    events: list[NetEvent] = []
    with site("pkg.test", tls) as pkg:
        names = NameTable({"pkg.test": "127.0.0.1"})
        async with running(policy_of([f"pkg.test:{pkg.port}"]), names, events=events) as (
            _,
            port,
        ):
            head, body = await in_thread(
                through_connect,
                port,
                "pkg.test",
                pkg.port,
                ctx=ca.client_context(),
                sni="other.test",
            )
    assert head.startswith(b"HTTP/1.1 200")
    assert body.startswith(b"error:") and b"ACCESS_DENIED" in body.upper(), body
    assert pkg.seen == []
    assert events[-1].kind == "net.denied" and "asks TLS for other.test" in events[-1].reason


@pytest.mark.parametrize(
    ("inside", "why"),
    [
        (b"GET /hello HTTP/1.1\r\nHost: evil.test\r\n\r\n", b"carries a request for evil.test"),
        (b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test\r\n\r\n", b"CONNECT inside a tunnel"),
    ],
)
async def test_a_plain_request_or_a_relayed_connect_inside_a_tunnel_is_refused(
    inside: bytes, why: bytes
) -> None:
    with site("pkg.test") as pkg:
        names = NameTable({"pkg.test": "127.0.0.1"})
        got, events = await denied(
            policy_of([f"pkg.test:{pkg.port}"]),
            names,
            connect("pkg.test", pkg.port) + inside,
        )
    assert got.startswith(b"HTTP/1.1 200"), got
    assert b"HTTP/1.1 403" in got and why in got, got
    assert pkg.seen == [] and events[-1].kind == "net.denied"


async def test_a_name_that_does_not_resolve_is_a_502_that_says_so() -> None:
    got, events = await denied(
        policy_of(["gone.test"]),
        NameTable(),
        b"CONNECT gone.test:443 HTTP/1.1\r\nHost: gone.test:443\r\n\r\n",
    )
    assert got.startswith(b"HTTP/1.1 502") and b"cannot resolve gone.test" in got, got
    assert events[0].kind == "net.denied"


async def test_a_request_in_origin_form_is_told_what_the_proxy_is() -> None:
    got, _ = await denied(
        policy_of(["pkg.test"]), NameTable(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    assert got.startswith(b"HTTP/1.1 400") and b"egress proxy" in got


class Rebinding:
    """Answers a stand-in public address first, loopback afterwards (a rebinding name)."""

    def __init__(self) -> None:
        self.asked = 0

    async def resolve(self, host: str, port: int) -> Resolved:
        self.asked += 1
        if self.asked == 1:
            return Resolved(("127.0.0.1",), stand_in=True)
        return Resolved(("127.0.0.1",))


async def test_a_connection_is_pinned_to_the_address_resolved_and_checked_once() -> None:
    resolver = Rebinding()
    with site("pkg.test") as pkg:
        request = f"GET http://pkg.test:{pkg.port}/hello HTTP/1.1\r\nHost: pkg.test:{pkg.port}\r\n"
        async with running(policy_of([f"pkg.test:{pkg.port}"]), resolver) as (_, port):
            first = await in_thread(raw, port, (request + "Connection: close\r\n\r\n").encode())
            second = await in_thread(raw, port, (request + "Connection: close\r\n\r\n").encode())
    assert first.startswith(b"HTTP/1.1 200")  # resolved once, checked, connected to that
    assert second.startswith(b"HTTP/1.1 403") and b"loopback" in second  # asked anew, refused
    assert resolver.asked == 2 and len(pkg.seen) == 1


# --- credentials --------------------------------------------------------------------------------


async def test_a_credential_is_added_at_the_proxy_and_never_sent_back(tmp_path: Path) -> None:
    ca, tls = make_ca(tmp_path)
    events: list[NetEvent] = []
    with site("api.test", tls) as api:
        dest = parse_destination(f"api.test:{api.port}", Credential(env="EXAMPLE_TOKEN"))
        run_ca = RunCA("run-test", ["api.test"])
        child_trust = ssl.create_default_context(cadata=run_ca.cert_pem.decode())
        async with running(
            NetworkPolicy((dest,)),
            NameTable({"api.test": "127.0.0.1"}),
            events=events,
            upstream=ca.client_context(),
            ca=run_ca,
        ) as (_, port):
            request = (
                b"GET /echo HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer child-made-up\r\n"
                b"Accept-Encoding: gzip\r\nConnection: close\r\n\r\n"
            )
            head, body = await in_thread(
                through_connect, port, "api.test", api.port, ctx=child_trust, request=request
            )
    assert head.startswith(b"HTTP/1.1 200") and body.startswith(b"HTTP/1.1 200"), body
    (seen,) = api.seen
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["accept-encoding"] == "identity"
    # The echo repeats the header: the proxy overwrote the secret on its way back.
    assert TOKEN.encode() not in body and b"*" * len(TOKEN) in body, body
    assert b"child-made-up" not in body
    assert [(e.kind, e.via) for e in events] == [("net.allowed", "credential")]


async def test_a_credential_destination_is_refused_over_plain_http(tmp_path: Path) -> None:
    with site("api.test") as api:
        dest = parse_destination(f"api.test:{api.port}", Credential(env="EXAMPLE_TOKEN"))
        got, _ = await denied(
            NetworkPolicy((dest,)),
            NameTable({"api.test": "127.0.0.1"}),
            f"GET http://api.test:{api.port}/echo HTTP/1.1\r\nHost: api.test\r\n\r\n".encode(),
        )
    assert got.startswith(b"HTTP/1.1 403") and b"over TLS only" in got
    assert api.seen == []


def test_the_run_ca_signs_for_its_credential_hosts_only(tmp_path: Path) -> None:
    """Name-constrained: a leaf it made for another name does not verify."""
    run_ca = RunCA("run-test", ["api.test"])
    trust = ssl.create_default_context(cadata=run_ca.cert_pem.decode())
    for name, ok in (("api.test", True), ("other.test", False)):
        server = run_ca.server_context(name)
        a, b = socket.socketpair()
        with a, b:

            def serve(sock: socket.socket = b, ctx: ssl.SSLContext = server) -> None:
                try:
                    with ctx.wrap_socket(sock, server_side=True):
                        pass
                except (ssl.SSLError, OSError):
                    pass  # the client refused the certificate

            t = threading.Thread(target=serve)
            t.start()
            try:
                with trust.wrap_socket(a, server_hostname=name):
                    verified = True
            except ssl.SSLCertVerificationError:
                verified = False
            a.close()
            t.join(5)
        assert verified is ok, name


# --- bounds -------------------------------------------------------------------------------------


async def test_past_its_connection_limit_a_run_gets_503_and_its_open_tunnels_go_on(
    tmp_path: Path,
) -> None:
    events: list[NetEvent] = []
    with site("pkg.test") as pkg:
        policy = NetworkPolicy((parse_destination(f"pkg.test:{pkg.port}"),), max_connections=2)
        async with running(policy, NameTable({"pkg.test": "127.0.0.1"}), events=events) as (
            proxy,
            port,
        ):
            held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
            try:
                for s in held:
                    s.sendall(connect("pkg.test", pkg.port))
                    assert (await in_thread(s.recv, 100)).startswith(b"HTTP/1.1 200")
                third = await in_thread(
                    raw, port, b"GET http://pkg.test/ HTTP/1.1\r\nHost: pkg.test\r\n\r\n"
                )
                assert third.startswith(b"HTTP/1.1 503"), third
                assert proxy.traffic.active == 2
            finally:
                for s in held:
                    s.close()
            assert proxy.traffic.limits_hit == ["net_connections=2"]
    denied = [e for e in events if e.kind == "net.denied"]
    assert len(denied) == 1 and "too many connections" in denied[0].reason


async def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout() -> None:
    limits = ProxyLimits(header_timeout=0.3)
    async with running(policy_of(["pkg.test"]), NameTable(), limits=limits) as (proxy, port):
        quiet = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        try:
            with anyio.fail_after(10):
                while proxy.traffic.peak < 5:
                    await anyio.sleep(0.02)
                while proxy.traffic.active:
                    await anyio.sleep(0.05)
            for s in quiet:
                s.settimeout(5)
                assert s.recv(10) == b""  # closed by the proxy
        finally:
            for s in quiet:
                s.close()


async def test_past_its_byte_limit_a_run_is_cut_told_and_refused_from_then_on() -> None:
    hits: list[str] = []
    with site("pkg.test") as pkg:
        policy = NetworkPolicy((parse_destination(f"pkg.test:{pkg.port}"),), max_bytes_down=MiB)
        async with running(policy, NameTable({"pkg.test": "127.0.0.1"}), limit_hits=hits) as (
            proxy,
            port,
        ):
            url = f"http://pkg.test:{pkg.port}"
            big = await in_thread(
                raw,
                port,
                f"GET {url}/bytes/{8 * MiB} HTTP/1.1\r\nHost: pkg.test:{pkg.port}\r\n\r\n".encode(),
            )
            after = await in_thread(
                raw, port, f"GET {url}/hello HTTP/1.1\r\nHost: pkg.test:{pkg.port}\r\n\r\n".encode()
            )
            assert proxy.traffic.limits_hit == [f"net_bytes_down={MiB}"]
    assert len(big) < 4 * MiB  # cut, not delivered whole
    assert hits == [f"net_bytes_down={MiB}"]
    assert after.startswith(b"HTTP/1.1 403") and b"network limit" in after


def upload(port: int, head: bytes, size: int) -> bytes:
    """Send `head` to the proxy on 127.0.0.1:`port`, then `size` bytes of body for as long as
    the proxy takes them; what came back before it closed."""
    sent = 0
    block = b"u" * (256 * 1024)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(head)
            while sent < size:
                s.sendall(block)
                sent += len(block)
        except OSError:
            pass  # cut by the proxy: what counts is how far it let the body go
        out = b""
        try:
            while got := s.recv(65536):
                out += got
        except OSError:
            pass
    return out


@pytest.mark.parametrize("via", ["http", "tunnel"])
async def test_past_its_upload_limit_a_run_is_cut_told_and_refused_from_then_on(via: str) -> None:
    """The limit on bytes sent out holds on both paths a body takes: relayed by h11 in absolute
    form, and spliced in a tunnel. The destination never gets the whole body."""
    hits: list[str] = []
    size = 8 * MiB
    with site("pkg.test") as pkg:
        policy = NetworkPolicy((parse_destination(f"pkg.test:{pkg.port}"),), max_bytes_up=MiB)
        async with running(policy, NameTable({"pkg.test": "127.0.0.1"}), limit_hits=hits) as (
            proxy,
            port,
        ):
            target = f"http://pkg.test:{pkg.port}/upload" if via == "http" else "/upload"
            post = (
                f"POST {target} HTTP/1.1\r\nHost: pkg.test:{pkg.port}\r\n"
                f"Content-Length: {size}\r\n\r\n"
            ).encode()
            head = post if via == "http" else connect("pkg.test", pkg.port) + post
            await in_thread(upload, port, head, size)
            after = await in_thread(raw, port, get("pkg.test", pkg.port))
            assert proxy.traffic.limits_hit == [f"net_bytes_up={MiB}"]
    assert hits == [f"net_bytes_up={MiB}"]
    assert sum(len(s.body) for s in pkg.seen) < size  # cut, not delivered whole
    assert after.startswith(b"HTTP/1.1 403") and b"network limit" in after


async def test_a_closed_proxy_refuses_at_once_and_forgets_its_secrets() -> None:
    async with running(policy_of(["pkg.test"]), NameTable()) as (proxy, port):
        pass
    assert proxy.revoked == "the run has ended" and proxy.secrets == {}
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


async def test_large_bodies_arrive_whole_through_a_tunnel_and_in_absolute_form() -> None:
    """Both paths a large body takes inside the kernel (a tunnel's relay, and a plain
    response of declared length, after which its connection ends) deliver every byte, and
    the run's meter counts them."""
    events: list[NetEvent] = []
    size = 6 * MiB + 123
    with site("pkg.test") as pkg:
        policy = policy_of([f"pkg.test:{pkg.port}"])
        async with running(policy, NameTable({"pkg.test": "127.0.0.1"}), events=events) as (
            proxy,
            port,
        ):
            plain = await in_thread(raw, port, get("pkg.test", pkg.port, f"/bytes/{size}"))
            tunnel = await in_thread(
                raw,
                port,
                connect("pkg.test", pkg.port)
                + f"GET /bytes/{size} HTTP/1.1\r\nHost: pkg.test\r\n".encode()
                + b"Connection: close\r\n\r\n",
            )
            with anyio.fail_after(10):
                while len(events) < 2:
                    await anyio.sleep(0.02)
    head, _, body = plain.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
    assert body == b"x" * size
    inner = tunnel.split(b"\r\n\r\n", 2)
    assert inner[0].startswith(b"HTTP/1.1 200") and inner[2] == b"x" * size
    assert proxy.traffic.bytes_down >= 2 * size
    assert [e.via for e in events] == ["http", "tunnel"]
    assert all(e.bytes_down >= size for e in events)


async def test_a_head_past_its_bound_is_refused_without_being_held() -> None:
    """What one connection can make the proxy hold is bounded: a request head that goes on
    past `max_head_bytes` is answered 431 and the connection closed."""
    limits = ProxyLimits(max_head_bytes=16 * 1024)
    async with running(policy_of(["pkg.test"]), NameTable(), limits=limits) as (_, port):
        head = b"GET http://pkg.test/ HTTP/1.1\r\nHost: pkg.test\r\n" + b"X-Pad: " + b"a" * 200_000
        got = await in_thread(raw, port, head)
    assert got.startswith(b"HTTP/1.1 431"), got[:200]
