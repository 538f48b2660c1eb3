"""ACP messages over a spawned agent's stdin/stdout: NDJSON with a byte cap, faults recorded.

The ACP package's connection moves decoded JSON-RPC messages through a small transport object
(`send(dict)`, `receive() -> dict | None`, `close()`). Its own stdio transport skips lines that
are not JSON and grows its buffer to 50 MiB; a hostile agent must instead fail the run with a
precise reason. This one frames with tether's `LineFramer` (the cap bounds the partial line
too), checks the JSON-RPC shape of every message, and on the first fault records it in `fault`
and reports end of stream, which makes the connection fail every pending request at once.

It does not own the streams: `close()` stops it, and the caller (whoever spawned the agent)
closes the agent's stdin as the first rung of its ladder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import msgspec
from anyio.abc import ByteReceiveStream, ByteSendStream

from tether.protocol.framing import LineFramer, Oversize, WrongFraming

DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024
DEFAULT_SEND_TIMEOUT = 30.0
_READ_CHUNK = 64 * 1024
_PREVIEW = 80


@dataclass(frozen=True)
class TransportFault:
    kind: Literal["protocol", "oversize"]
    message: str


class TransportClosed(ConnectionError):
    """The agent's input cannot take a message (closed, broken, or not read for too long)."""


class PipeTransport:
    """One agent's NDJSON JSON-RPC stream; see the module docstring."""

    def __init__(
        self,
        to_agent: ByteSendStream,
        from_agent: ByteReceiveStream,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        self._tx = to_agent
        self._rx = from_agent
        self._framer = LineFramer(max_line_bytes)
        self._lines: list[bytes] = []
        self._send_lock = anyio.Lock()
        self._send_timeout = send_timeout
        self._closed = False
        self.fault: TransportFault | None = None
        """The first thing the agent did wrong on the wire, if anything."""
        self.eof = False
        """The agent's output ended."""
        self.truncated = False
        """The output ended in the middle of a line."""
        self.last_received = time.monotonic()
        """When the agent last sent anything (for the idle clock)."""
        self.received = 0
        """Messages received."""

    # --- the transport protocol ---------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise TransportClosed("the connection to the agent is closed")
        data = msgspec.json.encode(message) + b"\n"
        async with self._send_lock:
            try:
                with anyio.fail_after(self._send_timeout):
                    await self._tx.send(data)
            except TimeoutError:
                self._record(
                    "protocol",
                    f"the agent did not read its input for {self._send_timeout:g}s",
                )
                raise TransportClosed("the agent stopped reading its input") from None
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise TransportClosed(
                    f"the agent's input is closed ({type(exc).__name__})"
                ) from exc

    async def receive(self) -> dict[str, Any] | None:
        while not self._lines:
            if self._closed or self.eof or self.fault is not None:
                return None
            try:
                chunk = await self._rx.receive(_READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.eof = True
                if self._framer.eof() is not None:
                    self.truncated = True
                return None
            self.last_received = time.monotonic()
            for event in self._framer.feed(chunk):
                if isinstance(event, Oversize):
                    self._record(
                        "oversize",
                        f"the agent sent a line over {event.limit} bytes ({event.seen} seen)",
                    )
                    return None
                if isinstance(event, WrongFraming):
                    self._record(
                        "protocol",
                        "the agent framed its output with Content-Length headers; ACP over "
                        "stdio is one JSON message per line",
                    )
                    return None
                self._lines.append(event)
        line = self._lines.pop(0)
        message = self._decode(line)
        if message is None:
            return None
        self.received += 1
        return message

    async def close(self) -> None:
        self._closed = True

    # --- helpers ------------------------------------------------------------------------------

    def _decode(self, line: bytes) -> dict[str, Any] | None:
        try:
            message = msgspec.json.decode(line)
        except msgspec.DecodeError:
            self._record("protocol", f"the agent sent a line that is not JSON: {_preview(line)}")
            return None
        problem = _shape_problem(message)
        if problem is not None:
            self._record("protocol", f"the agent sent {problem}: {_preview(line)}")
            return None
        assert isinstance(message, dict)
        return message

    def _record(self, kind: Literal["protocol", "oversize"], message: str) -> None:
        if self.fault is None:
            self.fault = TransportFault(kind, message)


def _shape_problem(message: Any) -> str | None:
    """Why `message` is not a JSON-RPC 2.0 message the connection can route, or `None`."""
    if not isinstance(message, dict):
        return "a JSON value that is not an object"
    if message.get("jsonrpc") != "2.0":
        return 'a message without "jsonrpc": "2.0"'
    ident = message.get("id")
    if "id" in message and not (ident is None or isinstance(ident, (int, str))):
        return "a message whose id is neither a number nor a string"
    if isinstance(ident, bool):
        return "a message whose id is a boolean"
    method = message.get("method")
    if "method" in message and not isinstance(method, str):
        return "a message whose method is not a string"
    if method is None and "id" not in message:
        return "a message that is neither a request, a notification nor a response"
    if "params" in message and not isinstance(message["params"], (dict, list, type(None))):
        return "a message whose params are neither an object nor an array"
    return None


def _preview(line: bytes) -> str:
    text = line[:_PREVIEW].decode("utf-8", errors="replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text) + ("..." if len(line) > _PREVIEW else "")
