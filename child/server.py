"""The stdio server: read the wire, route each message, write the answers, stop cleanly.

See the theory of operation in `session.py`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from tether.child.dispatch import Dispatcher
from tether.child.fdguard import WireFds
from tether.child.peer import Peer
from tether.child.session import EXIT_OK, EXIT_PROTOCOL, LONG_RUNNING, Session
from tether.child.transport import LineWriter, PeerGone, read_chunks, restore_blocking
from tether.protocol import (
    Decoder,
    ErrorCode,
    ErrorResponse,
    Incoming,
    Invalid,
    LocalProtocolError,
    Notification,
    Request,
    RequestId,
    Response,
    StreamFault,
    encode_error,
)

if TYPE_CHECKING:
    from tether.child.runs import AgentFactory
    from tether.child.tools import ToolRegistry

log = logging.getLogger("tether.child")

BACKSTOP_SECONDS = 0.5
"""Once the child decides to stop, the process ends within this long, whatever still runs."""


async def serve(
    wire: WireFds,
    *,
    tools: ToolRegistry | None = None,
    agent_factory: AgentFactory | None = None,
) -> int:
    """Speak the protocol on `wire` until exit, EOF or a fatal fault; return the exit status.
    `agent_factory` replaces the built-in agent loop (see `agent.py`)."""
    writer = LineWriter(wire.write_fd)
    peer = Peer(writer)
    session = Session(writer, peer, tools, agent_factory=agent_factory)
    server = _Server(session, writer, peer, Dispatcher(session.handlers(), session.gate))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.read_loop, wire.read_fd, tg)
        await session.stopped.wait()
        _arm_backstop(session.exit_code or 0)
        peer.close()
        tg.cancel_scope.cancel()
    restore_blocking(wire.read_fd, wire.write_fd)
    return session.exit_code or 0


def _arm_backstop(code: int) -> None:
    """Guarantee a prompt exit even if a task or a worker thread will not unwind."""

    def fire() -> None:
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(BACKSTOP_SECONDS, fire)
    timer.daemon = True
    timer.start()


class _Server:
    def __init__(
        self, session: Session, writer: LineWriter, peer: Peer, dispatcher: Dispatcher
    ) -> None:
        self._session = session
        self._writer = writer
        self._peer = peer
        self._dispatcher = dispatcher

    async def read_loop(self, fd: int, tg: TaskGroup) -> None:
        decoder = Decoder()
        async for chunk in read_chunks(fd):
            for msg in decoder.feed(chunk):
                await self._route(msg, tg)
                if self._session.exit_code is not None:
                    return
        if decoder.eof():
            log.warning("the wire ended in the middle of a message")
        self._session.stop(EXIT_OK)

    async def _route(self, msg: Incoming, tg: TaskGroup) -> None:
        if isinstance(msg, Response | ErrorResponse):
            self._peer.deliver(msg)
        elif isinstance(msg, Request) and msg.method in LONG_RUNNING:
            tg.start_soon(self._answer, msg)
        elif isinstance(msg, Request | Notification):
            await self._answer(msg)
        elif isinstance(msg, Invalid):
            await self._send(encode_error(msg.id, msg.code, msg.message), msg.id)
        elif isinstance(msg, StreamFault):
            await self._send(encode_error(None, msg.code, msg.message), None)
            if msg.code == ErrorCode.WRONG_FRAMING:
                # A peer speaking LSP-style framing will never send a line we can read.
                self._session.stop(EXIT_PROTOCOL)

    async def _answer(self, msg: Request | Notification) -> None:
        line = await self._dispatcher.handle(msg)
        if line is not None and isinstance(msg, Request):
            await self._send(line, msg.id)
            if msg.method == "initialize" and self._session.initialized:
                self._session.warm_up()

    async def _send(self, line: bytes, rid: RequestId | None) -> None:
        try:
            if not self._writer.fits(line):
                line = encode_error(
                    rid,
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"the response ({len(line) - 1} bytes) passes the parent's "
                    f"{self._writer.max_message_bytes}-byte cap",
                )
            await self._writer.send(line)
        except PeerGone:
            self._session.stop(EXIT_OK)
        except LocalProtocolError as exc:  # even the short error does not fit: a tiny cap
            log.error("cannot answer request %r: %s", rid, exc.message)
