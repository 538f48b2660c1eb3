"""NDJSON framing: one message per `\\n`-terminated line, with a byte cap.

Sans-I/O: feed bytes in, take complete lines (or framing faults) out. The cap bounds the partial
line too, so a peer that never sends a newline cannot grow our buffer: once a line passes the cap
the framer reports `Oversize` once and discards bytes up to the next newline.
"""

from __future__ import annotations

import threading

from msgspec import Struct

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_CONTENT_LENGTH = b"content-length:"


class Oversize(Struct, frozen=True):
    """A line passed the cap; `seen` is how many bytes of it had arrived when that was noticed."""

    limit: int
    seen: int


class WrongFraming(Struct, frozen=True):
    """The stream opened with an LSP-style `Content-Length:` header instead of a JSON line."""

    head: bytes


FrameEvent = bytes | Oversize | WrongFraming
BufferEvent = bytes | memoryview | Oversize | WrongFraming
"""What `filled` gives: a long line is a `memoryview` of the framer's long-line buffer, valid
until `recycle()` or the next call into the framer."""

LONG_LINE = 16 * 1024
"""An unfinished line past this many bytes moves into the long-line buffer (`receive_buffer`)."""
KEEP_BYTES = 2 * 1024 * 1024
"""A thread keeps one spare long-line buffer of at most this size between messages."""
ROOM = 256 * 1024
"""The free tail `receive_buffer()` offers at least (the buffer grows to give it)."""
_WHITESPACE = frozenset(b" \t\n\r\x0b\x0c")


class _Spare(threading.local):
    buf: bytearray | None = None


_SPARE = _Spare()


def _take(size: int) -> bytearray:
    spare = _SPARE.buf
    if spare is not None and len(spare) >= size:
        _SPARE.buf = None
        return spare
    return bytearray(size)


def _give(buf: bytearray) -> None:
    if len(buf) <= KEEP_BYTES:
        spare = _SPARE.buf
        if spare is None or len(spare) < len(buf):
            _SPARE.buf = buf


def spare_bytes() -> int:
    """Bytes of the spare long-line buffer this thread keeps (tests)."""
    spare = _SPARE.buf
    return 0 if spare is None else len(spare)


class LineFramer:
    """Split a byte stream into lines of at most `max_bytes` (the newline not counted)."""

    __slots__ = (
        "_big",
        "_discarding",
        "_held",
        "_lent",
        "_long",
        "_max",
        "_parts",
        "_room",
        "_started",
    )

    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        *,
        long_line: int = LONG_LINE,
        room: int = ROOM,
    ) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self._max = max_bytes
        self._long = long_line
        self._room = room
        # A long line, once `receive_buffer()` is used, is built in one buffer (the thread's
        # spare, reused from message to message) that the reader reads straight into; the
        # complete line is handed out as a view of it, never joined or copied.
        self._big: bytearray | None = None
        self._lent: bytearray | None = None
        # The pieces of an unfinished line, joined once when its newline comes: one copy of a
        # large line, where appending each chunk to a growing buffer copied it again and again.
        self._parts: list[bytes] = []
        self._held = 0
        self._discarding = False
        self._started = False

    @property
    def max_bytes(self) -> int:
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished line held right now (never more than the cap)."""
        return self._held

    def receive_buffer(self) -> memoryview | None:
        """Where the next read of a long unfinished line should go (then call `filled`), or
        `None`: no long line is in progress, read a chunk and `feed` it."""
        big = self._big
        if big is None:
            if self._held < self._long or self._discarding:
                return None
            held = self._held
            big = self._big = _take(max(held + self._room, min(KEEP_BYTES, self._max + 1)))
            at = 0
            for part in self._parts:
                big[at : at + len(part)] = part
                at += len(part)
            self._parts.clear()
        elif len(big) - self._held < self._room // 4:
            big = self._grow_big(self._held + self._room)
        return memoryview(big)[self._held :]

    def _grow_big(self, need: int) -> bytearray:
        """Move the long line into a buffer of at least `need` bytes (doubling)."""
        big = self._big
        assert big is not None
        grown = bytearray(max(2 * len(big), need))
        grown[: self._held] = memoryview(big)[: self._held]
        _give(big)
        self._big = grown
        return grown

    def filled(self, n: int) -> list[BufferEvent]:
        """`n` bytes were read into the view `receive_buffer()` gave: the events they make."""
        big = self._big
        if big is None:
            raise RuntimeError("filled() without receive_buffer()")
        start = self._held
        end = start + n
        nl = big.find(b"\n", start, end)
        if nl < 0:
            if end > self._max:
                self._drop_big()
                self._discarding = True
                return [Oversize(limit=self._max, seen=end)]
            self._held = end
            return []
        rest = bytes(big[nl + 1 : end])  # copied before the buffer is lent out
        out: list[BufferEvent] = []
        if nl > self._max:
            self._drop_big()
            out.append(Oversize(limit=self._max, seen=nl))
        else:
            self._end_big(nl, out)
        if rest:
            out.extend(self._feed(rest))
        return out

    def _end_big(self, length: int, out: list[BufferEvent]) -> None:
        big = self._big
        assert big is not None
        self._big = None
        self._held = 0
        if length and big[length - 1] == 13:  # CR
            length -= 1
        if not length or big[0] in _WHITESPACE:
            # Rare: judged by the short path's rules on a copy.
            _give(big)
            self._judge(bytes(big[:length]), out)
            return
        if not self._started:
            self._started = True
            if bytes(big[: len(_CONTENT_LENGTH)]).lower() == _CONTENT_LENGTH:
                out.append(WrongFraming(head=bytes(big[: min(64, length)])))
                _give(big)
                return
        self._lent = big
        out.append(memoryview(big)[:length])

    def _drop_big(self) -> None:
        if self._big is not None:
            _give(self._big)
            self._big = None
        self._held = 0

    def recycle(self) -> None:
        """The last line handed out as a view is no longer used: its buffer may be reused."""
        lent = self._lent
        if lent is not None:
            self._lent = None
            _give(lent)

    def _judge(self, line: bytes, out: list[FrameEvent] | list[BufferEvent]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not self._started and line.strip():
            self._started = True
            if line.lstrip()[: len(_CONTENT_LENGTH)].lower() == _CONTENT_LENGTH:
                out.append(WrongFraming(head=line[:64]))
                return
        if line.strip():
            out.append(line)

    def feed(self, data: bytes) -> list[FrameEvent]:
        if not data:
            return []
        if type(data) is not bytes:
            data = bytes(data)  # lines are immutable `bytes`, whatever the caller passed
        if self._big is not None:
            # A long line is being built in the buffer: this chunk goes there too.
            big = self._big
            need = self._held + len(data)
            if len(big) < need:
                big = self._grow_big(need)
            big[self._held : need] = data
            events = self.filled(len(data))
            self.recycle()
            return [bytes(e) if type(e) is memoryview else e for e in events]
        return self._feed(data)

    def _feed(self, data: bytes) -> list[FrameEvent]:
        out: list[FrameEvent] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            if self._discarding:
                if nl < 0:
                    return out
                self._discarding = False
                start = nl + 1
                continue
            end = n if nl < 0 else nl
            if self._held + (end - start) > self._max:
                seen = self._held + (end - start)
                self._parts.clear()
                self._held = 0
                out.append(Oversize(limit=self._max, seen=seen))
                if nl < 0:
                    self._discarding = True
                    return out
                start = nl + 1
                continue
            if nl < 0:
                self._parts.append(data[start:])
                self._held += n - start
                return out
            if self._parts:
                self._parts.append(data[start:nl])
                line = b"".join(self._parts)
                self._parts.clear()
                self._held = 0
            else:
                line = data[start:nl]
            self._judge(line, out)
            start = nl + 1
        return out

    def eof(self) -> bytes | None:
        """The stream ended: return the unterminated tail, if any (a truncated message)."""
        if self._big is not None:
            tail = bytes(self._big[: self._held])
            self._drop_big()
            return tail
        if self._parts:
            tail = b"".join(self._parts)
            self._parts.clear()
            self._held = 0
            return tail
        return None
