"""A bounded ring of the child's stderr: the tail is what a failure report needs."""

from __future__ import annotations

DEFAULT_RING_BYTES = 64 * 1024


class ByteRing:
    __slots__ = ("_buf", "_cap", "total")

    def __init__(self, capacity: int = DEFAULT_RING_BYTES) -> None:
        self._cap = capacity
        self._buf = bytearray()
        self.total = 0
        """Bytes ever written, kept or not."""

    def write(self, data: bytes) -> None:
        self.total += len(data)
        if len(data) >= self._cap:
            self._buf[:] = data[-self._cap :]
            return
        self._buf += data
        overflow = len(self._buf) - self._cap
        if overflow > 0:
            del self._buf[:overflow]

    def __len__(self) -> int:
        return len(self._buf)

    def tail(self, max_chars: int = 4096) -> str:
        """The last `max_chars` characters, decoded leniently, starting at a line boundary
        when one is near so the tail does not open mid-word."""
        text = bytes(self._buf[-max_chars * 4 :]).decode("utf-8", "replace")[-max_chars:]
        if len(text) == max_chars:
            nl = text.find("\n", 0, 200)
            if nl >= 0:
                text = text[nl + 1 :]
        return text
