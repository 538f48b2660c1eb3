"""The gateway against hostile HTTP clients on loopback raw sockets (issue 30, breaks 1 and 2):
it judges a request from its head before it reads a byte of its body, holds a run's bodies
within that run's own bounds, cuts slow senders at their deadlines, and keeps a run's
connections in a pool of its own, so a flood by one run never stops a sibling's calls.

Memory is measured by the server's own count of the body bytes it buffers (`held_bytes`,
`peak_held_bytes`), not by RSS."""

from __future__ import annotations

import anyio
import pytest
from gateway_kit import GONE, TEXT, Exchange, MiB, Recording, call, exchange, head, until

from tether.parent.gateway import Gateway, GatewayLimits, HttpLimits
from tether.parent.gateway.http import Head, HttpServer, Quota, Request, Responder

pytestmark = pytest.mark.anyio


def limits(**http: float) -> GatewayLimits:
    return GatewayLimits(http=HttpLimits(**http))  # type: ignore[arg-type]


# --- authenticate first, buffer within bounds ---------------------------------------------------


@pytest.mark.parametrize("token", [None, "tether-cap-guessed"])
async def test_a_large_body_without_a_valid_token_is_refused_from_its_head_holding_none_of_it(
    token: str | None,
) -> None:
    """The issue's attack: 23 connections each declaring 32 MiB and sending 30 MiB of it,
    never the rest. Each is answered 401 from its head, at once, and closed; the server holds
    none of the bodies."""
    async with Gateway(limits(header_timeout=10, body_timeout=30)) as gw:
        gw.grant("run-honest", Recording(TEXT))
        assert gw.address is not None
        address = gw.address
        done: list[Exchange] = []

        async def attack() -> None:
            done.append(
                await exchange(
                    address, head(token, 32 * MiB), body=30 * MiB, stop_when_answered=True
                )
            )

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for _ in range(23):
                    tg.start_soon(attack)
        assert [d.status for d in done] == [401] * 23
        assert all(b"invalid capability token" in d.got for d in done)
        # Answered long before either deadline (the body is never waited for), then closed.
        assert all(d.answered_after is not None and d.answered_after < 5 for d in done)
        assert all(d.closed_after is not None for d in done)
        assert gw.server.peak_held_bytes == 0 and gw.server.held_bytes == 0
        assert gw.requests == 0


async def test_a_runs_partial_bodies_hold_no_more_than_its_own_bound_and_a_sibling_is_served() -> (
    None
):
    """With a valid token, eight connections each declaring 32 MiB and sending 30 MiB: the
    run's held-bytes bound (64 MiB by default) admits two bodies and refuses the rest from
    their heads (429); the two are cut at the body deadline (408). Meanwhile a sibling run's
    calls are served: its bound is its own."""
    async with Gateway(limits(body_timeout=4)) as gw:
        flooder = gw.grant("run-flood", Recording())
        sibling = gw.grant("run-sibling", Recording(TEXT, TEXT))
        quota = flooder.quota
        assert (quota.max_body_bytes, quota.max_held_bytes) == (32 * MiB, 64 * MiB)
        assert gw.address is not None
        address = gw.address
        done: list[Exchange] = []

        async def attack() -> None:
            done.append(await exchange(address, head(flooder.token, 32 * MiB), body=30 * MiB))

        with anyio.fail_after(40):
            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(attack)
                await until(lambda: gw.server.held_bytes >= 60 * MiB)
                assert await call(gw, sibling.token) == 200
                assert await call(gw, sibling.token) == 200
        statuses = sorted(d.status or 0 for d in done)
        assert statuses == [408, 408] + [429] * 6, statuses
        for d in done:
            assert d.answered_after is not None
            if d.status == 429:
                assert b"hold too many bytes" in d.got and b"retry-after: 1" in d.got
            else:
                assert d.answered_after > 3  # the admitted two waited out their deadline
        assert 60 * MiB <= gw.server.peak_held_bytes <= quota.max_held_bytes
        assert gw.server.held_bytes == 0 and quota.reserved_bytes == 0
        assert sibling.calls == 2 and flooder.calls == 0


async def test_a_body_is_bounded_by_its_runs_own_request_size() -> None:
    async with Gateway() as gw:
        small = gw.grant("run-small", Recording(TEXT), max_request_bytes=1024)
        large = gw.grant("run-large", Recording(TEXT))
        assert gw.address is not None
        refused = await exchange(gw.address, head(small.token, 2048), body=2048)
        assert refused.status == 413 and b"at most 1024 bytes" in refused.got
        # The same size is fine for a run whose own bound is larger (it is not JSON: 400).
        once = [b"connection: close"]
        fine = await exchange(gw.address, head(large.token, 2048, once), body=2048)
        assert fine.status == 400 and b"not JSON" in fine.got
        # A chunked body is counted as it comes.
        chunked = (
            b"POST /v1/messages HTTP/1.1\r\nhost: g\r\ntransfer-encoding: chunked\r\n"
            b"x-api-key: " + small.token.encode() + b"\r\n\r\n"
        )
        chunk = b"%x\r\n%s\r\n" % (700, b"x" * 700)
        over = await exchange(gw.address, chunked + chunk + chunk + b"0\r\n\r\n")
        assert over.status == 413
        assert gw.server.held_bytes == 0 and small.quota.reserved_bytes == 0


# --- slow senders -------------------------------------------------------------------------------


@pytest.mark.parametrize("part", ["head", "body"])
async def test_a_slow_sender_is_cut_at_its_deadline(part: str) -> None:
    """A byte every 0.1 s: a deadline per read would never fire; these are for the whole head
    (from its first byte) and the whole body (from the head)."""
    async with Gateway(limits(header_timeout=1.5, body_timeout=1.5)) as gw:
        grant = gw.grant("run-slow", Recording(TEXT))
        assert gw.address is not None
        request = head(grant.token, 1000)
        if part == "head":
            got = await exchange(gw.address, request, pace=0.1, wait=15)
        else:
            got = await exchange(gw.address, request, body=1000, pace=0.1, pace_payload=False)
        assert got.status == 408 and f"the request {part} did not arrive".encode() in got.got
        assert got.closed_after is not None and 1.4 < got.closed_after < 5
        assert gw.server.held_bytes == 0 and grant.quota.reserved_bytes == 0


async def test_a_connection_that_never_speaks_is_closed_at_the_head_deadline() -> None:
    async with Gateway(limits(header_timeout=1.0, idle_timeout=60)) as gw:
        assert gw.address is not None
        got = await exchange(gw.address, b"", wait=15)
    assert got.got == b"" and got.closed_after is not None and got.closed_after < 5


# --- per-run connection limits ------------------------------------------------------------------


async def _open(
    address: tuple[str, int], n: int, payload: bytes = b""
) -> list[anyio.abc.SocketStream]:
    """`n` connections, each sent `payload` and then nothing more."""
    held = []
    for _ in range(n):
        stream = await anyio.connect_tcp(*address)
        if payload:
            await stream.send(payload)
        held.append(stream)
    return held


async def _close(streams: list[anyio.abc.SocketStream]) -> None:
    for s in streams:
        await s.aclose()


async def test_a_run_flooding_its_own_address_cannot_stop_a_siblings_calls() -> None:
    """The issue's attack on a run's own gateway address (a sandboxed agent's only one): 320
    idle connections and 40 holding unfinished bodies with its token. Its pool holds its 16;
    the sibling's calls, on its own address, are all served."""
    async with Gateway() as gw:
        flooder = gw.grant("run-flood", Recording())
        sibling = gw.grant("run-sibling", Recording(*[TEXT] * 10))
        flood_address = await gw.listen_for(flooder)
        _, port = await gw.listen_for(sibling)
        sibling_url = f"http://127.0.0.1:{port}"
        held: list[anyio.abc.SocketStream] = []
        try:
            with anyio.fail_after(60):
                held += await _open(flood_address, 40, head(flooder.token, 1000) + b"x" * 10)
                held += await _open(flood_address, 320)
                await until(lambda: gw.server.refused_connections >= 360 - 16)
                assert flooder.quota.connections == 16
                statuses = [await call(gw, sibling.token, sibling_url) for _ in range(5)]
                async with anyio.create_task_group() as tg:
                    for _ in range(5):

                        async def one() -> None:
                            statuses.append(await call(gw, sibling.token, sibling_url))

                        tg.start_soon(one)
                assert statuses == [200] * 10
                assert flooder.quota.connections == 16
                assert gw.server.connections <= 16 + 5
        finally:
            await _close(held)
        assert sibling.calls == 10


async def test_a_run_flooding_the_shared_address_cannot_stop_a_siblings_calls() -> None:
    """On the gateway's shared loopback address: 320 connections that never authenticate sit
    in the unclaimed pool (64, the oldest closed first), 40 that do are held to the flooder's
    own pool (16; the rest 429); the sibling's calls on the same address are all served."""
    async with Gateway() as gw:
        flooder = gw.grant("run-flood", Recording())
        sibling = gw.grant("run-sibling", Recording(*[TEXT] * 10))
        assert gw.address is not None
        held: list[anyio.abc.SocketStream] = []
        try:
            with anyio.fail_after(60):
                held += await _open(gw.address, 40, head(flooder.token, 1000) + b"x" * 10)
                await until(lambda: flooder.quota.connections == 16)
                held += await _open(gw.address, 320)
                await until(lambda: gw.server.unclaimed == 64)
                statuses = [await call(gw, sibling.token) for _ in range(5)]
                async with anyio.create_task_group() as tg:
                    for _ in range(5):

                        async def one() -> None:
                            statuses.append(await call(gw, sibling.token))

                        tg.start_soon(one)
                assert statuses == [200] * 10
                assert flooder.quota.connections == 16 and gw.server.unclaimed <= 64
                answers = await _answers(held[:40])
                assert sorted(a[:13] for a in answers) == [b""] * 16 + [b"HTTP/1.1 429 "] * 24
                why = b"too many connections for this run (at most 16)"
                assert all(why in a for a in answers if a)
        finally:
            await _close(held)


async def _answers(streams: list[anyio.abc.SocketStream]) -> list[bytes]:
    """What each stream is sent within a second (until the server closes it)."""
    got: list[bytes] = []

    async def one(stream: anyio.abc.SocketStream) -> None:
        data = b""
        with anyio.move_on_after(1):
            try:
                while True:
                    data += await stream.receive()
            except GONE:
                pass
        got.append(data)

    async with anyio.create_task_group() as tg:
        for s in streams:
            tg.start_soon(one, s)
    return got


async def test_a_flood_of_a_siblings_own_address_cannot_stop_its_calls() -> None:
    """At the process level an agent can reach a sibling's listener too: its connections
    there count in the sibling's pool but are never admitted (another token is refused), so
    they never keep the sibling from a connection of its own."""
    async with Gateway() as gw:
        flooder = gw.grant("run-flood", Recording())
        sibling = gw.grant("run-sibling", Recording(*[TEXT] * 5))
        address = await gw.listen_for(sibling)
        url = f"http://{address[0]}:{address[1]}"
        held: list[anyio.abc.SocketStream] = []
        try:
            with anyio.fail_after(60):
                held += await _open(address, 20, head(flooder.token, 1000) + b"x" * 10)
                held += await _open(address, 300)
                await until(lambda: gw.server.refused_connections >= 320 - 16)
                assert [await call(gw, sibling.token, url) for _ in range(5)] == [200] * 5
                assert sibling.quota.connections <= 16
        finally:
            await _close(held)
        assert flooder.calls == 0 and sibling.calls == 5


async def test_a_full_pool_closes_its_oldest_idle_connection_for_a_new_one() -> None:
    """An honest client that opens a new connection while its old ones idle is served: the
    oldest idle one of its own pool makes room (a connection mid-request never does)."""
    async with Gateway(GatewayLimits(run_connections=2)) as gw:
        grant = gw.grant("run-churn", Recording(TEXT))
        address = await gw.listen_for(grant)
        idle = await _open(address, 2)
        try:
            await until(lambda: grant.quota.connections == 2)
            assert await call(gw, grant.token, f"http://{address[0]}:{address[1]}") == 200
            with anyio.fail_after(5):
                with pytest.raises(anyio.EndOfStream):
                    await idle[0].receive()  # the oldest was closed to make room
            assert grant.quota.connections <= 2
        finally:
            await _close(idle)


async def test_the_gateway_as_a_whole_holds_no_more_than_its_own_connection_limit() -> None:
    async with Gateway(limits(max_connections=40)) as gw:
        grants = [gw.grant(f"run-{i}", Recording()) for i in range(4)]
        addresses = [await gw.listen_for(g) for g in grants]
        held: list[anyio.abc.SocketStream] = []
        try:
            for address in addresses:
                held += await _open(address, 30)
            await until(lambda: gw.server.refused_connections >= 4 * 30 - 40)
            assert gw.server.connections <= 40
            assert all(g.quota.connections <= 16 for g in grants)
        finally:
            await _close(held)


async def test_an_admission_that_fails_is_a_500_and_the_server_serves_on() -> None:
    def admit(head: Head) -> Quota:
        raise RuntimeError("a bug in the admission")

    async def handler(request: Request, responder: Responder) -> None:
        raise AssertionError("never admitted, never handled")

    async with HttpServer(admit, handler) as server:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await server.listen(listener)
        for _ in range(2):
            got = await exchange(("127.0.0.1", port), head(None, 0))
            assert got.status == 500 and b"internal error" in got.got
            assert b"a bug" not in got.got
