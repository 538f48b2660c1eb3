"""ACP driver and model gateway figures, each beside a floor measured in the same run.

    .venv/bin/python -m benchmarks.acp [--runs N] [--calls N]

- `acp.run`: a whole scripted run through `AcpDriver` against tests/children/acp_agent.py (a
  Python ACP agent on the `agent-client-protocol` package): spawn → initialize → session/new →
  session/prompt → result. Floors: spawning `python -c "import acp"` to exit (the agent's own
  start-up, which no driver can avoid), and a bare `python -c pass`.
- `gateway.call`: one non-streaming `POST /v1/messages` through the gateway (token check, JSON
  translation both ways, a scripted provider, metering) with httpx on a kept-alive connection.
  Floor: the same httpx POST to a trivial h11-over-anyio loopback server that answers a fixed
  JSON body (the HTTP cost alone).

Samples interleave (one of each per round) so outside load lands on a figure and its floor
alike. Prints median and interquartile range in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import h11
import httpx
from anyio.abc import SocketStream

from tether.parent.gateway import Gateway
from tether.parent.models.scripted import ScriptedModel, ScriptedTurn
from tether.parent.providers.acp import AcpDriver, AcpLimits, AcpTask
from tether.protocol.messages import Usage

ROOT = Path(__file__).resolve().parents[1]
AGENT = [sys.executable, str(ROOT / "tests" / "children" / "acp_agent.py")]
BODY = {
    "model": "m",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}


async def acp_run(workspace: Path) -> float:
    steps = json.dumps([{"say": "done"}])
    started = time.perf_counter()
    process = await anyio.open_process(AGENT, start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        assert process.stdin is not None and process.stdout is not None
        driver = AcpDriver(
            process.stdin,
            process.stdout,
            AcpTask("bench", steps, workspace),
            limits=AcpLimits(wall=30),
        )
        outcome = await driver.run()
        took = time.perf_counter() - started
        assert outcome.result().success, outcome.result()
    finally:
        await process.stdin.aclose()  # type: ignore[union-attr]
        with anyio.fail_after(10):
            await process.wait()
        await process.aclose()
    return took


async def spawn_exit(argv: list[str]) -> float:
    started = time.perf_counter()
    process = await anyio.open_process(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    await process.wait()
    await process.aclose()
    return time.perf_counter() - started


async def trivial_h11(stream: SocketStream) -> None:
    body = b'{"ok": true}'
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    conn.receive_data(await stream.receive())
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                continue
            if isinstance(event, h11.EndOfMessage):
                data = conn.send(
                    h11.Response(
                        status_code=200,
                        headers=[("content-type", "application/json"), ("content-length", "12")],
                    )
                )
                data = (data or b"") + (conn.send(h11.Data(data=body)) or b"")
                data += conn.send(h11.EndOfMessage()) or b""
                await stream.send(data)
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return


def stats(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    q1, _, q3 = statistics.quantiles(ms, n=4) if len(ms) > 1 else (ms[0], ms[0], ms[0])
    return f"median {statistics.median(ms):8.3f} ms   IQR {q1:8.3f} - {q3:8.3f}   (n={len(ms)})"


async def main(runs: int, calls: int) -> None:
    results: dict[str, list[float]] = {
        "acp.run": [],
        "floor.python_import_acp": [],
        "floor.python_bare": [],
    }
    workspace = Path("/tmp") / "tether-bench-acp"
    workspace.mkdir(exist_ok=True)
    figures: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("acp.run", lambda: acp_run(workspace)),
        ("floor.python_import_acp", lambda: spawn_exit([sys.executable, "-c", "import acp"])),
        ("floor.python_bare", lambda: spawn_exit([sys.executable, "-c", "pass"])),
    ]
    await acp_run(workspace)  # warm the page cache
    for _ in range(runs):
        for name, measure in figures:
            results[name].append(await measure())

    turns = [ScriptedTurn(text="ok", usage=Usage(input_tokens=1, output_tokens=1))] * (calls + 10)
    results["gateway.call"] = []
    results["floor.h11_post"] = []
    async with Gateway() as gateway, anyio.create_task_group() as tg:
        grant = gateway.grant("bench", ScriptedModel(turns))
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(listener.serve, trivial_h11)
        headers = {"x-api-key": grant.token}
        async with (
            httpx.AsyncClient(base_url=gateway.base_url, trust_env=False) as via_gateway,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as floor,
        ):
            for _ in range(5):  # warm both connections
                await via_gateway.post("/v1/messages", json=BODY, headers=headers)
                await floor.post("/v1/messages", json=BODY, headers=headers)
            for _ in range(calls):
                started = time.perf_counter()
                r = await via_gateway.post("/v1/messages", json=BODY, headers=headers)
                results["gateway.call"].append(time.perf_counter() - started)
                assert r.status_code == 200
                started = time.perf_counter()
                r = await floor.post("/v1/messages", json=BODY, headers=headers)
                results["floor.h11_post"].append(time.perf_counter() - started)
                assert r.status_code == 200
        tg.cancel_scope.cancel()
    await listener.aclose()
    for name, samples in results.items():
        print(f"{name:26s} {stats(samples)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    anyio.run(main, args.runs, args.calls)
