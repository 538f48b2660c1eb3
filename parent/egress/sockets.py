"""The egress proxy's sockets: plain non-blocking TCP sockets as anyio byte streams, and a tunnel
relay that moves bytes between two of them inside the kernel.

The proxy relays whole downloads, so what a byte costs on its way through matters (issue 33
asks for at least 0.8 times a direct loopback download). An anyio socket stream on asyncio
reads through a transport and its protocol's queue (a copy, a wakeup and a future per read);
`RawStream` reads and writes the socket itself, waiting only when the kernel says it would
block (`anyio.wait_readable` / `wait_writable`), and lets the event loop run other tasks at
least every `YIELD_EVERY` bytes, so a busy connection cannot starve the others. TLS still
layers on top of it (`TLSStream.wrap`). A plain HTTP response body of declared length from
1 MiB up is spliced too (`proxy.SPLICED_BODY`).

`splice_relay` is a `CONNECT` tunnel's relay once its first bytes were checked: `splice(2)`
from one socket into a pipe and from the pipe into the other, so the payload never enters this
process, in a worker thread that waits in `poll` itself: an event-loop wait per chunk (a
reader registered and removed with epoll, a future, a loop iteration) cost more than the splice
(measured on a 2-core VM, 20-30 ms of the parent's CPU per 64 MiB and a rate that swung from
490 to 1450 MiB/s, against 14-18 ms and 1100-1440 MiB/s in a thread); each chunk is counted on
the run's `Meter` before it is passed on, and the thread stops at the run's byte limit. Linux
only, like the rest of the sandbox.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Literal

import anyio
from anyio.abc import ByteStream

YIELD_EVERY = 1 << 20
"""Bytes a stream reads without waiting before it lets the event loop run other tasks."""
F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20
SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


class RawStream(ByteStream):
    """A non-blocking TCP socket as a byte stream (see the module docstring); owns it."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self._closed = False
        self._unyielded = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            try:
                data = self.sock.recv(max_bytes)
            except (BlockingIOError, InterruptedError):
                await self._wait(anyio.wait_readable)
                self._unyielded = 0
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError(str(exc)) from exc
            if not data:
                raise anyio.EndOfStream
            self._unyielded += len(data)
            if self._unyielded >= YIELD_EVERY:
                # Data that is always there never makes us wait: let the others run.
                self._unyielded = 0
                await anyio.lowlevel.checkpoint()
            else:
                await anyio.lowlevel.checkpoint_if_cancelled()
            return data

    async def send(self, item: bytes) -> None:
        await self.send_view(memoryview(item))

    async def send_within(self, item: bytes, seconds: float) -> None:
        """Send `item`; `TimeoutError` when the peer has not read it within `seconds` (the
        clock only starts when the kernel's buffer is full: most sends never wait)."""
        view = memoryview(item)
        try:
            sent = self.sock.send(view)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc
        if sent < len(view):
            with anyio.fail_after(seconds):
                await self.send_view(view[sent:])

    async def send_view(self, view: memoryview) -> None:
        while view:
            try:
                sent = self.sock.send(view)
            except (BlockingIOError, InterruptedError):
                await self._wait(anyio.wait_writable)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError(str(exc)) from exc
            view = view[sent:]

    async def send_eof(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self.sock)
            self.sock.close()
        await anyio.lowlevel.checkpoint()

    async def _wait(self, how: Callable[[socket.socket], object]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await how(self.sock)  # type: ignore[misc]


async def connect(address: str, port: int) -> RawStream:
    """A TCP connection to `address`:`port` (an IP: nothing is resolved here); the caller
    bounds the time. Raises `OSError`."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        code = sock.connect_ex((address, port))
        if code not in (0, errno.EINPROGRESS):
            raise OSError(code, os.strerror(code))
        if code:
            await anyio.wait_writable(sock)
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
    except BaseException:
        anyio.notify_closing(sock)
        sock.close()
        raise
    return RawStream(sock)


async def accept(listener: socket.socket) -> RawStream:
    """The next connection on a listening socket (non-blocking, owned by the caller)."""
    while True:
        if listener.fileno() < 0:
            raise anyio.ClosedResourceError
        await anyio.wait_readable(listener)
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            continue
        except OSError as exc:
            if exc.errno in (errno.ECONNABORTED, errno.EMFILE, errno.ENFILE, errno.ENOBUFS):
                await anyio.sleep(0.01)  # out of descriptors for a moment: do not spin
                continue
            raise
        return RawStream(conn)


UNLIMITED = 1 << 62


class Meter:
    """Bytes counted by relay threads and the event loop alike: `take(n)` adds `n` here (and
    to `parent`, a run's meter under a connection's) and says whether every limit still
    holds; `last` is when a byte last moved (`time.monotonic`)."""

    def __init__(self, limit: int = UNLIMITED, parent: Meter | None = None) -> None:
        self.used = 0
        self.limit = limit
        self.parent = parent
        self.last = time.monotonic()
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            self.used += n
            self.last = time.monotonic()
            ok = self.used <= self.limit
        if self.parent is not None:
            ok = self.parent.take(n) and ok
        return ok


POLL_SECONDS = 0.1
"""How often a relay thread looks at its stop flag while a side is quiet."""


def _splice_loop(
    s_fd: int, d_fd: int, meter: Meter, stop: threading.Event, length: int | None
) -> Literal["eof", "limit", "stopped", "failed"]:
    """Splice `s_fd` into `d_fd` until end of file (or `length` bytes), the meter's limit,
    `stop`, or a failure; runs in a worker thread (the sockets are non-blocking: it waits in
    `poll`). End of file before `length` is a failure."""
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # the default pipe size works, a little slower
        readable, writable = select.poll(), select.poll()
        readable.register(s_fd, select.POLLIN | select.POLLRDHUP)
        writable.register(d_fd, select.POLLOUT)
        while not stop.is_set():
            if length is not None and length <= 0:
                return "eof"
            want = PIPE_SIZE if length is None else min(PIPE_SIZE, length)
            try:
                n = os.splice(s_fd, w, want, flags=SPLICE_FLAGS)
            except (BlockingIOError, InterruptedError):
                readable.poll(POLL_SECONDS * 1000)
                continue
            except OSError:
                return "failed"
            if n == 0:
                return "eof" if length is None else "failed"
            if length is not None:
                length -= n
            if not meter.take(n):
                return "limit"
            left = n
            while left:
                if stop.is_set():
                    return "stopped"
                try:
                    left -= os.splice(r, d_fd, left, flags=SPLICE_FLAGS)
                except (BlockingIOError, InterruptedError):
                    writable.poll(POLL_SECONDS * 1000)
                except OSError:
                    return "failed"
        return "stopped"
    finally:
        os.close(r)
        os.close(w)


async def splice_relay(
    src: RawStream,
    dst: RawStream,
    meter: Meter,
    limiter: anyio.CapacityLimiter,
    length: int | None = None,
) -> Literal["eof", "limit", "failed"]:
    """Move bytes from `src` to `dst` inside the kernel until `src` ends (then `dst` gets
    end of file), the meter's limit is passed, or a side fails; a worker thread of `limiter`
    does the splicing, so a chunk costs two system calls and no event-loop wakeup. Cancelled,
    it stops the thread and waits for it (`POLL_SECONDS` or so) before the cancellation goes
    on: the sockets are never closed under it. `length`: move exactly that many bytes (a
    response body) and leave both sockets open."""
    stop = threading.Event()

    def work() -> Literal["eof", "limit", "stopped", "failed"]:
        return _splice_loop(src.sock.fileno(), dst.sock.fileno(), meter, stop, length)

    async def stop_when_cancelled() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()

    # Not abandoned on cancel: a cancelled relay sets `stop` and waits for its thread, which
    # sees it within `POLL_SECONDS`, so the sockets are never closed while it uses them.
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_when_cancelled)
        how = await anyio.to_thread.run_sync(work, limiter=limiter)
        tg.cancel_scope.cancel()
    if how == "eof" and length is None:
        try:
            await dst.send_eof()
        except anyio.BrokenResourceError:
            pass
    return "failed" if how == "stopped" else how


__all__ = ["UNLIMITED", "Meter", "RawStream", "accept", "connect", "splice_relay"]
