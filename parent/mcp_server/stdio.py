"""The MCP wire on this process's stdin and stdout: one JSON-RPC message per line.

`claim_stdio()` moves the wire to private, close-on-exec duplicates of fds 0 and 1, then points
fd 0 at /dev/null and fd 1 at stderr. From then on a stray `print()`, a library's output or a
process started later (the supervisor's keeper, its zygote) can neither write into the wire nor
read from it: stdout carries MCP and nothing else.

`stdio_streams(wire)` runs the two pumps the SDK's `Server.run` reads from and writes to. The
fds are read and written without a thread where they are pipes or sockets
(`tether.wire.streams`), so stopping the server (a SIGTERM, say) never waits for a client to
send one more line, as a thread blocked in `read()` would. Lines are framed with the protocol's
byte cap (`LineFramer`): an oversized line is discarded, never buffered without bound.

A line the SDK cannot take is answered here, as JSON-RPC asks, since the SDK drops it unread
(a client waiting for that request would wait forever): it is first read by tether's own
decoder (`protocol.codec`, the rules of tether's wire: a line nested deeper than
`DEFAULT_MAX_MESSAGE_DEPTH` is an invalid request, its id read from the part before the
nesting), and a line that is not JSON, not a JSON-RPC message, too deep, oversized or framed
with `Content-Length` gets a JSON-RPC error — with the request's id where it can be read, else
`null` (a line too deep to read cannot be told from a notification). A notification or a
response that decodes but that the SDK cannot take gets no answer, as JSON-RPC says.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from tether.protocol.codec import Invalid, Request, StreamFault, decode_frame
from tether.protocol.errors import ErrorCode
from tether.protocol.framing import DEFAULT_MAX_MESSAGE_BYTES, LineFramer, Oversize, WrongFraming
from tether.wire.streams import FdReceiveStream, FdSendStream, restore_blocking

log = logging.getLogger("tether.mcp")

FLUSH_SECONDS = 2.0
"""How long the messages the server queued may take to reach the client once it is done."""

ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


@dataclass(frozen=True)
class Wire:
    """The private duplicates the MCP wire runs on."""

    read_fd: int
    write_fd: int


def claim_stdio() -> Wire:
    """Take fds 0 and 1 for the wire (see the module docstring); for the rest of the process."""
    sys.stdout.flush()
    read_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    write_fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    os.dup2(2, 1)
    return Wire(read_fd, write_fd)


class _Sink:
    """The wire's write side, one whole line at a time: the server's messages and the answers
    to lines it could not read share it."""

    def __init__(self, stream: FdSendStream) -> None:
        self.stream = stream
        self._lock = anyio.Lock()

    async def send(self, message: SessionMessage) -> None:
        line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
        async with self._lock:
            await self.stream.send(line.encode() + b"\n")


@asynccontextmanager
async def stdio_streams(
    wire: Wire, *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """The SDK's stream pair over `wire`; the wire's fds are closed when the block ends, after
    what the server wrote has been flushed (bounded by `FLUSH_SECONDS`)."""
    source = FdReceiveStream(wire.read_fd)
    sink = _Sink(FdSendStream(wire.write_fd))
    to_server, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    flushed = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read, source, to_server, sink, max_bytes)
            tg.start_soon(_write, from_server, sink, flushed)
            try:
                yield read_stream, write_stream
            finally:
                write_stream.close()
                with anyio.move_on_after(FLUSH_SECONDS, shield=True):
                    await flushed.wait()
                tg.cancel_scope.cancel()
    finally:
        restore_blocking(wire.read_fd, wire.write_fd)
        source.close()
        sink.stream.close()
        read_stream.close()


async def _read(
    source: FdReceiveStream,
    out: MemoryObjectSendStream[SessionMessage | Exception],
    sink: _Sink,
    max_bytes: int,
) -> None:
    framer = LineFramer(max_bytes)
    try:
        async with out:
            while True:
                try:
                    data = await source.receive()
                except anyio.EndOfStream:
                    break
                for item in framer.feed(data):
                    got = decode(item)
                    if isinstance(got, types.JSONRPCError):
                        log.debug("answered a message the server cannot read: %s", got.error)
                        try:
                            await sink.send(SessionMessage(got))
                        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                            pass  # the client is gone; its stdin's end tells the server
                    else:
                        await out.send(got)
            if framer.eof():
                await out.send(ValueError("the client's stdin ended inside a message"))
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the server stopped reading


def decode(
    item: bytes | Oversize | WrongFraming,
) -> SessionMessage | types.JSONRPCError | Exception:
    """One framed line as the SDK takes it; else the JSON-RPC error that answers it (see the
    module docstring), or, for a notification or response the SDK cannot read, the reason (the
    SDK logs it)."""
    incoming = decode_frame(item)
    if isinstance(incoming, Invalid):
        return _refusal(incoming.code, incoming.message, incoming.id)
    if isinstance(incoming, StreamFault):
        return _refusal(ErrorCode.INVALID_REQUEST, f"Invalid request: {incoming.message}", None)
    assert isinstance(item, bytes)
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(item, by_name=False))
    except ValueError as exc:
        if isinstance(incoming, Request):
            return _refusal(
                ErrorCode.INVALID_REQUEST, "Invalid request: not an MCP message", incoming.id
            )
        return exc


def _refusal(code: int, message: str, rid: int | str | None) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=rid, error=types.ErrorData(code=int(code), message=message)
    )


async def _write(
    source: MemoryObjectReceiveStream[SessionMessage], sink: _Sink, flushed: anyio.Event
) -> None:
    try:
        async with source:
            async for message in source:
                try:
                    await sink.send(message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the client is gone; its stdin's end tells the server
    finally:
        flushed.set()
