"""NDJSON framing: one message per `\\n`-terminated line, with a byte cap.

Sans-I/O: feed bytes in, take complete lines (or framing faults) out. The cap bounds the partial
line too, so a peer that never sends a newline cannot grow our buffer: once a line passes the cap
the framer reports `Oversize` once and discards bytes up to the next newline.
"""

from __future__ import annotations

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


class LineFramer:
    """Split a byte stream into lines of at most `max_bytes` (the newline not counted)."""

    __slots__ = ("_discarding", "_held", "_max", "_parts", "_started")

    def __init__(self, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self._max = max_bytes
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

    def feed(self, data: bytes) -> list[FrameEvent]:
        out: list[FrameEvent] = []
        if not data:
            return out
        if type(data) is not bytes:
            data = bytes(data)  # lines are immutable `bytes`, whatever the caller passed
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
            if line.endswith(b"\r"):
                line = line[:-1]
            if not self._started and line.strip():
                self._started = True
                if line.lstrip()[: len(_CONTENT_LENGTH)].lower() == _CONTENT_LENGTH:
                    out.append(WrongFraming(head=line[:64]))
                    start = nl + 1
                    continue
            if line.strip():
                out.append(line)
            start = nl + 1
        return out

    def eof(self) -> bytes | None:
        """The stream ended: return the unterminated tail, if any (a truncated message)."""
        if self._parts:
            tail = b"".join(self._parts)
            self._parts.clear()
            self._held = 0
            return tail
        return None
