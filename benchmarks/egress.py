"""The egress group of `scripts/bench`: what a run's egress proxy costs a request and a download.

A loopback HTTP server (`children/http_server.py`, its own process) and a client
(`children/http_client.py`, a fresh process per sample block) talk either directly or through
an `EgressProxy` served by this process's event loop, as a child's `curl` or pip talks to its
run's proxy. The policy lists the server's literal (`127.0.0.1:PORT`), so the proxy checks,
pins and relays exactly as for an allowed host, without a resolver. Per round, interleaved:
small requests on one kept-alive connection direct, then through the proxy (absolute form,
its upstream kept alive too); a 64 MiB download direct, through the proxy in absolute form,
through a `CONNECT` tunnel, and through a bare relay process (`children/splice_relay.py`: no
policy, no HTTP), the cost of any relay here. Round 0 warms up and is dropped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import anyio

from benchmarks.report import Figure, Results
from tether.parent.egress.policy import NetworkPolicy, parse_destination
from tether.parent.egress.proxy import EgressProxy

HERE = Path(__file__).resolve().parent
SERVER = HERE / "children" / "http_server.py"
RELAY = HERE / "children" / "splice_relay.py"
CLIENT = HERE / "children" / "http_client.py"
DOWNLOAD = 64 * 1024 * 1024


async def _client(mode: str, port: int, proxy: int, n: int) -> str:
    got = await anyio.run_process(
        [sys.executable, str(CLIENT), mode, str(port), str(proxy), str(n)], check=True
    )
    return got.stdout.decode()


async def _port_of(proc: anyio.abc.Process) -> int:
    """The port a helper prints on its first line."""
    assert proc.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        line += await proc.stdout.receive(64)
    return int(line)


def _mib_per_s(ns: int) -> float:
    return (DOWNLOAD / (1024 * 1024)) / (ns / 1e9)


async def egress_group(res: Results, rounds: int, requests: int) -> None:
    s: defaultdict[str, list[float]] = defaultdict(list)
    async with (
        await anyio.open_process(
            [sys.executable, str(SERVER), str(DOWNLOAD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        ) as server,
    ):
        port = await _port_of(server)
        relay = await anyio.open_process(
            [sys.executable, str(RELAY), str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        relayed = await _port_of(relay)
        policy = NetworkPolicy((parse_destination(f"127.0.0.1:{port}"),), max_bytes_down=1 << 40)
        async with EgressProxy("bench", policy, own=frozenset()) as proxy:
            via = await proxy.listen_loopback()
            for rnd in range(rounds + 1):
                direct = json.loads(await _client("small", port, 0, requests))
                proxied = json.loads(await _client("small", port, via, requests))
                s["floor.direct_request"] += [ns / 1e3 for ns in direct]
                s["tether.egress_request"] += [ns / 1e3 for ns in proxied]
                big = await _client("big", port, 0, 1)
                s["floor.direct_download"].append(_mib_per_s(int(big)))
                big = await _client("big", port, via, 1)
                s["tether.egress_download"].append(_mib_per_s(int(big)))
                big = await _client("tunnel", port, via, 1)
                s["context.egress_tunnel_download"].append(_mib_per_s(int(big)))
                big = await _client("big", relayed, 0, 1)
                s["context.bare_relay_download"].append(_mib_per_s(int(big)))
                if rnd == 0:
                    for samples in s.values():
                        samples.clear()
        for proc in (relay, server):
            assert proc.stdin is not None
            await proc.stdin.aclose()
            await proc.wait()
    _figures(res, s, requests)


def _figures(res: Results, s: defaultdict[str, list[float]], requests: int) -> None:
    res.add(
        Figure(
            "floor.direct_request",
            "a small GET on a kept-alive loopback connection, straight to the server",
            "µs",
            s["floor.direct_request"],
            f"{requests} GETs of 32 bytes per round from a client process to the server "
            "process: from the request's first byte sent to the response's last byte read",
        )
    )
    res.add(
        Figure(
            "tether.egress_request",
            "the same GET through a run's egress proxy",
            "µs",
            s["tether.egress_request"],
            "as the floor, the client sending absolute-form requests to an `EgressProxy` in the "
            "bench's event loop (policy check, pinned upstream kept alive, relayed both ways)",
            floor="floor.direct_request",
        )
    )
    res.add(
        Figure(
            "floor.direct_download",
            "a 64 MiB download over loopback, straight to the server",
            "MiB/s",
            s["floor.direct_download"],
            "one GET of 64 MiB, read with `recv_into` into a 1 MiB buffer: from the request "
            "sent to the last byte read",
        )
    )
    res.add(
        Figure(
            "tether.egress_download",
            "the same download through a run's egress proxy (absolute form)",
            "MiB/s",
            s["tether.egress_download"],
            "as the floor, through the proxy: each body chunk read from the server, framed by "
            "h11 and written to the client",
            floor="floor.direct_download",
        )
    )
    res.add(
        Figure(
            "context.egress_tunnel_download",
            "the same download through a `CONNECT` tunnel of the proxy",
            "MiB/s",
            s["context.egress_tunnel_download"],
            "as the floor, the tunnel opened before the clock starts: bytes relayed as they come "
            "(what HTTPS through the proxy costs, less the TLS both ends do anyway)",
            floor="floor.direct_download",
        )
    )
    res.add(
        Figure(
            "context.bare_relay_download",
            "the same download through a bare relay process (no policy, no HTTP)",
            "MiB/s",
            s["context.bare_relay_download"],
            "as the floor, through `children/splice_relay.py`: a process of its own that only "
            "splices bytes between the two sockets in blocking threads. What putting any relay "
            "process between client and server costs here: the bound under the proxy's figures",
            floor="floor.direct_download",
        )
    )
