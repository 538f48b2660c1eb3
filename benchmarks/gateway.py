"""The gateway group of `scripts/bench`: what the model gateway adds to a foreign agent's call.

A loopback model server (`children/model_server.py`, its own process) answers every
`POST /v1/messages` with the same Anthropic reply. A client process (`children/model_client.py`,
standing for a foreign agent: a fresh process per sample block) sends the same non-streaming
call either straight to that server or to a `Gateway` served by this process's event loop,
with its capability token; the gateway checks the token, translates the request, asks its
provider — an `AnthropicModel` pointed at the same server, on the kept-alive client models
share inside a supervisor —
meters the usage and translates the reply back. Per round, interleaved: a block direct, then a
block through the gateway. Round 0 warms up and is dropped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import anyio

from benchmarks.report import Figure, Results
from tether.parent.gateway import Gateway
from tether.parent.models.anthropic import AnthropicModel
from tether.parent.models.http_pool import pooled

HERE = Path(__file__).resolve().parent
SERVER = HERE / "children" / "model_server.py"
CLIENT = HERE / "children" / "model_client.py"


async def _client(port: int, token: str, n: int) -> list[int]:
    got = await anyio.run_process(
        [sys.executable, str(CLIENT), str(port), token, str(n)], check=True
    )
    took: list[int] = json.loads(got.stdout)
    return took


async def gateway_group(res: Results, rounds: int, calls: int) -> None:
    s: defaultdict[str, list[float]] = defaultdict(list)
    async with await anyio.open_process(
        [sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as server:
        assert server.stdout is not None and server.stdin is not None
        line = b""
        while not line.endswith(b"\n"):
            line += await server.stdout.receive(64)
        port = int(line)
        # As a supervisor's models would: the event loop's shared kept-alive client.
        async with pooled(), Gateway() as gateway:
            model = AnthropicModel("m", base_url=f"http://127.0.0.1:{port}")
            grant = gateway.grant("bench", model)
            assert gateway.address is not None
            via = gateway.address[1]
            for rnd in range(rounds + 1):
                direct = await _client(port, "unused", calls)
                through = await _client(via, grant.token, calls)
                if rnd == 0:
                    continue
                s["floor.direct_model_call"] += [ns / 1e3 for ns in direct]
                s["tether.gateway_call"] += [ns / 1e3 for ns in through]
        await server.stdin.aclose()
    res.add(
        Figure(
            "floor.direct_model_call",
            "a model call straight to the loopback model server",
            "µs",
            s["floor.direct_model_call"],
            f"{calls} non-streaming `POST /v1/messages` per round on one kept-alive connection, "
            "from a client process to `children/model_server.py` (a fixed one-block reply): "
            "from the request sent to the whole answer read",
        )
    )
    res.add(
        Figure(
            "tether.gateway_call",
            "the same call through the model gateway",
            "µs",
            s["tether.gateway_call"],
            "as the floor, to a `Gateway` in the bench's event loop with the run's capability "
            "token: token check, request translation, its provider (`AnthropicModel` to the same "
            "server, kept alive), usage metering, reply translation",
            floor="floor.direct_model_call",
        )
    )
