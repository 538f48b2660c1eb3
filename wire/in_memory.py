"""A peer served in memory: one helper that wires it.

`serve_in_memory(serve)` makes two in-memory pipes, runs `serve(receive, send)` (tether's child
runtime, `tether.child.server.serve_streams`, or any peer that speaks over a byte-stream pair) in
a task on the far ends, and hands the caller the near ends: what the peer writes (`receive`) and
the peer's input (`send`). The same conversation as over a pipe pair, without a process.

The end of the peer's input is its lifeline, as stdin's end is a child process's: leaving the
context closes it, waits up to `grace` seconds for `serve` to return, and then cancels it — which,
in memory, always works. Once `serve` has returned, its output is closed (the caller's reader
sees the end of the stream) and `stopped` is set; `result` holds what it returned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from tether.wire.streams import MemoryReceiveStream, MemorySendStream, memory_pipe

T = TypeVar("T")

DEFAULT_GRACE = 2.0
"""How long a peer whose input ended may take to return before it is cancelled."""


class InMemoryPeer(Generic[T]):
    """The caller's side of a peer served in memory (see the module docstring)."""

    def __init__(self, receive: MemoryReceiveStream, send: MemorySendStream) -> None:
        self.receive = receive
        """What the peer writes."""
        self.send = send
        """The peer's input; closing it is the peer's lifeline."""
        self.stopped = anyio.Event()
        """Set once `serve` has returned (or was cancelled) and its output is closed."""
        self.result: T | None = None
        """What `serve` returned (`None` until then, and when it was cancelled)."""

    async def close_input(self) -> None:
        """End the peer's input (its lifeline)."""
        await self.send.aclose()


@asynccontextmanager
async def serve_in_memory(
    serve: Callable[[ByteReceiveStream, ByteSendStream], Awaitable[T]],
    *,
    grace: float = DEFAULT_GRACE,
    max_chunks: float = 64,
) -> AsyncIterator[InMemoryPeer[T]]:
    """Run `serve` on the far ends of two in-memory pipes (each holding `max_chunks` unread
    writes before a writer waits) and yield the near ends; see the module docstring. An
    exception `serve` raises propagates out of the context, as a task's does."""
    to_peer_w, to_peer_r = memory_pipe(max_chunks)
    from_peer_w, from_peer_r = memory_pipe(max_chunks)
    peer: InMemoryPeer[T] = InMemoryPeer(from_peer_r, to_peer_w)

    async def run() -> None:
        try:
            peer.result = await serve(to_peer_r, from_peer_w)
        finally:
            await from_peer_w.aclose()
            peer.stopped.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            try:
                yield peer
            finally:
                with anyio.CancelScope(shield=True):
                    await peer.close_input()
                    with anyio.move_on_after(grace):
                        await peer.stopped.wait()
                tg.cancel_scope.cancel()
    finally:
        for end in (to_peer_w, to_peer_r, from_peer_w, from_peer_r):
            await end.aclose()
