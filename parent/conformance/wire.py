"""One child under test: spawned like any child, read through the connection core, and fed raw
bytes when a check needs to send what no well-behaved parent would.

The child's stdout is read by a `Connection` (role parent, results left raw so the checks can
judge the exact bytes): its events sort what the child sends into replies, requests and
notifications, and everything that is not protocol v1 is described in `junk` (the last check
reports all of it). Requests from the child are answered as a parent would: `model/complete` by
the check's model, `tool/approve` with `allow: true`; what a child may not send is refused by
the connection with the right error. Raw lines the kit writes are `track`ed by id, so their
replies are matched like any other. The child is spawned through the trampoline
(`ChildProcess.spawn`: own session, PDEATHSIG) and always ends with its process group
SIGKILLed and reaped.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from tether.parent.process.proc import ChildProcess, SpawnError
from tether.parent.process.ring import ByteRing
from tether.parent.process.start import SpawnSpec
from tether.protocol import ErrorCode, LocalProtocolError
from tether.protocol.codec import ErrorResponse, RequestId, Response
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
from tether.protocol.messages import ModelCompleteParams, ModelCompleteResult, ToolApproveResult
from tether.wire import FdReceiveStream

REPLY_TIMEOUT = 5.0
"""How long the child has to answer a short request (initialize, ping, an error)."""
REAP_TIMEOUT = 5.0
POLL_INTERVAL = 0.005

Reply = Response | ErrorResponse
Model = Callable[[ModelCompleteParams], Awaitable[ModelCompleteResult]]


class CheckFailed(Exception):
    """The child did something protocol v1 does not allow; the message says what."""


class Wire:
    """One child process under test, driven line by line over its stdin/stdout."""

    def __init__(self, proc: ChildProcess, model: Model, tg: TaskGroup) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._tg = tg
        self._conn = Connection("parent", typed_results=False)
        self.stderr = ByteRing(16 * 1024)
        self._replies: list[Reply] = []
        self.notifications: list[NotificationReceived] = []
        self.requests: list[RequestReceived] = []
        self.junk: list[str] = []
        """Everything seen on stdout that is not protocol v1, described."""
        self.stdout_closed = False
        self._changed = anyio.Event()
        self.model = model
        self._status: int | None = None
        """Exit status once seen: the exit code, or minus the signal number."""
        self._sent: dict[RequestId, str] = {}
        """Requests the kit sent (id → method), to recognise them if they come back."""
        self._sent_notifications: set[str] = set()
        self.echo: str | None = None
        """Set when the child sent the kit's own message back: it echoes its input."""

    # --- output of the child --------------------------------------------------------------

    async def pump_stdout(self) -> None:
        out: FdReceiveStream = self.proc.stdout
        while not self.stdout_closed:
            try:
                chunk = await out.receive()
            except anyio.EndOfStream:
                events = self._conn.receive_eof()
            else:
                events = self._conn.receive_data(chunk)
            for ev in events:
                self._take(ev)
            self._notify()

    async def pump_stderr(self) -> None:
        with contextlib.suppress(anyio.EndOfStream):
            while True:
                self.stderr.write(await self.proc.stderr.receive())

    def _take(self, ev: Event) -> None:
        if isinstance(ev, ResponseReceived):
            self._replies.append(Response(ev.id, ev.result))
        elif isinstance(ev, ErrorReceived):
            self._replies.append(ErrorResponse(ev.id, ev.error))
        elif isinstance(ev, ReplyUnexpected):
            if ev.error is not None and ev.id is None:
                self._replies.append(ErrorResponse(None, ev.error))
            else:
                self.junk.append(f"a reply to id {ev.id!r}, which the kit never sent")
        elif (
            isinstance(ev, RequestReceived | RequestRefused) and self._sent.get(ev.id) == ev.method
        ):
            # Our own request, id and all, came back: answering it would only be echoed back
            # too, and then look like the child's answer.
            self._echoed(f"{ev.method} request (id {ev.id!r})")
        elif isinstance(ev, RequestReceived):
            self.requests.append(ev)
            self._tg.start_soon(self._serve, ev)
        elif isinstance(ev, RequestRefused):
            self.junk.append(f"a request the child may not send: {ev.message}")
            self._tg.start_soon(self._write, self._conn.send_error(ev.id, ev.code, ev.message))
        elif isinstance(ev, NotificationDropped) and ev.method in self._sent_notifications:
            self._echoed(f"{ev.method} notification")
        elif isinstance(ev, NotificationReceived):
            self.notifications.append(ev)
        elif isinstance(ev, NotificationDropped):
            what = (
                "params that do not fit the schema"
                if ev.known
                else "a method a child does not send"
            )
            self.junk.append(f"a notification with {what}: {ev.reason}")
        elif isinstance(ev, MessageInvalid):
            self.junk.append(f"not a JSON-RPC 2.0 message ({ev.message}): {show(ev.line)}")
        elif isinstance(ev, StreamFaulted):
            if ev.code == ErrorCode.MESSAGE_TOO_LARGE:
                self.junk.append(
                    f"a line of more than the {self._conn.max_message_bytes} bytes "
                    "the kit announced"
                )
            else:
                self.junk.append(f"a Content-Length header instead of a JSON line ({ev.message})")
        elif isinstance(ev, Closed):
            if ev.truncated:
                self.junk.append("stdout ended in the middle of a line")
            self.stdout_closed = True
        else:
            assert isinstance(ev, ResultInvalid | ReplyLate)  # neither arises: results stay raw

    def _is_ours(self, rid: RequestId, method: str) -> bool:
        return self._sent.get(rid) == method

    def _echoed(self, what: str) -> None:
        self.junk.append(f"the kit's own {what}, sent back unchanged")
        if self.echo is None:
            self.echo = f"the child sent the kit's own {what} back unchanged: it echoes its input"

    async def _serve(self, req: RequestReceived) -> None:
        if req.method == "model/complete":
            result: Any = await self.model(req.params)
        else:
            result = ToolApproveResult(allow=True, reason="the conformance kit allows it")
        with contextlib.suppress(LocalProtocolError):
            await self._write(self._conn.send_response(req.id, result))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, found: Callable[[], Any], what: str, seconds: float) -> Any:
        """Wait until `found()` returns something truthy; fail naming `what` at the deadline."""
        with anyio.move_on_after(seconds):
            while True:
                got = found()
                if got:
                    return got
                if self.echo is not None:
                    raise CheckFailed(self.echo)
                if self.stdout_closed:
                    raise CheckFailed(f"{what}, but the child closed its stdout{self.ended()}")
                await self._changed.wait()
        raise CheckFailed(f"{what} within {seconds:g}s{self.ended()}")

    # --- input to the child ---------------------------------------------------------------

    async def _write(self, line: bytes) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self.proc.stdin.send(line)

    async def send(self, line: bytes, *, expect: RequestId | None = None, method: str = "") -> None:
        """Write raw bytes; `expect`: the id of the request they carry, whose reply is awaited
        (with `reply`) like any other."""
        if expect is not None:
            self._conn.track(expect, method or "raw")
            self._sent[expect] = method or "raw"
        try:
            await self.proc.stdin.send(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise CheckFailed(f"the child stopped reading its stdin{self.ended()}") from None

    async def request(self, method: str, params: Any = None) -> int:
        try:
            rid, line = self._conn.send_request(method, params)
        except LocalProtocolError as exc:
            raise CheckFailed(f"the kit cannot send {method}: {exc.message}") from None
        self._sent[rid] = method
        await self.send(line)
        return rid

    async def notify(self, method: str, params: Any = None) -> None:
        self._sent_notifications.add(method)
        await self.send(self._conn.send_notification(method, params))

    def close_stdin(self) -> None:
        self.proc.stdin.close()

    # --- replies --------------------------------------------------------------------------

    def take_reply(self, match: Callable[[Reply], bool]) -> Reply | None:
        for i, reply in enumerate(self._replies):
            if match(reply):
                return self._replies.pop(i)
        return None

    async def reply(self, rid: RequestId, what: str, seconds: float | None = None) -> Reply:
        got: Reply = await self.wait_for(
            lambda: self.take_reply(lambda r: r.id == rid),
            f"no answer to {what}",
            REPLY_TIMEOUT if seconds is None else seconds,
        )
        return got

    async def call(self, method: str, params: Any = None) -> Reply:
        return await self.reply(await self.request(method, params), method)

    async def result(self, method: str, params: Any = None) -> Any:
        """Call `method` and return its typed result; an error answer fails the check."""
        reply = await self.call(method, params)
        return typed_result(method, reply)

    def pending_replies(self) -> list[Reply]:
        return list(self._replies)

    # --- the process ----------------------------------------------------------------------

    def exit_status(self) -> int | None:
        """The exit status if the child has ended, without reaping it (so its process group
        id stays reserved until the kit has killed the group)."""
        if self._status is not None:
            return self._status
        if self.proc.status is not None:
            return self.proc.status.returncode
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is None or info.si_pid == 0:
            return None
        self._status = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        return self._status

    async def wait_exit(self, seconds: float) -> int | None:
        """The exit status once the child ends, or `None` if it still runs after `seconds`."""
        await self.proc.wait_for(seconds)
        return self.exit_status()

    def ended(self) -> str:
        """`; it exited with ...` when the child is gone, plus the tail of its stderr."""
        status = self.exit_status()
        text = ""
        if status is not None:
            text = f"; it exited with {describe_status(status)}"
        tail = self.stderr.tail(300).strip().splitlines()[-1:]
        if tail:
            text += f" (stderr: {tail[0][:200]})"
        return text

    async def dispose(self) -> None:
        """Kill the child's process group and reap the child; shielded, bounded."""
        with anyio.CancelScope(shield=True):
            self.exit_status()  # seen before the reap, so `ended()` still reports it
            self.proc.signal_group(signal.SIGKILL)
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait_for(REAP_TIMEOUT)
            self.proc.reap()
            self.proc.close_pipes()


def typed_result(method: str, reply: Reply) -> Any:
    """The typed result of a reply to `method`; an error answer, or a result off the schema,
    fails the check."""
    from tether.protocol.methods import decode_result

    if isinstance(reply, ErrorResponse):
        e = reply.error
        raise CheckFailed(f"{method} was answered with error {e.code} {e.message!r}")
    try:
        return decode_result(method, reply.result)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise CheckFailed(
            f"the result of {method} does not fit the schema ({exc}): {show(reply.result)}"
        ) from None


@contextlib.asynccontextmanager
async def open_wire(
    command: Sequence[str], env: Mapping[str, str], model: Model
) -> AsyncIterator[Wire]:
    """A fresh child for one check; killed (its whole process group) and reaped on exit."""
    from tether.parent.process.spawn import missing_command

    missing = missing_command(command, env)
    if missing:
        raise CheckFailed(missing)
    try:
        proc = ChildProcess.spawn(SpawnSpec(list(command), dict(env)))
    except SpawnError as exc:
        raise CheckFailed(str(exc)) from None
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        wire = Wire(proc, model, tg)
        tg.start_soon(wire.pump_stdout)
        tg.start_soon(wire.pump_stderr)
        try:
            yield wire
        except Exception as exc:  # re-raised below as itself, not wrapped in a group
            failure = exc
        finally:
            tg.cancel_scope.cancel()
            await wire.dispose()
    if failure is not None:
        raise failure


def describe_status(status: int) -> str:
    if status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"status {status}"


def show(data: bytes | msgspec.Raw, limit: int = 120) -> str:
    text = bytes(data).decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def describe(reply: Reply) -> str:
    if isinstance(reply, ErrorResponse):
        return f"error {reply.error.code} {reply.error.message!r} (id {reply.id!r})"
    return f"result {show(reply.result)} (id {reply.id!r})"


__all__ = ["CheckFailed", "Reply", "Wire", "open_wire", "typed_result"]
