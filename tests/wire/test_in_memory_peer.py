"""`serve_in_memory`: a peer served in a task over in-memory pipes, its input's end its lifeline,
a peer that ignores it cancelled after the grace — the helper every in-memory child is wired by."""

from __future__ import annotations

import time

import anyio
import pytest
from anyio.abc import ByteReceiveStream, ByteSendStream

from tether.wire.in_memory import serve_in_memory

pytestmark = pytest.mark.anyio


async def test_what_the_peer_writes_arrives_and_its_return_ends_the_stream() -> None:
    async def serve(receive: ByteReceiveStream, send: ByteSendStream) -> str:
        await send.send(b"hello\n")
        return "said it"

    with anyio.fail_after(5):
        async with serve_in_memory(serve) as peer:
            assert await peer.receive.receive() == b"hello\n"
            with pytest.raises(anyio.EndOfStream):
                await peer.receive.receive()
            await peer.stopped.wait()
            assert peer.result == "said it"


async def test_leaving_ends_the_peers_input_and_waits_for_it_to_return() -> None:
    heard: list[bytes] = []

    async def serve(receive: ByteReceiveStream, send: ByteSendStream) -> int:
        while True:
            try:
                heard.append(await receive.receive())
            except anyio.EndOfStream:
                await anyio.sleep(0.05)  # a little tidying up after the lifeline
                return 7

    with anyio.fail_after(5):
        async with serve_in_memory(serve, grace=5) as peer:
            await peer.send.send(b"one")
        assert peer.stopped.is_set() and peer.result == 7
    assert heard == [b"one"]


async def test_a_peer_deaf_to_the_end_of_its_input_is_cancelled_after_the_grace() -> None:
    cancelled = anyio.Event()

    async def serve(receive: ByteReceiveStream, send: ByteSendStream) -> int:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return 0  # never reached

    started = time.monotonic()
    with anyio.fail_after(5):
        async with serve_in_memory(serve, grace=0.2) as peer:
            pass
    took = time.monotonic() - started
    assert cancelled.is_set() and peer.stopped.is_set() and peer.result is None
    assert 0.2 <= took < 4.0


async def test_a_peer_that_raises_raises_out_of_the_context() -> None:
    async def serve(receive: ByteReceiveStream, send: ByteSendStream) -> int:
        raise RuntimeError("the peer's own bug")

    with pytest.raises(ExceptionGroup) as caught:
        async with serve_in_memory(serve) as peer:
            await peer.stopped.wait()
    assert caught.group_contains(RuntimeError, match="the peer's own bug")
