"""The parent's end of one child's protocol, whatever carries its bytes: the endpoint over the
child's byte streams, routing what the child asks to whatever handlers are bound at the moment,
the typed session, the end of its output noted where the run looks — and the handshake.

A local process (`supervised.SupervisedChild`, over its pipes) and a child runtime served in
memory (`tether.parent.run.transport.memory`) are both a `WiredChild`; a run drives either the
same way (`tether.parent.run.handle`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from tether._about import __version__
from tether.parent.process.classify import Observed
from tether.parent.process.config import ChildConfig
from tether.protocol import ConnectionClosed, ErrorCode, RemoteError, RemoteProtocolError, WireError
from tether.protocol.connection import Connection
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    ClientCapabilities,
    InitializeParams,
    PeerInfo,
)
from tether.wire import Endpoint, StreamEnd
from tether.wire.child_session import ChildSession

log = logging.getLogger("tether.parent")

RequestHandler = Callable[[str, Any], Awaitable[Any]]
NotificationHandler = Callable[[str, Any], Awaitable[None] | None]
"""Synchronous where it can be (the broker's relay of events), or a coroutine to await."""


async def _nobody_serves(method: str, params: Any) -> Any:
    raise WireError(ErrorCode.NOT_INITIALIZED, f"no run has started in this child yet ({method})")


def _nobody_listens(method: str, params: Any) -> None:
    return None


def _internal(method: str, exc: BaseException) -> str:
    # The one place a parent-side failure becomes a wire error: no traceback or library text
    # crosses to the child.
    log.error("the parent failed to answer %s", method, exc_info=exc)
    return f"the parent failed to answer {method}"


class WiredChild:
    """A child that speaks tether's protocol, as its run drives it: `endpoint` (whose `run()` is
    the reader), `session` (typed calls), `observed` (what the supervisor noticed), `ready`
    (it answered `initialize`), `cut_off` (the supervisor interrupted it: no polite
    `shutdown`). A subclass holds what carries the bytes and calls `_wire` with its streams."""

    observed: Observed

    def _wire(
        self, receive: ByteReceiveStream, send: ByteSendStream, *, max_message_bytes: int
    ) -> None:
        self._on_request: RequestHandler = _nobody_serves
        self._on_notification: NotificationHandler = _nobody_listens
        self.endpoint = Endpoint(
            Connection("parent", max_message_bytes=max_message_bytes),
            receive,
            send,
            on_request=self._route_request,
            on_notification=self._route_notification,
            strict=True,
            internal_error=_internal,
            # A model turn answered without waiting (a scripted model) costs no task; one that
            # waits, or an answer the child does not read, hands the reading on (endpoint.py).
            eager=True,
            on_end=self._note_end,
        )
        self.session = ChildSession(self.endpoint)
        self._ready = False
        self.cut_off = False
        """The supervisor interrupted it (deadline, idle, cancel): no polite shutdown rung."""

    @property
    def ready(self) -> bool:
        """The child answered `initialize`."""
        return self._ready

    @ready.setter
    def ready(self, value: bool) -> None:
        self._ready = value
        if value:
            self._on_ready()

    def _on_ready(self) -> None:
        """The child answered `initialize`: everything its start set up is in place (a local
        process's sandbox included; `SupervisedChild` holds its mount namespace from here)."""

    # --- who serves the child's requests ----------------------------------------------------

    def serve_with(self, on_request: RequestHandler, on_notification: NotificationHandler) -> None:
        """Route the child's requests and notifications to these handlers from now on (the run
        that drives it; a pooled child waits unbound until a run takes it)."""
        self._on_request = on_request
        self._on_notification = on_notification

    async def _route_request(self, method: str, params: Any) -> Any:
        return await self._on_request(method, params)

    def _route_notification(self, method: str, params: Any) -> Awaitable[None] | None:
        return self._on_notification(method, params)

    async def _read(self) -> None:
        await self.endpoint.run()

    def _note_end(self, end: StreamEnd) -> None:
        # At the end itself: whoever wakes on it (the run, the ladder) sees why.
        if end.oversize:
            self.observed.oversize = end.oversize
        elif end.fault:
            self.observed.protocol_error = end.fault
        if end.truncated:
            self.observed.truncated = True

    # --- the protocol's own rungs of a dispose ------------------------------------------------

    @property
    def _polite(self) -> bool:
        """Whether the child is asked to `shutdown` first: it is ready, was not cut off, and
        its output has not ended."""
        return self.ready and not self.cut_off and self.endpoint.end is None

    async def _say_goodbye(self) -> None:
        """`shutdown`, answered, then `exit`."""
        try:
            await self.session.shutdown()
            await self.session.exit()
        except (ConnectionClosed, RemoteError):
            pass

    async def _say_exit(self) -> None:
        if self.endpoint.end is not None:
            return
        try:
            await self.session.exit()
        except ConnectionClosed:
            pass


class Greeted(Protocol):
    """What the handshake uses of a child (a `WiredChild` is one)."""

    observed: Observed
    session: ChildSession
    ready: bool


async def handshake(child: Greeted, cfg: ChildConfig) -> bool:
    """`initialize`, within the handshake timeout; whether the child is ready for a run. What
    went wrong is recorded in `child.observed`."""
    observed = child.observed
    seconds = cfg.handshake_timeout
    try:
        with anyio.fail_after(seconds):
            await child.session.initialize(
                InitializeParams(
                    protocol_version=PROTOCOL_VERSION,
                    client_info=PeerInfo(name="tether-supervisor", version=version()),
                    capabilities=ClientCapabilities(),
                    max_message_bytes=cfg.max_message_bytes,
                )
            )
    except TimeoutError:
        observed.handshake = seconds
        return False
    except ConnectionClosed:
        return False
    except RemoteError as exc:
        observed.protocol_error = f"the child refused initialize: {exc.message}"
        return False
    except RemoteProtocolError as exc:
        observed.protocol_error = exc.message
        return False
    child.ready = True
    return True


def version() -> str:
    """tether's version (`tether._about`)."""
    return __version__
