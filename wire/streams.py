"""Byte streams the wire runs over: raw pipe fds, and an in-memory pair.

Both implement anyio's `ByteReceiveStream` / `ByteSendStream`, so the endpoint that pumps a
`Connection` neither knows nor cares whether its peer is a child process on a pipe pair, a
runtime in the same process (tests, the in-process provider) or a relay to another machine.

Fd streams own bare file descriptors instead of asyncio transports so that nothing waits on
*all* holders of a pipe closing it: a grandchild that inherited a child's stdout cannot delay
the parent. Pipes and sockets are non-blocking: a reader keeps its fd registered with the
asyncio loop while it reads (`_Watch`; `anyio.wait_readable` on other event loops), a writer
awaits `anyio.wait_writable` when the pipe is full. Anything else (a session replayed from a
file, a terminal) is read and written in a worker thread, where a blocking call is harmless.
Closing wakes a task parked on the fd instead of leaving it waiting forever.

Writes are whole messages: once a message's first byte is out, the rest follows, shielded from
cancellation, because half a line would corrupt the stream for every later message. A reader
that takes no more of it within `finish_seconds` (a stuck peer with a full pipe) gets the pipe
closed, never a hang (`None`: wait as long as it takes, for a side that has another backstop).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import stat
import struct
import threading
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from tether.wire.pipesize import BUDGET

if TYPE_CHECKING:
    # Imported where it runs: importing this module must not load asyncio (and with it ssl)
    # in a process that only builds a command line.
    import asyncio

READ_CHUNK = 256 * 1024
LARGE_WRITE = 64 * 1024
"""A message at least this long grows the pipe first (a stream made with `grow=True`)."""
FINISH_SECONDS = 2.0
_GONE = (errno.EBADF, errno.EIO, errno.ECONNRESET)
"""Read errors that mean the stream is over (the writer's end is gone or this one closed)."""
_FIONREAD = 0x541B
"""`termios.FIONREAD` on Linux (x86_64 and aarch64 alike): importing `termios` for it cost
≈ 0.3 ms of every child's start."""


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
    """Reads a pipe (or any fd). End of stream, a read error and a local close all end it.

    On asyncio a pipe stays registered with the event loop between reads (`_Watch`), as
    asyncio's own pipe transports do: each message then costs one wake-up and one `read`,
    instead of a `read` that fails with EAGAIN, an `epoll_ctl` to register, the wait, and an
    `epoll_ctl` to unregister. What arrives while nobody receives is one chunk at most, held
    until the next `receive()`: reading pauses until then, so a busy reader still leaves the
    peer's pipe to fill (backpressure)."""

    __slots__ = ("_closed", "_fd", "_grow", "_pollable", "_watch")

    def __init__(self, fd: int, *, grow: bool = False) -> None:
        """`grow`: grow the pipe while a long line is read (`receive_into`), within the
        process's budget (`pipesize`)."""
        self._fd = fd
        self._pollable = pollable(fd)
        if self._pollable:
            os.set_blocking(fd, False)
        self._closed = False
        self._grow = grow and self._pollable
        self._watch: _Watch | None = None

    @property
    def fd(self) -> int:
        return self._fd

    async def receive_into(self, view: memoryview) -> int:
        """Read straight into `view` (a long line's buffer); the bytes read, at least one.
        Raises `anyio.EndOfStream` at the end (or once closed here)."""
        if self._grow and not self._closed:
            BUDGET.grow(self._fd)
        watch = self._current_watch()
        if watch is not None:
            return await watch.receive_into(view)
        data = await self._receive(len(view))
        view[: len(data)] = data
        return len(data)

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        """The next chunk; raises `anyio.EndOfStream` at the end (or once closed here)."""
        if self._grow and BUDGET.grown(self._fd):
            BUDGET.shrink(self._fd)  # the long line is over
        return await self._receive(max_bytes)

    def _current_watch(self) -> _Watch | None:
        """The watch of the running asyncio loop, or `None` (not pollable, closed, another
        event loop): then read without one."""
        if not self._pollable or self._closed:
            return None
        watch = self._watch
        if watch is None or not watch.current():
            loop = _running_asyncio_loop()
            if loop is None:
                return None
            # A stream read under one loop and then another starts watching afresh.
            watch = self._watch = _Watch(self._fd, loop, watch)
        return watch

    async def _receive(self, max_bytes: int) -> bytes:
        watch = self._current_watch()
        if watch is not None:
            return await watch.receive(max_bytes)
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
                if exc.errno in _GONE:
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
        """Bytes the peer wrote that no `receive()` has taken yet (0 once closed)."""
        if self._closed:
            return 0
        held = self._watch.held if self._watch is not None else 0
        try:
            got = fcntl.ioctl(self._fd, _FIONREAD, b"\0\0\0\0")
        except OSError:
            return held
        return held + int(struct.unpack("i", got)[0])

    def close(self) -> None:
        """Close this end; a task parked in `receive()` wakes to end of stream."""
        if not self._closed:
            self._closed = True
            if self._watch is not None:
                self._watch.close()
            elif self._pollable:
                anyio.notify_closing(self._fd)
            if self._grow:
                BUDGET.forget(self._fd)
            os.close(self._fd)

    async def aclose(self) -> None:
        self.close()


def _running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop; `None` under another event loop (trio)."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _ReadBuffer(threading.local):
    """The one buffer every watch of a thread's event loop reads into. A read and the copy of
    what it got happen in one loop callback (`_Watch._ready`), so the watches of one loop
    never use it at the same time; a buffer per watch would hold 256 KiB per pipe (a parent
    with 256 children: 128 MiB for their stdout and stderr)."""

    def __init__(self) -> None:
        self.buf = bytearray(READ_CHUNK)
        self.view = memoryview(self.buf)


_READ_BUFFER = _ReadBuffer()


class _Watch:
    """A pipe fd registered with the asyncio loop for as long as it is read (see
    `FdReceiveStream`). The loop's callback reads one chunk: it goes to the task waiting in
    `receive()`, or is held (and reading paused) until one comes."""

    __slots__ = ("_end", "_fd", "_got", "_held", "_into", "_loop", "_registered", "_waiter")

    def __init__(
        self, fd: int, loop: asyncio.AbstractEventLoop, before: _Watch | None = None
    ) -> None:
        self._fd = fd
        self._loop = loop
        self._held = b""
        self._end: BaseException | None = None
        """`EndOfStream`, or the read error to raise, once the stream is over."""
        self._waiter: asyncio.Future[None] | None = None
        self._registered = False
        self._into: memoryview | None = None
        """Where `_ready` reads to while `receive_into` waits (instead of the shared buffer)."""
        self._got = 0
        if before is not None:  # the same fd, watched under an earlier loop
            before._abandon()
            self._held, self._end = before._held, before._end

    def current(self) -> bool:
        """Whether this watch belongs to the running loop."""
        return _running_asyncio_loop() is self._loop

    def _abandon(self) -> None:
        if self._registered:
            self._registered = False
            with contextlib.suppress(Exception):  # that loop may be closed
                self._loop.remove_reader(self._fd)

    @property
    def held(self) -> int:
        return len(self._held)

    def _arm(self) -> asyncio.Future[None]:
        """Nothing is held: raise the stream's end if it came, else watch the fd and return
        the future `_ready` completes."""
        if self._end is not None:
            raise self._end
        if not self._registered:
            self._loop.add_reader(self._fd, self._ready)
            self._registered = True
        waiter = self._waiter = self._loop.create_future()
        return waiter

    async def receive(self, max_bytes: int) -> bytes:
        while not self._held:
            waiter = self._arm()
            try:
                await waiter
            finally:
                self._waiter = None
        data = self._held[:max_bytes]
        self._held = self._held[max_bytes:]
        return data

    async def receive_into(self, view: memoryview) -> int:
        while not self._held:
            waiter = self._arm()
            self._into = view
            self._got = 0
            try:
                await waiter
            except BaseException:
                if self._got:  # read, then cancelled: keep the bytes for the next receive
                    self._held = view[: self._got].tobytes()
                raise
            finally:
                self._waiter = None
                self._into = None
            if self._got:
                return self._got
        n = min(len(view), len(self._held))
        view[:n] = self._held[:n]
        self._held = self._held[n:]
        return n

    def _ready(self) -> None:
        if self._held:  # the last chunk is still to be taken (its receiver was cancelled)
            self._pause()
            return
        into = self._into
        if into is not None:
            self._into = None
            try:
                self._got = os.readv(self._fd, (into,))
            except BlockingIOError:
                self._into = into
                return
            except OSError as exc:
                self._end = anyio.EndOfStream() if exc.errno in _GONE else exc
            else:
                if not self._got:
                    self._end = anyio.EndOfStream()
            self._pause()  # the line's next read asks again
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            return
        # Into the thread's one buffer (`_ReadBuffer`): `os.read(fd, READ_CHUNK)` would
        # allocate (mmap) and free a fresh 256 KiB object per message, page faults included,
        # to return a few bytes.
        shared = _READ_BUFFER
        try:
            n = os.readv(self._fd, (shared.buf,))
        except BlockingIOError:
            return
        except OSError as exc:
            self._end = anyio.EndOfStream() if exc.errno in _GONE else exc
        else:
            if n:
                self._held = shared.view[:n].tobytes()
            else:
                self._end = anyio.EndOfStream()
        waiter = self._waiter
        if waiter is None or waiter.done() or self._end is not None:
            self._pause()  # nobody takes it now (or the stream is over): stop reading
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause(self) -> None:
        if self._registered:
            self._registered = False
            self._loop.remove_reader(self._fd)

    def close(self) -> None:
        """The fd is about to be closed: stop watching it, wake a waiting `receive()`."""
        self._pause()
        self._held = b""
        if self._end is None:
            self._end = anyio.EndOfStream()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class FdSendStream(ByteSendStream):
    """Writes whole messages to a pipe (or any fd); see the module docstring."""

    __slots__ = ("_closed", "_fd", "_finish_seconds", "_grow", "_lock", "_pollable")

    def __init__(
        self, fd: int, *, finish_seconds: float | None = FINISH_SECONDS, grow: bool = False
    ) -> None:
        """`grow`: grow the pipe before writing a large message, within the process's budget
        (`pipesize`), so that one write moves it; shrunk back at a later small one."""
        self._fd = fd
        self._pollable = pollable(fd)
        if self._pollable:
            os.set_blocking(fd, False)
        self._closed = False
        self._grow = grow and self._pollable
        self._finish_seconds = finish_seconds
        # No checkpoint when uncontended: one event-loop turn less per message.
        self._lock = anyio.Lock(fast_acquire=True)

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def writing(self) -> bool:
        """A writer is in the middle of a message (part of it is out, the rest must follow)."""
        return self._lock.locked()

    async def send(self, item: bytes) -> None:
        """Write every byte of `item`, never interleaved with another writer's message.

        Raises `anyio.BrokenResourceError` when the reader is gone (or the rest of a started
        message could not be delivered in time, which closes the pipe) and
        `anyio.ClosedResourceError` once this end was closed.
        """
        sent = 0
        if self._grow and not self._closed:
            if len(item) >= LARGE_WRITE:
                BUDGET.grow(self._fd)
            elif BUDGET.grown(self._fd):
                BUDGET.shrink(self._fd)  # large messages are over (fails while undrained)
        if self._pollable and not self._closed and not self._lock.locked():
            # Nobody is in the middle of a message: try the whole line at once, without the
            # lock (no await between the check and the write, so no other writer can start).
            sent = self._write_now(item)
            if sent == len(item):
                return
        if sent:
            # Part of it is out: the rest must follow. The lock is free (nothing awaited since
            # the check above), so this takes it without yielding, and without a cancellation
            # check that could leave half a line.
            with anyio.CancelScope(shield=True):
                await self._lock.acquire()
        else:
            await self._lock.acquire()
        try:
            await self._send_rest(memoryview(item), sent)
        finally:
            self._lock.release()

    async def _send_rest(self, view: memoryview, sent: int) -> None:
        total = len(view)
        view = view[sent:]
        if not sent:
            while view:
                view = view[await self._write_some(view) :]
                if len(view) < total:
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

    def _write_now(self, data: bytes) -> int:
        """Write what the pipe takes right now (0 when it is full)."""
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise anyio.BrokenResourceError("the reader of the pipe is gone") from exc
        except OSError as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc

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
            if self._grow:
                BUDGET.forget(self._fd)
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
        # As a pipe's `send` does: a write that fits is made without yielding to the loop.
        chunk = bytes(item)
        try:
            try:
                self._chunks.send_nowait(chunk)
            except anyio.WouldBlock:
                await self._chunks.send(chunk)
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
