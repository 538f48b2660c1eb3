"""Byte streams the wire runs over: raw pipe fds, and an in-memory pair.

Both implement anyio's `ByteReceiveStream` / `ByteSendStream`, so the endpoint that pumps a
`Connection` neither knows nor cares whether its peer is a child process on a pipe pair, a
runtime in the same process (tests, the in-process provider) or a relay to another machine.

Fd streams own bare file descriptors instead of asyncio transports so that nothing waits on
*all* holders of a pipe closing it: a grandchild that inherited a child's stdout cannot delay
the parent. Pipes and sockets are non-blocking and awaited with `anyio.wait_readable/writable`;
anything else (a session replayed from a file, a terminal) is read and written in a worker
thread, where a blocking call is harmless. Closing notifies anyio first, so a task parked on
the fd wakes instead of waiting forever.

Writes are whole messages: once a message's first byte is out, the rest follows, shielded from
cancellation, because half a line would corrupt the stream for every later message. A reader
that takes no more of it within `finish_seconds` (a stuck peer with a full pipe) gets the pipe
closed, never a hang (`None`: wait as long as it takes, for a side that has another backstop).
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import stat
import struct
import termios

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

READ_CHUNK = 256 * 1024
FINISH_SECONDS = 2.0


def pollable(fd: int) -> bool:
    """Pipes and sockets only: a terminal's O_NONBLOCK flag is shared with the shell that owns
    it, and would outlive us there."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def restore_blocking(*fds: int) -> None:
    """Undo O_NONBLOCK: the flag lives on the open file, which another process may share."""
    for fd in fds:
        try:
            if pollable(fd):
                os.set_blocking(fd, True)
        except OSError:
            pass


class FdReceiveStream(ByteReceiveStream):
    """Reads a pipe (or any fd). End of stream, a read error and a local close all end it."""

    __slots__ = ("_closed", "_fd", "_pollable")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pollable = pollable(fd)
        if self._pollable:
            os.set_blocking(fd, False)
        self._closed = False

    @property
    def fd(self) -> int:
        return self._fd

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        """The next chunk; raises `anyio.EndOfStream` at the end (or once closed here)."""
        while not self._closed:
            try:
                if not self._pollable:
                    data = await anyio.to_thread.run_sync(
                        os.read, self._fd, max_bytes, abandon_on_cancel=True
                    )
                else:
                    data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                try:
                    await anyio.wait_readable(self._fd)
                except (anyio.ClosedResourceError, OSError):
                    break
                continue
            except OSError as exc:
                if exc.errno in (errno.EBADF, errno.EIO, errno.ECONNRESET):
                    break
                raise
            if not data:
                break
            return data
        raise anyio.EndOfStream

    @property
    def closed(self) -> bool:
        return self._closed

    def unread(self) -> int:
        """Bytes waiting in the pipe that no `receive()` has taken yet (0 once closed)."""
        if self._closed:
            return 0
        try:
            got = fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return 0
        return int(struct.unpack("i", got)[0])

    def close(self) -> None:
        """Close this end; a task parked in `receive()` wakes to end of stream."""
        if not self._closed:
            self._closed = True
            if self._pollable:
                anyio.notify_closing(self._fd)
            os.close(self._fd)

    async def aclose(self) -> None:
        self.close()


class FdSendStream(ByteSendStream):
    """Writes whole messages to a pipe (or any fd); see the module docstring."""

    __slots__ = ("_closed", "_fd", "_finish_seconds", "_lock", "_pollable")

    def __init__(self, fd: int, *, finish_seconds: float | None = FINISH_SECONDS) -> None:
        self._fd = fd
        self._pollable = pollable(fd)
        if self._pollable:
            os.set_blocking(fd, False)
        self._closed = False
        self._finish_seconds = finish_seconds
        # No checkpoint when uncontended: one event-loop turn less per message.
        self._lock = anyio.Lock(fast_acquire=True)

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, item: bytes) -> None:
        """Write every byte of `item`, never interleaved with another writer's message.

        Raises `anyio.BrokenResourceError` when the reader is gone (or the rest of a started
        message could not be delivered in time, which closes the pipe) and
        `anyio.ClosedResourceError` once this end was closed.
        """
        async with self._lock:
            view = memoryview(item)
            while view:
                view = view[await self._write_some(view) :]
                if len(view) < len(item):
                    break  # the first byte is out: what is left must follow, whatever happens
            if not view:
                return
            limit = math.inf if self._finish_seconds is None else self._finish_seconds
            with anyio.CancelScope(shield=True), anyio.move_on_after(limit):
                while view:
                    view = view[await self._write_some(view) :]
            if view:
                self.close()
                raise anyio.BrokenResourceError(
                    f"the reader took no more of a message for {self._finish_seconds:g} s; "
                    "the pipe was closed rather than left with half a line"
                )

    async def _write_some(self, data: memoryview) -> int:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                if self._pollable:
                    return os.write(self._fd, data)
                return await anyio.to_thread.run_sync(os.write, self._fd, data)
            except BlockingIOError:
                try:
                    await anyio.wait_writable(self._fd)
                except (anyio.ClosedResourceError, OSError) as exc:
                    raise anyio.ClosedResourceError from exc
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError("the reader of the pipe is gone") from exc
            except OSError as exc:
                raise anyio.BrokenResourceError(str(exc)) from exc

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._pollable:
                anyio.notify_closing(self._fd)
            os.close(self._fd)

    async def aclose(self) -> None:
        self.close()


class MemoryReceiveStream(ByteReceiveStream):
    """The reading end of an in-memory pipe (see `memory_pipe`)."""

    def __init__(self, chunks: MemoryObjectReceiveStream[bytes]) -> None:
        self._chunks = chunks
        self._rest = b""

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        if not self._rest:
            try:
                self._rest = await self._chunks.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise anyio.EndOfStream from None
        data, self._rest = self._rest[:max_bytes], self._rest[max_bytes:]
        return data

    async def aclose(self) -> None:
        self._chunks.close()


class MemorySendStream(ByteSendStream):
    """The writing end of an in-memory pipe (see `memory_pipe`)."""

    def __init__(self, chunks: MemoryObjectSendStream[bytes]) -> None:
        self._chunks = chunks

    async def send(self, item: bytes) -> None:
        try:
            await self._chunks.send(bytes(item))
        except anyio.ClosedResourceError:
            raise
        except anyio.BrokenResourceError:
            raise anyio.BrokenResourceError("the reading end is closed") from None

    async def aclose(self) -> None:
        self._chunks.close()


def memory_pipe(max_chunks: float = 64) -> tuple[MemorySendStream, MemoryReceiveStream]:
    """An in-memory, one-way byte pipe; a writer waits once `max_chunks` writes are unread
    (the in-memory form of a full pipe buffer)."""
    send, receive = anyio.create_memory_object_stream[bytes](max_chunks)
    return MemorySendStream(send), MemoryReceiveStream(receive)
