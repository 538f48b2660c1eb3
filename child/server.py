"""The stdio server: the wire endpoint, the session's handlers behind jsonrpcserver, and a clean
stop.

See the theory of operation in `session.py`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from tether.child.dispatch import Dispatcher
from tether.child.errors import INTERNAL_MESSAGE
from tether.child.fdguard import WireFds
from tether.child.session import EXIT_OK, EXIT_PROTOCOL, LONG_RUNNING, Session
from tether.protocol.connection import Connection
from tether.protocol.methods import METHODS
from tether.wire import Endpoint, FdReceiveStream, FdSendStream
from tether.wire.streams import restore_blocking

if TYPE_CHECKING:
    from tether.child.runs import AgentFactory
    from tether.child.tools import ToolRegistry

log = logging.getLogger("tether.child")

BACKSTOP_SECONDS = 0.5
"""Once the child decides to stop, the process ends within this long, whatever still runs."""
INLINE = frozenset(
    name
    for name, spec in METHODS.items()
    if spec.direction == "parent_to_child" and name not in LONG_RUNNING
)
"""Requests the reader serves itself, in order (`exit` after `shutdown` sees the shutdown)."""


def _internal(method: str, exc: BaseException) -> str:
    log.error("unexpected error while serving %s", method, exc_info=exc)
    return INTERNAL_MESSAGE


async def serve(
    wire: WireFds,
    *,
    tools: ToolRegistry | None = None,
    agent_factory: AgentFactory | None = None,
) -> int:
    """Speak the protocol on the wire fds until exit, EOF or a fatal fault; return the exit
    status. `agent_factory` replaces the built-in agent loop (see `agent.py`)."""
    try:
        return await serve_streams(
            FdReceiveStream(wire.read_fd),
            # No finish bound: a parent that stops reading cannot hold the child, the backstop
            # ends the process once it decides to stop.
            FdSendStream(wire.write_fd, finish_seconds=None),
            tools=tools,
            agent_factory=agent_factory,
            arm_backstop=True,
        )
    finally:
        restore_blocking(wire.read_fd, wire.write_fd)


async def serve_streams(
    receive: ByteReceiveStream,
    send: ByteSendStream,
    *,
    tools: ToolRegistry | None = None,
    agent_factory: AgentFactory | None = None,
    arm_backstop: bool = False,
) -> int:
    """Serve the protocol over any byte stream pair (a pipe pair, or memory streams when the
    runtime is hosted in-process); return the exit status."""
    session = Session(tools, agent_factory=agent_factory)
    dispatcher = Dispatcher(session.handlers())
    endpoint = Endpoint(
        Connection("child"),
        receive,
        send,
        on_request=dispatcher.request,
        on_notification=dispatcher.notification,
        strict=False,
        gate=session.gate,
        inline=INLINE,
        internal_error=_internal,
        close_on_send_failure=True,
        answered=session.answered,
        eager=True,  # a run that never waits is served without a task of its own
    )
    session.attach(endpoint)

    async def read() -> None:
        end = await endpoint.run()
        if end.reason == "wrong framing":
            session.stop(EXIT_PROTOCOL)  # such a peer will never send a line we can read
        else:
            if end.truncated:
                log.warning("the wire ended in the middle of a message")
            session.stop(EXIT_OK)

    async with anyio.create_task_group() as tg:
        session.tasks = tg
        tg.start_soon(read)
        await session.stopped.wait()
        if arm_backstop:
            if session.settled and not (isinstance(send, FdSendStream) and send.writing):
                _end_now()
            _arm_backstop(session.exit_code or 0)
        endpoint.close("the child is stopping")
        tg.cancel_scope.cancel()
    return session.exit_code or 0


def _end_now() -> None:
    """End the process at once, status 0: `exit` (or EOF) came after a completed shutdown and
    nothing is being written. Unwinding the task group and the event loop first cost ≈ 1 ms
    and bought nothing: every answer is out, and the process's state dies with it."""
    logging.shutdown()  # flushes the log handlers (stderr)
    sys.stderr.flush()
    os._exit(EXIT_OK)


def _arm_backstop(code: int) -> None:
    """Guarantee a prompt exit even if a task or a worker thread will not unwind."""

    def fire() -> None:
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(BACKSTOP_SECONDS, fire)
    timer.daemon = True
    timer.start()
