"""The model providers' HTTP/1.1 client against a real loopback server that misbehaves on
purpose: kept connections, servers that hang up at every moment, timeouts, TLS, cancellation."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from tether.parent.egress.tls import RunCA
from tether.parent.models import _http, h11_client
from tether.parent.models._http import HttpxClient, proxied
from tether.parent.models.anthropic import AnthropicModel
from tether.parent.models.h11_client import H11Client
from tether.protocol import ErrorCode, RemoteError
from tether.protocol.messages import ChatMessage, ModelCompleteParams

pytestmark = pytest.mark.anyio

DEADLINE = 10
OK = b'{"ok": true}'


def answer(body: bytes = OK, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + extra
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


def read_request(conn: socket.socket) -> bytes | None:
    """One whole request (head and `content-length` body), or None at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


Serve = Callable[[socket.socket, int], None]
"""What the server does with its `n`th connection (from 0)."""


class RawServer:
    """A loopback TCP server, one thread per connection, each running `serve`; it records
    every request and whether each connection's client closed it."""

    def __init__(self, serve: Serve, tls: ssl.SSLContext | None = None) -> None:
        self.serve = serve
        self.requests: list[bytes] = []
        self.accepted = 0
        self.client_closed: list[bool] = []
        self._tls = tls
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._closing = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if self._closing:
                conn.close()
                return
            n = self.accepted
            self.accepted += 1
            self.client_closed.append(False)
            thread = threading.Thread(target=self._run, args=(conn, n), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, conn: socket.socket, n: int) -> None:
        try:
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            self._open.append(conn)
            self.serve(conn, n)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def wait_closed_by_client(self, n: int | None = None) -> bool:
        """Whether connection `n` (None: any) was closed by the client (its server side read
        EOF), waiting for it a while."""
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            if any(self.client_closed) if n is None else self.client_closed[n]:
                return True
            time.sleep(0.01)
        return False

    def read(self, conn: socket.socket, n: int) -> bytes | None:
        got = read_request(conn)
        if got is None:
            self.client_closed[n] = True
        else:
            self.requests.append(got)
        return got

    def close(self) -> None:
        self._closing = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the acceptor's accept()
        except OSError:
            pass
        self._sock.close()
        for conn in self._open:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(DEADLINE)
        self._acceptor.join(DEADLINE)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/messages"


@pytest.fixture
def serving() -> Iterator[Callable[..., RawServer]]:
    made: list[RawServer] = []

    def make(serve: Serve, tls: ssl.SSLContext | None = None) -> RawServer:
        made.append(RawServer(serve, tls))
        return made[-1]

    yield make
    for server in made:
        server.close()


def client(**kwargs: Any) -> H11Client:
    return H11Client(ssl_context=ssl.create_default_context(), **kwargs)


async def post(c: H11Client, url: str, seconds: float = DEADLINE) -> Any:
    with anyio.fail_after(DEADLINE * 2):
        return await c.post(
            url,
            content=b"{}",
            headers={"content-type": "application/json"},
            io_timeout=seconds,
            connect_timeout=seconds,
        )


def answering(server_box: list[RawServer]) -> Serve:
    def serve(conn: socket.socket, n: int) -> None:
        while server_box[0].read(conn, n) is not None:
            conn.sendall(answer())

    return serve


async def test_a_kept_connection_serves_every_request_and_is_closed_with_the_client(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []
    box.append(serving(answering(box)))
    server = box[0]
    async with client() as c:
        for _ in range(5):
            reply = await post(c, server.url)
            assert reply.status == 200 and reply.content == OK
        assert c.idle_connections() == 1
    assert server.accepted == 1
    assert server.wait_closed_by_client(0)
    assert all(b"\r\nhost: 127.0.0.1:%d\r\n" % server.port in r.lower() for r in server.requests)


async def test_a_connection_the_server_closed_while_idle_is_replaced_without_a_failure(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []

    def serve(conn: socket.socket, n: int) -> None:
        if box[0].read(conn, n) is not None:
            conn.sendall(answer())  # and hang up, announcing nothing

    box.append(serving(serve))
    async with client() as c:
        await post(c, box[0].url)
        await anyio.sleep(0.1)
        reply = await post(c, box[0].url)
    assert reply.status == 200
    assert box[0].accepted == 2
    assert len(box[0].requests) == 2


async def test_a_kept_connection_that_dies_under_a_request_is_replaced_once_by_a_fresh_one(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []

    def serve(conn: socket.socket, n: int) -> None:
        server = box[0]
        if server.read(conn, n) is None:
            return
        if n == 0:
            conn.sendall(answer())
            server.read(conn, n)  # the second request, never answered here
            return
        conn.sendall(answer(b'{"second": 1}'))

    box.append(serving(serve))
    async with client() as c:
        await post(c, box[0].url)
        reply = await post(c, box[0].url)
    assert reply.content == b'{"second": 1}'
    assert box[0].accepted == 2


async def test_a_fresh_connection_closed_without_an_answer_fails_and_is_not_tried_again(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []
    box.append(serving(lambda conn, n: box[0].read(conn, n) and None))
    async with client() as c:
        with pytest.raises(httpx.RemoteProtocolError):
            await post(c, box[0].url)
    assert box[0].accepted == 1


async def test_an_answer_cut_short_is_a_protocol_error_and_its_connection_is_not_kept(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []

    def serve(conn: socket.socket, n: int) -> None:
        if box[0].read(conn, n) is not None:
            conn.sendall(answer(b'{"cut": "' + b"x" * 1000 + b'"}')[:120])

    box.append(serving(serve))
    async with client() as c:
        with pytest.raises(httpx.RemoteProtocolError):
            await post(c, box[0].url)
        assert c.idle_connections() == 0


async def test_a_server_that_does_not_answer_in_time_is_a_read_timeout_and_loses_the_connection(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []
    box.append(serving(lambda conn, n: box[0].read(conn, n) and box[0].read(conn, n) and None))
    async with client() as c:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            await post(c, box[0].url, seconds=0.3)
        assert time.monotonic() - started < 5
        assert c.idle_connections() == 0
    assert box[0].wait_closed_by_client(0)


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        async with client() as c:
            with pytest.raises(httpx.ConnectError):
                await post(c, f"http://127.0.0.1:{port}/v1/messages")


async def test_a_chunked_answer_after_a_100_continue_is_read_whole_and_the_connection_kept(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []

    def serve(conn: socket.socket, n: int) -> None:
        while box[0].read(conn, n) is not None:
            conn.sendall(
                b"HTTP/1.1 100 Continue\r\n\r\n"
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nX-Thing: A\r\n\r\n"
                b'5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n'
            )

    box.append(serving(serve))
    async with client() as c:
        first = await post(c, box[0].url)
        second = await post(c, box[0].url)
    assert first.content == second.content == b'{"a": 1}'
    assert first.headers["x-thing"] == "A"
    assert box[0].accepted == 1


async def test_an_answer_that_runs_until_the_server_closes_is_read_whole_and_not_kept(
    serving: Callable[..., RawServer],
) -> None:
    big = b'{"text": "' + b"x" * 300_000 + b'"}'
    box: list[RawServer] = []

    def serve(conn: socket.socket, n: int) -> None:
        if box[0].read(conn, n) is not None:
            conn.sendall(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n")
            for i in range(0, len(big), 50_000):
                conn.sendall(big[i : i + 50_000])
                time.sleep(0.005)

    box.append(serving(serve))
    async with client() as c:
        reply = await post(c, box[0].url)
        assert reply.content == big
        assert c.idle_connections() == 0


async def test_an_answer_past_the_bound_fails_the_turn_once_without_a_retry(
    serving: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(h11_client, "MAX_ANSWER_BYTES", 10_000)
    box: list[RawServer] = []

    def serve(conn: socket.socket, n: int) -> None:
        while box[0].read(conn, n) is not None:
            conn.sendall(answer(b'{"text": "' + b"x" * 20_000 + b'"}'))

    box.append(serving(serve))
    model = AnthropicModel("m", base_url=f"http://127.0.0.1:{box[0].port}")
    params = ModelCompleteParams(run_id="r", messages=[ChatMessage(role="user", content="hi")])
    with anyio.fail_after(DEADLINE), pytest.raises(RemoteError) as caught:
        await model.complete(params)
    assert caught.value.code == ErrorCode.MODEL_ERROR
    assert "larger than 10000 bytes" in caught.value.message, caught.value.message
    assert len(box[0].requests) == 1


async def test_a_request_cancelled_while_it_waits_closes_its_connection(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []
    box.append(serving(lambda conn, n: box[0].read(conn, n) and box[0].read(conn, n) and None))
    async with client() as c:
        with anyio.move_on_after(0.2) as scope:
            await post(c, box[0].url)
        assert scope.cancelled_caught
        assert c.idle_connections() == 0
        assert box[0].wait_closed_by_client(0)


async def test_idle_connections_past_their_time_or_beyond_their_number_are_closed(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []
    box.append(serving(answering(box)))
    async with client(max_idle=1, idle_seconds=0.2) as c:
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(post, c, box[0].url)
        assert box[0].accepted == 2
        assert c.idle_connections() == 1  # one of the two was closed: no room for it
        assert box[0].wait_closed_by_client()
        kept = box[0].client_closed.index(False)
        await anyio.sleep(0.3)
        await post(c, box[0].url)  # the kept one has expired: a fresh connection
        assert box[0].accepted == 3
        assert box[0].wait_closed_by_client(kept)


async def test_https_trusts_only_what_its_context_trusts(
    serving: Callable[..., RawServer],
) -> None:
    ca = RunCA("test", ["127.0.0.1"])
    box: list[RawServer] = []
    box.append(serving(answering(box), tls=ca.server_context("127.0.0.1")))
    url = f"https://127.0.0.1:{box[0].port}/v1/messages"
    trusting = ssl.create_default_context(cadata=ca.cert_pem.decode())
    async with H11Client(ssl_context=trusting) as c:
        assert (await post(c, url)).content == OK
        assert (await post(c, url)).content == OK
    async with client() as c:  # the default context does not know the run's CA
        with pytest.raises(httpx.ConnectError):
            await post(c, url)
    assert box[0].accepted == 2
    assert len(box[0].requests) == 2


async def test_a_key_that_would_split_the_request_fails_the_turn_unsent_and_unquoted(
    serving: Callable[..., RawServer],
) -> None:
    box: list[RawServer] = []
    box.append(serving(answering(box)))
    key = "sk-secret\r\nx-injected: 1"
    model = AnthropicModel("m", base_url=f"http://127.0.0.1:{box[0].port}", api_key=key)
    params = ModelCompleteParams(run_id="r", messages=[ChatMessage(role="user", content="hi")])
    with anyio.fail_after(DEADLINE), pytest.raises(RemoteError) as caught:
        await model.complete(params)
    assert caught.value.code == ErrorCode.MODEL_ERROR
    assert "malformed header" in caught.value.message
    assert "sk-secret" not in caught.value.message
    assert box[0].requests == []


async def test_only_an_environment_that_names_a_proxy_keeps_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not proxied({"NO_PROXY": "localhost", "PATH": "/bin", "https_proxy": ""})
    assert proxied({"HTTPS_PROXY": "http://proxy:3128"})
    assert proxied({"all_proxy": "socks5://proxy:1080"})
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    plain = _http._client(0, 0.0)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    behind = _http._client(0, 0.0)
    await plain.aclose()
    await behind.aclose()
    assert isinstance(plain, H11Client)
    assert isinstance(behind, HttpxClient)
