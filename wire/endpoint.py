"""The pump: a sans-I/O `Connection` driven over an anyio byte stream pair.

Theory of operation
-------------------
`Endpoint.run()` is the reader: it feeds every chunk the peer sends to the connection and acts
on the events, in wire order, until the conversation ends; then every request still waiting
fails at once with `ConnectionClosed` and `run()` returns why it ended (`StreamEnd`).

- A reply goes to the task waiting in `request()` for that id: a typed result, `RemoteError`
  for an error reply, `RemoteProtocolError` for a result that does not fit the method. A waiter
  that is cancelled abandons its id, so a reply that still comes is dropped, not a fault.
- A request from the peer is served by the request handler (typed params in, a result out; it
  raises `WireError` to answer with an error). Methods in `inline` are served by the reader
  itself, one after another, so they take effect in the order sent; every other request gets
  a task of the endpoint's own task group, so a slow one never stalls the reader. An `eager`
  endpoint (both of tether's) saves that task while it can: it starts serving such a request
  in the reader's own task, as Python 3.12's eager tasks would; a request that never waits is
  answered without a task switch, and the moment its handler or its answer's write first
  waits (`_FirstWait` sees it yield to the event loop) a standby task is woken to read on from
  the next event, while the request keeps the task it started in. So a peer that stops
  reading holds the request whose answer it does not take, never the reader. At most
  `max_concurrent` requests, and at most `max_held_bytes` of them, are served at once: past
  that the reader stops reading, the peer's pipe fills and the peer waits (backpressure),
  rather than this side starting unbounded work or holding unbounded memory.
  This is the one place where an exception becomes a wire error: `WireError` as itself, a line
  over the peer's cap as MESSAGE_TOO_LARGE, anything else as INTERNAL_ERROR with a fixed
  sentence (no library text or traceback crosses the wire).
- The `gate` sees every request and notification first and may refuse it (`WireError`), e.g.
  anything but `initialize` before the handshake.
- What the peer gets wrong is judged by `strict`. A strict endpoint (the parent, facing a child
  that may be hostile) ends the conversation at the first line that is not JSON-RPC, a framing
  fault, or a reply to an id it never sent, and records the fault. A lenient one (the child,
  facing its parent) answers the error, as JSON-RPC asks, and serves on; only wrong framing
  ends it, because such a peer will never send a line it can read.

The idle clock (`quiet_for`) counts the peer's silence only while this side owes it nothing:
time spent answering one of its requests (a slow model turn) is not the peer being idle, but
time spent waiting for the peer to take an answer (it does not read) is.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from msgspec import Struct

from tether.protocol import (
    ConnectionClosed,
    ErrorCode,
    LocalProtocolError,
    RemoteError,
    RemoteProtocolError,
    WireError,
)
from tether.protocol.codec import ErrorObject
from tether.protocol.connection import (
    Closed,
    Connection,
    ErrorReceived,
    Event,
    MessageInvalid,
    NotificationDropped,
    NotificationReceived,
    ReplyLate,
    ReplyUnexpected,
    RequestReceived,
    RequestRefused,
    ResponseReceived,
    ResultInvalid,
    StreamFaulted,
)
from tether.protocol.methods import MethodSpec

log = logging.getLogger("tether.wire")

P = TypeVar("P")
R = TypeVar("R")

RequestHandler = Callable[[str, Any], Awaitable[Any]]
"""Serve one request: (method, typed params) → result; raise `WireError` to refuse it."""
NotificationHandler = Callable[[str, Any], Awaitable[None] | None]
"""Take one notification; may be synchronous (return `None`) when it never waits."""
Gate = Callable[[str], None]
"""Raise `WireError` to refuse a method in the current state."""
InternalError = Callable[[str, BaseException], str]
"""The sentence sent for an unexpected exception while serving `method` (and where to log)."""

MAX_CONCURRENT_REQUESTS = 32
MAX_HELD_BYTES = 64 * 1024 * 1024
"""Bytes of the peer's requests served at once (a single larger one is still served alone)."""


class StreamEnd(Struct, frozen=True):
    """Why the conversation ended. (A msgspec `Struct`: a frozen dataclass cost ≈ 0.8 ms to
    define, on every child's start.)"""

    reason: str
    fault: str | None = None
    """A protocol violation by the peer (garbage, wrong framing, a stray reply), if that is why."""
    oversize: str | None = None
    """A line from the peer over this side's cap, if that is why."""
    truncated: bool = False
    """The peer's stream ended in the middle of a message."""


class _Waiter:
    __slots__ = ("done", "error", "on_answer", "result")

    def __init__(self, on_answer: Callable[[], None] | None = None) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.on_answer = on_answer


def _no_gate(method: str) -> None:
    return None


def _internal(method: str, exc: BaseException) -> str:
    log.error("unexpected error while serving %s", method, exc_info=exc)
    return f"internal error while serving {method}"


class Endpoint:
    def __init__(
        self,
        connection: Connection,
        receive: ByteReceiveStream,
        send: ByteSendStream,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        strict: bool,
        gate: Gate = _no_gate,
        inline: frozenset[str] = frozenset(),
        max_concurrent: int = MAX_CONCURRENT_REQUESTS,
        max_held_bytes: int = MAX_HELD_BYTES,
        internal_error: InternalError = _internal,
        close_on_send_failure: bool = False,
        answered: Callable[[str], None] | None = None,
        eager: bool = False,
        on_end: Callable[[StreamEnd], None] | None = None,
    ) -> None:
        """`close_on_send_failure`: a peer that stops reading is gone (the child's view of its
        parent); otherwise only the write fails, and whatever the peer already sent is still
        read (the parent's view of a child that answered and exited). `answered(method)` is
        called right after a request's answer is written. `eager`: serve a request that is
        not `inline` in the reader's own task until it first waits (see `_on_event`).
        `on_end(end)` is called once, the moment the conversation ends, before any waiter
        wakes (`run()` returns later: requests still being served are cancelled first)."""
        self.connection = connection
        self._receive = receive
        self._receive_into: Callable[[memoryview], Awaitable[int]] | None = getattr(
            receive, "receive_into", None
        )
        self._send_stream = send
        self._on_request = on_request
        self._on_notification = on_notification
        self._strict = strict
        self._gate = gate
        self._inline = inline
        self._internal_error = internal_error
        self._close_on_send_failure = close_on_send_failure
        self._answered = answered
        self._eager = eager
        self._on_end = on_end
        self._tg: TaskGroup | None = None
        """The task group of `run`: requests served in tasks, the standby reader."""
        self._pending: deque[Event] = deque()
        """Events read and not yet acted on (the reader may change tasks between two)."""
        self._reader: object = None
        """The reading task's token: a task that finds another one there stops reading."""
        self._take_over = anyio.Event()
        self._waiters: dict[Any, _Waiter] = {}
        # fast_acquire: no event-loop turn per request while a slot is free.
        self._slots = anyio.Semaphore(max_concurrent, fast_acquire=True)
        self._max_held_bytes = max_held_bytes
        self._held = 0
        """Bytes of the peer's requests being served right now (their lines' sizes)."""
        self._budget_freed: anyio.Event | None = None
        """Made when the reader waits for held bytes to be freed (rarely: most requests are
        small), set and dropped when some are."""
        self._serving = 0
        self.last_message_at = time.monotonic()
        """When the peer last sent a message."""
        self._last_activity_at = self.last_message_at
        self.end: StreamEnd | None = None
        self.ended = anyio.Event()
        self.dropped_notifications = 0
        self.late_replies = 0

    # --- sending ----------------------------------------------------------------------------

    async def request(
        self,
        method: MethodSpec[P, R],
        params: P,
        *,
        on_answer: Callable[[], None] | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> R:
        """Send a request and return its typed result.

        Raises `RemoteError` for an error reply, `RemoteProtocolError` for a result that does
        not fit, `ConnectionClosed` when the conversation ends first (or already has), and
        `LocalProtocolError` when the request would pass the peer's byte cap. `on_answer()` is
        called the moment the answer is read, in the reader, before any later message of the
        peer is acted on (whatever the peer sends after its answer sees its effect);
        `on_sent()` once the whole request is written.
        """
        result: R = await self.request_raw(method, params, on_answer=on_answer, on_sent=on_sent)
        return result

    async def request_raw(
        self,
        method: MethodSpec[Any, Any] | str,
        params: Any,
        *,
        on_answer: Callable[[], None] | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> Any:
        """`request` for a method outside the typed table (the conformance kit's probes)."""
        if self.end is not None:
            raise ConnectionClosed(self._why(self.end))
        rid, line = self.connection.send_request(method, params)
        waiter = self._waiters[rid] = _Waiter(on_answer)
        try:
            await self._write(line)
            if on_sent is not None:
                on_sent()
            await waiter.done.wait()
        except BaseException:
            if not waiter.done.is_set():
                self.connection.abandon(rid)
            raise
        finally:
            self._waiters.pop(rid, None)
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    async def notify(self, method: MethodSpec[Any, Any] | str, params: Any = None) -> None:
        """Send a notification; raises `ConnectionClosed` when the peer is gone."""
        if self.end is not None:
            raise ConnectionClosed(self._why(self.end))
        await self._write(self.connection.send_notification(method, params))

    async def _write(self, line: bytes) -> None:
        try:
            await self._send_stream.send(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            why = str(exc) or "the peer's input is closed"
            if self._close_on_send_failure:
                self._finish(self.connection.close(f"the peer stopped reading: {why}"))
            raise ConnectionClosed(why) from None

    def close(self, reason: str) -> None:
        """End the conversation from this side: every waiting request fails now."""
        self._finish(self.connection.close(reason))

    # --- the reader -------------------------------------------------------------------------

    async def run(self) -> StreamEnd:
        """Read and serve until the conversation ends; return why it ended. Requests still
        being served when it ends are cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                if self._eager:
                    tg.start_soon(self._standby)
                await self._read()
                # The reading went on in another task (`_hand_on`): wait for the end there.
                await self.ended.wait()
            finally:
                if self.end is None:
                    self._finish(self.connection.close("reader stopped"))
                tg.cancel_scope.cancel()
        assert self.end is not None
        return self.end

    async def _read(self) -> None:
        """Be the reader until the conversation ends, or until a request this task serves has
        to wait and the reading moves on to the standby (`_hand_on`)."""
        me = self._reader = object()
        pending = self._pending
        while self.end is None:
            if not pending:
                # A long line is read straight into the connection's buffer for it.
                into = self.connection.receive_buffer() if self._receive_into else None
                try:
                    if into is not None:
                        assert self._receive_into is not None
                        n = await self._receive_into(into)
                    else:
                        data = await self._receive.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pending.extend(self.connection.receive_eof())
                else:
                    if into is not None:
                        pending.extend(self.connection.receive_into(n))
                    else:
                        pending.extend(self.connection.receive_data(data))
                continue
            await self._on_event(pending.popleft())
            if self._reader is not me:
                return  # this task now belongs to the request it served; another one reads
        pending.clear()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()  # the end: requests still being served are cancelled

    async def _standby(self) -> None:
        """Wait to take the reading over from a task whose eagerly served request waits."""
        await self._take_over.wait()
        self._take_over = anyio.Event()  # before anything else runs: the next hand-on's
        assert self._tg is not None
        self._tg.start_soon(self._standby)
        await self._read()

    def _hand_on(self) -> None:
        """An eagerly served request waits for the first time: from now on the standby reads."""
        self._reader = object()
        self._take_over.set()

    async def _on_event(self, ev: Event) -> None:
        # Notifications first: a child's progress events are most of what a parent reads.
        if type(ev) is NotificationReceived:
            self.last_message_at = self._last_activity_at = time.monotonic()
            try:
                self._gate(ev.method)
            except WireError:
                return
            pending = self._on_notification(ev.method, ev.params)
            if pending is not None:
                await pending
        elif isinstance(ev, ResponseReceived | ErrorReceived | ResultInvalid):
            self._touch()
            self._deliver(ev)
        elif isinstance(ev, RequestReceived):
            self._touch()
            if ev.method in self._inline:
                await self._serve(ev)
            else:
                # Backpressure: a peer that floods requests waits, its pipe full, once
                # `max_concurrent` requests or `max_held_bytes` of them are being served.
                try:
                    # A free slot is taken without anyio's cancellation check (a walk of this
                    # task's cancel scopes): the reader is only ever cancelled at its reads.
                    self._slots.acquire_nowait()
                except anyio.WouldBlock:
                    await self._slots.acquire()
                while self._held and self._held + ev.size > self._max_held_bytes:
                    if self._budget_freed is None:
                        self._budget_freed = anyio.Event()
                    await self._budget_freed.wait()
                self._held += ev.size
                if not self._eager:
                    assert self._tg is not None
                    self._tg.start_soon(self._serve_in_slot, ev)
                    return
                # Eagerly, in this task: a request that never waits costs no task of its own.
                # If it or its answer's write waits, the reading moves to the standby.
                await self._serve_in_slot(ev, eager=True)
        else:
            await self._on_other(ev)

    async def _on_other(self, ev: Event) -> None:
        """Everything but the common three: refusals, drops, strays, faults, the end."""
        if isinstance(ev, RequestRefused):
            self._touch()
            await self._refuse(ev)
        elif isinstance(ev, NotificationDropped):
            self._touch()
            self.dropped_notifications += 1
            log.debug("dropped a notification: %s", ev.reason)
        elif isinstance(ev, ReplyLate):
            self._touch()
            self.late_replies += 1
        elif isinstance(ev, ReplyUnexpected):
            self._touch()
            if self._strict:
                self._finish(
                    self.connection.close("unexpected response"),
                    fault=f"a response to unknown id {ev.id!r}",
                )
            elif ev.id is None and ev.error is not None:
                log.warning("the peer reported an error: %s (%s)", ev.error.message, ev.error.code)
            else:
                log.warning("dropping a reply to unknown request id %r", ev.id)
        elif isinstance(ev, MessageInvalid):
            if self._strict:
                self._finish(
                    self.connection.close("garbage"),
                    fault=f"the peer wrote a line that is not JSON-RPC: {ev.message} "
                    f"({_preview(ev.line)})",
                )
            else:
                await self._answer(ev.id, None, error=(ev.code, ev.message, None))
        elif isinstance(ev, StreamFaulted):
            if self._strict or ev.code == ErrorCode.WRONG_FRAMING:
                if not self._strict:
                    await self._answer(None, None, error=(ev.code, ev.message, None))
                oversize = ev.code == ErrorCode.MESSAGE_TOO_LARGE
                self._finish(
                    self.connection.close("oversize" if oversize else "wrong framing"),
                    fault=None if oversize else ev.message,
                    oversize=ev.message if oversize else None,
                )
            else:
                await self._answer(None, None, error=(ev.code, ev.message, None))
        else:
            assert isinstance(ev, Closed)
            self._finish(ev)

    def _touch(self) -> None:
        self.last_message_at = self._last_activity_at = time.monotonic()

    def _deliver(self, ev: ResponseReceived | ErrorReceived | ResultInvalid) -> None:
        waiter = self._waiters.get(ev.id)
        if waiter is None:
            return  # its caller is gone (cancelled after the id was answered)
        if isinstance(ev, ResponseReceived):
            waiter.result = ev.result
        elif isinstance(ev, ErrorReceived):
            err: ErrorObject = ev.error
            waiter.error = RemoteError(err.code, err.message, err.data)
        else:
            waiter.error = RemoteProtocolError(ev.reason, ErrorCode.INVALID_PARAMS)
        if waiter.on_answer is not None:
            waiter.on_answer()
        waiter.done.set()

    # --- serving ----------------------------------------------------------------------------

    async def _serve_in_slot(self, ev: RequestReceived, *, eager: bool = False) -> None:
        """`eager`: served in the reader's task, which hands the reading on the first time
        the handler or the answer's write waits: a peer that does not read (its pipe full)
        holds the request, never the reader."""
        try:
            if eager:
                await _FirstWait(self._serve(ev), self._hand_on)
            else:
                await self._serve(ev)
        finally:
            self._held -= ev.size
            self._slots.release()
            freed, self._budget_freed = self._budget_freed, None
            if freed is not None:
                freed.set()

    async def _serve(self, ev: RequestReceived) -> None:
        error: tuple[int, str, Any] | None = None
        result: Any = None
        self._serving += 1
        try:
            self._gate(ev.method)
            result = await self._on_request(ev.method, ev.params)
        except WireError as exc:
            error = (exc.code, exc.message, exc.data)
        except Exception as exc:
            error = (ErrorCode.INTERNAL_ERROR, self._internal_error(ev.method, exc), None)
        finally:
            # The idle clock runs again from here: writing the answer into a peer that does
            # not read is the peer's stall, not this side's work.
            self._serving -= 1
            self._last_activity_at = time.monotonic()
        await self._answer(ev.id, ev.method, result=result, error=error)

    async def _refuse(self, ev: RequestRefused) -> None:
        try:
            self._gate(ev.method)
        except WireError as exc:
            await self._answer(ev.id, ev.method, error=(exc.code, exc.message, exc.data))
            return
        await self._answer(ev.id, ev.method, error=(ev.code, ev.message, None))

    async def _answer(
        self,
        rid: Any,
        method: str | None,
        *,
        result: Any = None,
        error: tuple[int, str, Any] | None = None,
    ) -> None:
        """Write the answer to request `rid` (an error when `error` is given)."""
        conn = self.connection
        if conn.closed is not None:
            return
        try:
            if error is not None:
                line = conn.send_error(rid, *error)
            else:
                line = conn.send_response(rid, result)
        except LocalProtocolError as exc:
            try:
                line = conn.send_error(rid, ErrorCode.MESSAGE_TOO_LARGE, exc.message)
            except LocalProtocolError as again:  # even the short error does not fit
                log.error("cannot answer request %r: %s", rid, again.message)
                return
        except Exception as exc:  # a result that cannot be encoded
            name = method or "?"
            line = conn.send_error(rid, ErrorCode.INTERNAL_ERROR, self._internal_error(name, exc))
        try:
            await self._write(line)
        except ConnectionClosed:
            return
        if method is not None and self._answered is not None:
            self._answered(method)

    # --- ending -----------------------------------------------------------------------------

    def _finish(
        self, closed: Closed, *, fault: str | None = None, oversize: str | None = None
    ) -> None:
        if self.end is not None:
            return
        self.end = StreamEnd(closed.reason, fault, oversize, closed.truncated)
        if self._on_end is not None:
            self._on_end(self.end)
        why = ConnectionClosed(self._why(self.end))
        for waiter in self._waiters.values():
            if not waiter.done.is_set():
                waiter.error = why
                waiter.done.set()
        self.ended.set()

    @staticmethod
    def _why(end: StreamEnd) -> str:
        return end.fault or end.oversize or end.reason

    def quiet_for(self) -> float:
        """Seconds the peer has been silent with nothing to wait for: 0 while this side is
        still answering one of its requests, counted again from the moment that answer went."""
        if self._serving:
            return 0.0
        return time.monotonic() - self._last_activity_at


class _FirstWait:
    """Await `pending` exactly as `await pending` would, calling `first_wait()` the first time
    it yields to the event loop (the moment a task of its own would have been needed)."""

    __slots__ = ("_first_wait", "_pending")

    def __init__(self, pending: Awaitable[Any], first_wait: Callable[[], None]) -> None:
        self._pending = pending
        self._first_wait = first_wait

    def __await__(self) -> Generator[Any, Any, Any]:
        pending = self._pending
        if not isinstance(pending, Coroutine):
            self._first_wait()  # cannot be stepped by hand: assume it waits
            return (yield from pending.__await__())
        try:
            step = pending.send(None)
        except StopIteration as done:
            return done.value
        self._first_wait()
        # From here on exactly what `yield from pending` does, the first step already taken.
        while True:
            try:
                sent = yield step
            except GeneratorExit:
                pending.close()
                raise
            except BaseException as exc:
                try:
                    step = pending.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    step = pending.send(sent)
                except StopIteration as done:
                    return done.value


def _preview(line: bytes, n: int = 60) -> str:
    text = line[:n].decode("utf-8", "replace")
    return repr(text + ("..." if len(line) > n else ""))
