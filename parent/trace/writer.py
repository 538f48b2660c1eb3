"""One trace file: lines taken from the run without waiting, written by a task of their own.

Theory of operation
-------------------
A `TraceFile` is a queue of encoded lines and the file they go to. `put()` is called on the
run's path (the broker, before the child gets a model's answer) and never waits: it only
appends to the queue, after the size policy said yes. A drain task (`drain()`, owned by the
run's task) opens the file and then writes what is queued, both in a worker thread, so a slow
disk delays the drain, never the run. It lets lines gather for `LINGER_SECONDS` (or until
`BATCH_BYTES` wait) and writes them with one `write`: a worker thread's turn per line would cost
a run more than the lines do. A parent killed mid-run loses at most those last lines.

Two bounds, one policy. The file never grows past `max_bytes` (its size when opened for
appending counts), and no more than `buffer_bytes` may wait while a write is under way (lines
the drain is only gathering go out at once when they pass it). When a line would
break either, tracing of the run *stops*: the line is dropped, a last `stopped` line naming the
reason is queued in its place (room for it is kept below `max_bytes`), and every later line is
dropped. The run goes on; its result says so (`trace.stopped`). A file that cannot be opened or
written stops it the same way (no `stopped` line can be written then). Only at the end of an
activation does the run wait for its lines — `flush()`, bounded by `FLUSH_SECONDS` — so a
result is handed back with its trace on disk; a disk slower than that stops the trace instead.
`aclose()` gives the drain as long again, then abandons a thread still stuck in the kernel (it
closes the file itself when it returns).

Files are created `0600` with `O_EXCL | O_NOFOLLOW` (a name taken already gets a `~N` suffix;
a symlink planted there is refused), in a directory created `0700` when it does not exist. A
continuable agent's file is opened for appending only if it is a regular file of ours.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import anyio

FLUSH_SECONDS = 10.0
"""The longest a run's result waits for its trace lines to be written."""
LINGER_SECONDS = 0.05
"""How long the drain lets lines gather before it writes them: one write (and one worker
thread's turn) for many lines, unless `BATCH_BYTES` wait or the run wants them on disk."""
BATCH_BYTES = 256 << 10
STOP_RESERVE = 4096
"""Bytes kept below the size limit for the `stopped` line."""
_NAME_TRIES = 100


class TraceFile:
    def __init__(
        self,
        directory: str,
        name: str,
        *,
        append_to: str | None,
        max_bytes: int,
        buffer_bytes: int,
        stop_line: Callable[[str, int], bytes],
    ) -> None:
        """`stop_line(reason, size)`: the encoded `stopped` line for the run."""
        self._dir = directory
        self._name = name
        self._append_to = append_to
        self.path = append_to or os.path.join(directory, name)
        """The file's path (a fresh file's name may still get a `~N` suffix when opened)."""
        self._max = max_bytes
        self._buffer = buffer_bytes
        self._stop_line = stop_line
        self.size = 0
        """Bytes the file holds once every accepted line is written."""
        self.written = 0
        """Bytes of this run written so far."""
        self.stopped: str | None = None
        """Why tracing stopped, once it did."""
        self._queue: list[bytes] = []
        self._queued = 0
        self._fd: int | None = None
        self._closing = False
        self._wake = anyio.Event()
        self._urgent = False
        self._hurry = anyio.Event()
        self._writing = 0
        """Bytes handed to a write that has not returned yet: the disk is behind by what waits
        meanwhile."""
        self._drained = anyio.Event()
        self._ended = anyio.Event()
        self._scope = anyio.CancelScope()
        self._lock = threading.Lock()
        self._busy = False
        """A worker thread is using the file (opening it, or writing)."""
        self._gave_up = False
        """The drain has ended: a thread still busy closes the file itself."""

    # --- the run's side: never waits -----------------------------------------------------------

    def put(self, line: bytes) -> bool:
        """Queue one line (`False`: tracing has stopped, the line is dropped)."""
        if self.stopped is not None:
            return False
        n = len(line)
        if self.size + n > self._max - STOP_RESERVE:
            self.stop(f"the trace reached its size limit of {self._max} bytes")
            return False
        if self._writing and self._queued + n > self._buffer:
            self.stop(
                f"the disk fell behind: {self._queued} bytes were still waiting to be written "
                f"(the buffer holds {self._buffer})"
            )
            return False
        self._enqueue(line)
        if self._queued > self._buffer:
            self._rush()  # nothing is being written: the drain was only gathering lines
        return True

    def stop(self, reason: str) -> None:
        """Stop tracing now: a `stopped` line is the last one written (when it still can be)."""
        if self.stopped is not None:
            return
        self.stopped = reason
        if not self._ended.is_set():
            self._enqueue(self._stop_line(reason, self.size))

    def _enqueue(self, line: bytes) -> None:
        self._queue.append(line)
        self._queued += len(line)
        self.size += len(line)
        if self._drained.is_set():
            self._drained = anyio.Event()
        if self._queued >= BATCH_BYTES:
            self._rush()
        self._wake.set()

    def _rush(self) -> None:
        """Write what is queued now, without lingering."""
        self._urgent = True
        self._hurry.set()

    # --- the drain's side ----------------------------------------------------------------------

    async def drain(self) -> None:
        """Open the file, then write what is queued until `aclose()`, and close the file."""
        try:
            with self._scope:
                try:
                    await anyio.to_thread.run_sync(self._open, abandon_on_cancel=True)
                except OSError as exc:
                    self._fail(f"the trace could not be opened: {exc.strerror or exc}")
                    return
                await self._drain()
        finally:
            self._ended.set()
            self._drained.set()
            with self._lock:
                self._gave_up = True
                fd, self._fd = self._fd, None
                if self._busy:
                    fd = None  # the thread still using it closes it
            if fd is not None:
                os.close(fd)

    def _fail(self, reason: str) -> None:
        self._queue.clear()
        self._queued = 0
        if self.stopped is None:
            self.stopped = reason

    async def _drain(self) -> None:
        while True:
            if not self._queue:
                self._drained.set()
                if self._closing:
                    return
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            if not self._urgent:
                with anyio.move_on_after(LINGER_SECONDS):
                    await self._hurry.wait()
            self._urgent = False
            self._hurry = anyio.Event()
            batch, self._queue = b"".join(self._queue), []
            self._writing = len(batch)
            try:
                await anyio.to_thread.run_sync(self._write, batch, abandon_on_cancel=True)
            except OSError as exc:
                self._fail(f"writing the trace failed: {exc.strerror or exc}")
                return
            finally:
                self._writing = 0
            self._queued -= len(batch)
            self.written += len(batch)

    def _open(self) -> None:
        with self._lock:
            self._busy = True
        fd: int | None = None
        try:
            fd = self._open_fd()
        finally:
            with self._lock:
                self._busy = False
                keep = not self._gave_up
                if keep:
                    self._fd = fd
            if not keep and fd is not None:
                os.close(fd)

    def _open_fd(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        if self._append_to is not None:
            fd = os.open(self._append_to, flags)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                os.close(fd)
                raise OSError(0, "not a regular file of this user")
            self.size += st.st_size
            return fd
        Path(self._dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        stem, dot, ext = self._name.rpartition(".")
        for n in range(_NAME_TRIES):
            name = self._name if n == 0 else f"{stem}~{n}{dot}{ext}"
            path = os.path.join(self._dir, name)
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            self.path = path
            return fd
        raise FileExistsError(17, f"{_NAME_TRIES} trace files of this name exist already")

    def _write(self, data: bytes) -> None:
        with self._lock:
            fd = self._fd
            if fd is None:
                return
            self._busy = True
        try:
            self._write_all(fd, data)
        finally:
            with self._lock:
                self._busy = False
                abandoned = self._gave_up
            if abandoned:
                os.close(fd)

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    # --- waiting for the disk, bounded ---------------------------------------------------------

    async def flush(self, seconds: float = FLUSH_SECONDS) -> None:
        """Wait until every queued line is written, at most `seconds`; a disk slower than
        that stops the trace (what is queued still goes out; the run no longer waits)."""
        self._rush()
        with anyio.move_on_after(seconds):
            await self._drained.wait()
            return
        self.stop(f"the disk took more than {seconds:g} s to take the run's lines")

    async def aclose(self, seconds: float = FLUSH_SECONDS) -> None:
        """Let the drain write what is left (at most `seconds`) and close the file."""
        self._closing = True
        self._rush()
        self._wake.set()
        with anyio.move_on_after(seconds):
            await self._ended.wait()
            return
        self._scope.cancel()  # a thread is stuck in the kernel: it closes the file itself
        await self._ended.wait()
