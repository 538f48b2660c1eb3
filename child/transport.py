"""Byte I/O on the private wire fds, without blocking the event loop.

Pipes and sockets are switched to O_NONBLOCK and awaited with `anyio.wait_readable/writable`;
anything else (a recorded session replayed with `< file`, a terminal) is read and written in a
worker thread instead, where a blocking call is harmless.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread

from tether.protocol import DEFAULT_MAX_MESSAGE_BYTES, ErrorCode, LocalProtocolError

_CHUNK = 256 * 1024


def _pollable(fd: int) -> bool:
    # Only pipes and sockets: a terminal's O_NONBLOCK flag is shared with the shell that owns
    # it, and would outlive us there.
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def restore_blocking(*fds: int) -> None:
    """Undo O_NONBLOCK: the flag lives on the open file, which another process may share."""
    for fd in fds:
        try:
            if _pollable(fd):
                os.set_blocking(fd, True)
        except OSError:
            pass


async def read_chunks(fd: int) -> AsyncIterator[bytes]:
    """Yield what arrives on `fd` until EOF (or a read error, which is the same to us)."""
    pollable = _pollable(fd)
    if pollable:
        os.set_blocking(fd, False)
    while True:
        try:
            if pollable:
                data = os.read(fd, _CHUNK)
            else:
                data = await anyio.to_thread.run_sync(os.read, fd, _CHUNK, abandon_on_cancel=True)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        except OSError:
            return
        if not data:
            return
        yield data


class PeerGone(Exception):
    """The parent's end of the output pipe is closed: nothing we write can arrive."""


class LineWriter:
    """Writes whole encoded lines to the wire, one at a time, within the parent's byte cap.

    One lock serialises every writer (responses, events, our own requests), so lines never
    interleave even when a write has to wait for the pipe to drain.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pollable = _pollable(fd)
        if self._pollable:
            os.set_blocking(fd, False)
        # No checkpoint when uncontended: one event-loop turn less per message.
        self._lock = anyio.Lock(fast_acquire=True)
        self.max_message_bytes = DEFAULT_MAX_MESSAGE_BYTES
        """The parent's read cap (from `initialize`); a longer line would wedge or kill it."""

    def fits(self, line: bytes) -> bool:
        return len(line.rstrip(b"\n")) <= self.max_message_bytes

    async def send(self, line: bytes) -> None:
        """Write one `\\n`-terminated line.

        Raises `LocalProtocolError(MESSAGE_TOO_LARGE)` for a line over the parent's cap (nothing
        is written) and `PeerGone` once the parent stopped reading for good.
        """
        if not self.fits(line):
            raise LocalProtocolError(
                f"message of {len(line) - 1} bytes passes the parent's "
                f"{self.max_message_bytes}-byte cap",
                ErrorCode.MESSAGE_TOO_LARGE,
            )
        async with self._lock:
            # Cancellation is fine until the first byte is out; after that the rest of the line
            # is written shielded, because half a line would corrupt the stream for good.
            # (A parent that stops reading forever cannot hold the child: the EOF backstop in
            # `__main__` ends the process regardless.)
            rest = memoryview(line)[await self._write_some(line) :]
            if rest:
                with anyio.CancelScope(shield=True):
                    while rest:
                        rest = rest[await self._write_some(rest) :]

    async def _write_some(self, data: bytes | memoryview) -> int:
        while True:
            try:
                if self._pollable:
                    return os.write(self._fd, data)
                return await anyio.to_thread.run_sync(os.write, self._fd, data)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
            except OSError as exc:  # EPIPE mostly: Python ignores SIGPIPE
                raise PeerGone(str(exc)) from None
