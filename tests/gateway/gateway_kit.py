"""What the gateway's tests share: a recording provider, request bodies, and a raw loopback
client that says exactly what it sent and what came back (a hostile client speaks HTTP by
hand)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from tether.parent.gateway import Gateway
from tether.parent.models.scripted import ScriptedModel, ScriptedTurn
from tether.protocol.messages import ModelCompleteParams, ModelCompleteResult, Usage

MiB = 1024 * 1024
TEXT = ScriptedTurn(text="Hello from tether.", usage=Usage(input_tokens=11, output_tokens=4))
GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class Recording:
    """A provider that remembers what it was asked, answering from a script."""

    def __init__(self, *turns: ScriptedTurn) -> None:
        self.inner = ScriptedModel(list(turns))
        self.asked: list[ModelCompleteParams] = []

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.asked.append(params)
        return await self.inner.complete(params)


def client(base_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=10)


def small_body(text: str = "hi", stream: bool = False) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 16,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    }


def head(token: str | None, length: int, extra: Sequence[bytes] = ()) -> bytes:
    """A `POST /v1/messages` head declaring a body of `length` bytes."""
    lines = [
        b"POST /v1/messages HTTP/1.1",
        b"host: gateway",
        b"content-type: application/json",
        b"content-length: %d" % length,
        *extra,
    ]
    if token is not None:
        lines.append(b"x-api-key: " + token.encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


@dataclass
class Exchange:
    got: bytes
    """Everything the server sent."""
    answered_after: float | None
    """Seconds from the connect to the first byte of the answer."""
    closed_after: float | None
    """Seconds from the connect to the server closing (`None`: still open at the end)."""

    @property
    def status(self) -> int | None:
        return int(self.got.split(b" ", 2)[1]) if self.got.startswith(b"HTTP/1.1 ") else None


async def exchange(
    address: tuple[str, int],
    payload: bytes,
    *,
    body: int = 0,
    pace: float = 0.0,
    pace_payload: bool = True,
    wait: float = 10.0,
    stop_when_answered: bool = False,
) -> Exchange:
    """Connect, send `payload` and then `body` bytes of filler, never anything more; read what
    comes back until the server closes or `wait` runs out. The filler goes 1 MiB at a time
    (stopping once answered, with `stop_when_answered`), or with `pace` a byte every `pace`
    seconds (the payload too, with `pace_payload`)."""
    started = time.monotonic()
    got = b""
    answered: float | None = None
    closed: float | None = None
    async with await anyio.connect_tcp(*address) as stream:

        async def trickle(data: bytes) -> None:
            for i in range(len(data)):
                await stream.send(data[i : i + 1])
                await anyio.sleep(pace)

        async def send() -> None:
            try:
                if pace and pace_payload:
                    await trickle(payload)
                elif payload:
                    await stream.send(payload)
                if pace:
                    await trickle(b"x" * body)
                    return
                left = body
                while left and not (stop_when_answered and answered is not None):
                    piece = min(MiB, left)
                    await stream.send(b"x" * piece)
                    left -= piece
            except GONE:
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            with anyio.move_on_after(wait):
                try:
                    while True:
                        data = await stream.receive()
                        if answered is None:
                            answered = time.monotonic() - started
                        got += data
                except GONE:
                    closed = time.monotonic() - started
            tg.cancel_scope.cancel()
    return Exchange(got, answered, closed)


async def until(predicate: Any, seconds: float = 20.0) -> None:
    """Wait (polling) until `predicate()` holds, failing after `seconds`."""
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.02)


async def call(gw: Gateway, token: str, base_url: str | None = None) -> int:
    """One non-streaming Anthropic call; its status."""
    async with client(base_url or gw.base_url) as c:
        r = await c.post("/v1/messages", json=small_body(), headers={"x-api-key": token})
    return r.status_code
