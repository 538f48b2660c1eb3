"""A small I/O pump over raw pipe fds: non-blocking reads and writes driven by anyio readiness.

The supervisor owns its child's pipes as bare file descriptors instead of asyncio transports so
that nothing it waits on depends on *all* holders of a pipe closing it: a grandchild that
inherited the child's stdout cannot delay the result. Closing always notifies anyio first, so a
task parked on the fd wakes instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import termios
from collections.abc import Iterator
from dataclasses import dataclass

import anyio

READ_CHUNK = 256 * 1024


class PipeClosed(Exception):
    """The other end of the pipe is gone (EPIPE) or this end was closed."""


class FdReader:
    __slots__ = ("_closed", "_fd")

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._closed = False

    async def read(self, max_bytes: int = READ_CHUNK) -> bytes:
        """Return the next chunk; `b""` means end of stream (or this reader was closed)."""
        while not self._closed:
            try:
                return os.read(self._fd, max_bytes)
            except BlockingIOError:
                pass
            except OSError as exc:
                if exc.errno in (errno.EBADF, errno.EIO):
                    return b""
                raise
            try:
                await anyio.wait_readable(self._fd)
            except (anyio.ClosedResourceError, OSError):
                return b""
        return b""

    @property
    def closed(self) -> bool:
        return self._closed

    def unread(self) -> int:
        """Bytes waiting in the pipe that no `read()` has taken yet (0 once closed)."""
        if self._closed:
            return 0
        try:
            got = fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return 0
        return int(struct.unpack("i", got)[0])

    def close(self) -> None:
        """Close this end; a task parked in `read()` wakes and gets `b""` (end of stream)."""
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._fd)
            os.close(self._fd)


FINISH_SECONDS = 2.0
"""Once a message's first byte is out, how long the rest may take (the reader must keep reading)
before the writer gives up and closes the pipe rather than leave half a line on the wire."""


class FdWriter:
    __slots__ = ("_closed", "_fd", "_finish_seconds", "_lock")

    def __init__(self, fd: int, *, finish_seconds: float = FINISH_SECONDS) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._closed = False
        self._finish_seconds = finish_seconds
        # No checkpoint when uncontended: one event-loop turn less per message.
        self._lock = anyio.Lock(fast_acquire=True)

    @property
    def closed(self) -> bool:
        return self._closed

    async def write_all(self, data: bytes) -> None:
        """Write every byte, whole messages never interleaved with another writer's.

        Cancellation is honoured only until the first byte is out. From then on the message is
        finished, shielded, because half a line would corrupt the stream for every later
        message; if the reader does not take the rest within `finish_seconds` (a stuck child
        with a full pipe) the pipe is closed and `PipeClosed` raised, never a hang.
        """
        async with self._lock:
            view = memoryview(data)
            while view:
                view = view[self._write_some(view) :]
                if len(view) < len(data):
                    break  # the first byte is out: what is left must follow, whatever happens
                await self._writable()
            if not view:
                return
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self._finish_seconds):
                    while view:
                        await self._writable()
                        view = view[self._write_some(view) :]
            if view:
                self.close()
                raise PipeClosed(
                    f"the reader took no more of a message for {self._finish_seconds:g} s; "
                    "the pipe was closed rather than left with half a line"
                )

    def _write_some(self, view: memoryview) -> int:
        if self._closed:
            raise PipeClosed("the pipe was closed")
        try:
            return os.write(self._fd, view)
        except BlockingIOError:
            return 0
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise PipeClosed("the reader of the pipe is gone") from exc

    async def _writable(self) -> None:
        try:
            await anyio.wait_writable(self._fd)
        except (anyio.ClosedResourceError, OSError) as exc:
            raise PipeClosed("the pipe was closed") from exc

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._fd)
            os.close(self._fd)


@dataclass(frozen=True)
class StdioPipes:
    """Three fresh pipes for a child's stdin, stdout and stderr (all close-on-exec)."""

    child: tuple[int, int, int]
    """The child's ends: stdin's read end, stdout's and stderr's write ends."""
    ours: tuple[int, int, int]
    """Ours: stdin's write end, stdout's and stderr's read ends."""


@contextlib.contextmanager
def stdio_pipes() -> Iterator[StdioPipes]:
    """Create a child's stdio pipes around the block that hands their ends to it.

    The child's ends are always closed when the block ends (the child holds its own copies by
    then); ours are closed too when the block raises, so a failed spawn leaks nothing.
    """
    made: list[int] = []
    try:
        for _ in range(3):
            made.extend(os.pipe2(os.O_CLOEXEC))
    except OSError:
        for fd in made:
            os.close(fd)
        raise
    in_r, in_w, out_r, out_w, err_r, err_w = made
    pipes = StdioPipes(child=(in_r, out_w, err_w), ours=(in_w, out_r, err_r))
    try:
        yield pipes
    except BaseException:
        for fd in pipes.ours:
            os.close(fd)
        raise
    finally:
        for fd in pipes.child:
            os.close(fd)
