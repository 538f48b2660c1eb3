"""`tether conformance -- CMD [ARGS...]`: check that any child command speaks wire protocol v1.

Theory of operation
-------------------
The kit plays the parent, but over raw pipes rather than through the supervisor, so it can send
bytes no well-behaved parent would (broken JSON, invalid envelopes, a line past the byte cap).
Each check starts a fresh child in its own session and process group (`Wire`), drives it with
deadlines on every wait, and always ends by SIGKILLing that process group and reaping the
child, whatever the check found. A reader task splits the child's stdout into lines, sorts the
JSON-RPC messages into replies, requests and notifications, and records anything that is not
protocol v1 (the last check reports all of it). Requests from the child are answered as a
parent would: `model/complete` with a scripted turn that calls `complete` (or, in the cancel
check, never), `tool/approve` with `allow: true`, anything else with METHOD_NOT_FOUND.

A check passes when it returns and fails with `CheckFailed` carrying a sentence that says what
the child did wrong. Output is one line per check (`PASS name` / `FAIL name: why`) and a closing
`N passed, N failed`.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import msgspec
from anyio.abc import TaskGroup

from tether.parent.env import build_child_env
from tether.parent.pipes import FdReader, FdWriter, PipeClosed, stdio_pipes
from tether.parent.ring import ByteRing
from tether.protocol import (
    DEFAULT_MAX_MESSAGE_BYTES,
    METHODS,
    ErrorCode,
    ErrorResponse,
    Invalid,
    LineFramer,
    Notification,
    Oversize,
    RemoteError,
    Request,
    RequestId,
    Response,
    WrongFraming,
    decode_line,
    decode_params,
    decode_result,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
)
from tether.protocol.messages import (
    PROTOCOL_VERSION,
    AgentCancelParams,
    AgentDefinition,
    AgentEventParams,
    AgentRunParams,
    ChatMessage,
    InitializeParams,
    InitializeResult,
    ModelCompleteParams,
    ModelCompleteResult,
    PeerInfo,
    RunResult,
    ToolApproveResult,
    ToolCall,
    Usage,
)

REPLY_TIMEOUT = 5.0
"""How long the child has to answer a short request (initialize, ping, an error)."""
RUN_TIMEOUT = 15.0
"""How long a scripted run, or a cancelled one, has to answer `agent/run`."""
EOF_EXIT_TIMEOUT = 1.0
EXIT_TIMEOUT = 2.0
CHECK_DEADLINE = 60.0
QUIET_AFTER = 0.2
"""After the last expected reply, how long the kit listens for replies that should not come."""
DEFAULT_JOBS = 4
"""Checks run this many children at a time."""
MAX_CAP_TESTED = 256 * 1024 * 1024
REAP_TIMEOUT = 5.0
COMPLETE_SUMMARY = "conformance: the scripted task is done"
SUPPORTED_BOGUS_VERSION = 999


class CheckFailed(Exception):
    """The child did something protocol v1 does not allow; the message says what."""


Reply = Response | ErrorResponse
RequestHandler = Callable[[Request, Any], Awaitable[Any]]


# --- one child on raw pipes -------------------------------------------------------------------


class Wire:
    """One child process under test, driven line by line over its stdin/stdout."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stdin: int,
        stdout: int,
        stderr: int,
        tg: TaskGroup,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._tg = tg
        self._writer = FdWriter(stdin)
        self._reader = FdReader(stdout)
        self._err_reader = FdReader(stderr)
        self.stderr = ByteRing(16 * 1024)
        self._framer = LineFramer(DEFAULT_MAX_MESSAGE_BYTES)
        self._replies: list[Reply] = []
        self.notifications: list[Notification] = []
        self.requests: list[Request] = []
        self.junk: list[str] = []
        """Everything seen on stdout that is not protocol v1, described."""
        self.stdout_closed = False
        self._changed = anyio.Event()
        self._next_id = 0
        self.model: Callable[[ModelCompleteParams], Awaitable[ModelCompleteResult]] = (
            scripted_complete
        )
        self._status: int | None = None
        """Exit status once seen: the exit code, or minus the signal number."""

    # --- output of the child --------------------------------------------------------------

    async def pump_stdout(self) -> None:
        while True:
            chunk = await self._reader.read()
            if not chunk:
                break
            for ev in self._framer.feed(chunk):
                self._take(ev)
            self._notify()
        tail = self._framer.eof()
        if tail:
            self.junk.append(f"stdout ended in the middle of a line: {_show(tail)}")
        self.stdout_closed = True
        self._notify()

    async def pump_stderr(self) -> None:
        while chunk := await self._err_reader.read():
            self.stderr.write(chunk)

    def _take(self, ev: bytes | Oversize | WrongFraming) -> None:
        if isinstance(ev, Oversize):
            self.junk.append(f"a line of more than {ev.limit} bytes (the cap the kit announced)")
            return
        if isinstance(ev, WrongFraming):
            self.junk.append(f"a Content-Length header instead of a JSON line: {_show(ev.head)}")
            return
        msg = decode_line(ev)
        if isinstance(msg, Invalid):
            self.junk.append(f"not a JSON-RPC 2.0 message ({msg.message}): {_show(ev)}")
        elif isinstance(msg, Response | ErrorResponse):
            self._replies.append(msg)
        elif isinstance(msg, Request):
            self.requests.append(msg)
            params = self._check_method(msg.method, msg.params, "request", ev)
            self._tg.start_soon(self._serve, msg, params)
        elif isinstance(msg, Notification):
            params = self._check_method(msg.method, msg.params, "notification", ev)
            if params is not _BAD:
                self.notifications.append(msg)

    def _check_method(self, method: str, raw: msgspec.Raw | None, kind: str, line: bytes) -> Any:
        spec = METHODS.get(method)
        if spec is None or spec.direction != "child_to_parent" or spec.kind != kind:
            self.junk.append(f"a {kind} of a method a child does not send: {_show(line)}")
            return _BAD
        try:
            return decode_params(method, raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self.junk.append(f"{method} params that do not fit the schema ({exc}): {_show(line)}")
            return _BAD

    async def _serve(self, req: Request, params: Any) -> None:
        try:
            if params is _BAD:
                raise RemoteError(ErrorCode.INVALID_PARAMS, f"invalid params for {req.method}")
            if req.method == "model/complete":
                result: Any = await self.model(params)
            elif req.method == "tool/approve":
                result = ToolApproveResult(allow=True, reason="the conformance kit allows it")
            else:
                raise RemoteError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {req.method}")
            line = encode_response(req.id, result)
        except RemoteError as exc:
            line = encode_error(req.id, exc.code, exc.message)
        with contextlib.suppress(PipeClosed):
            await self._writer.write_all(line)

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
                if self.stdout_closed:
                    raise CheckFailed(f"{what}, but the child closed its stdout{self.ended()}")
                await self._changed.wait()
        raise CheckFailed(f"{what} within {seconds:g}s{self.ended()}")

    # --- input to the child ---------------------------------------------------------------

    async def send(self, line: bytes) -> None:
        try:
            await self._writer.write_all(line)
        except PipeClosed:
            raise CheckFailed(f"the child stopped reading its stdin{self.ended()}") from None

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def request(self, method: str, params: Any = None) -> int:
        rid = self.new_id()
        await self.send(encode_request(rid, method, params))
        return rid

    async def notify(self, method: str, params: Any = None) -> None:
        await self.send(encode_notification(method, params))

    def close_stdin(self) -> None:
        self._writer.close()

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
        return self.typed_result(method, reply)

    def typed_result(self, method: str, reply: Reply) -> Any:
        if isinstance(reply, ErrorResponse):
            e = reply.error
            raise CheckFailed(f"{method} was answered with error {e.code} {e.message!r}")
        try:
            return decode_result(method, reply.result)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise CheckFailed(
                f"the result of {method} does not fit the schema ({exc}): {_show(reply.result)}"
            ) from None

    def pending_replies(self) -> list[Reply]:
        return list(self._replies)

    # --- the process ----------------------------------------------------------------------

    def exit_status(self) -> int | None:
        """The exit status if the child has ended, without reaping it (so its process group
        id stays reserved until the kit has killed the group)."""
        if self._status is not None:
            return self._status
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.proc.returncode
        if info is None or info.si_pid == 0:
            return None
        if info.si_code == os.CLD_EXITED:
            self._status = info.si_status
        else:
            self._status = -info.si_status
        return self._status

    async def wait_exit(self, seconds: float) -> int | None:
        """The exit status once the child ends, or `None` if it still runs after `seconds`."""
        await _poll(lambda: self.exit_status() is not None, seconds)
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
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            await _poll(lambda: self.proc.poll() is not None, REAP_TIMEOUT)
            self._writer.close()
            self._reader.close()
            self._err_reader.close()


_BAD: Any = object()
POLL_INTERVAL = 0.005


async def _poll(done: Callable[[], bool], seconds: float) -> bool:
    """Poll `done` until it holds or `seconds` pass; return whether it holds."""
    with anyio.move_on_after(seconds):
        while True:
            if done():
                return True
            await anyio.sleep(POLL_INTERVAL)
    return done()


def _start(
    command: Sequence[str], env: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], int, int, int]:
    """Start `command` in its own session with three fresh pipes; return it and our ends."""
    with stdio_pipes() as pipes:
        stdin, stdout, stderr = pipes.child
        proc = subprocess.Popen(
            list(command),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env),
            close_fds=True,
            start_new_session=True,
        )
    return (proc, *pipes.ours)


@contextlib.asynccontextmanager
async def open_wire(command: Sequence[str], env: Mapping[str, str]) -> AsyncIterator[Wire]:
    """A fresh child for one check; killed (its whole process group) and reaped on exit."""
    try:
        proc, stdin, stdout, stderr = _start(command, env)
    except OSError as exc:
        raise CheckFailed(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        wire = Wire(proc, stdin, stdout, stderr, tg)
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


# --- what the kit says and expects -------------------------------------------------------------


def init_params(version: int = PROTOCOL_VERSION) -> InitializeParams:
    return InitializeParams(
        protocol_version=version,
        client_info=PeerInfo(name="tether-conformance", version="1"),
        max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES,
    )


def completing(
    paths: Sequence[str] = (),
) -> Callable[[ModelCompleteParams], Awaitable[ModelCompleteResult]]:
    """A model of one turn that calls `complete` with a known summary and these paths."""

    async def model(params: ModelCompleteParams) -> ModelCompleteResult:
        call = ToolCall(
            id="conformance-call-1",
            name="complete",
            arguments={"summary": COMPLETE_SUMMARY, "paths": list(paths)},
        )
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="Done.", tool_calls=[call]),
            usage=Usage(input_tokens=3, output_tokens=2),
            stop_reason="tool_use",
        )

    return model


scripted_complete = completing()


async def never_complete(params: ModelCompleteParams) -> ModelCompleteResult:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def initialize(w: Wire) -> InitializeResult:
    got: InitializeResult = await w.result("initialize", init_params())
    return got


def expect_error(reply: Reply, code: ErrorCode, after: str) -> ErrorResponse:
    if isinstance(reply, Response):
        raise CheckFailed(
            f"{after} was answered with a result ({_show(reply.result)}), not error "
            f"{int(code)} {code.name}"
        )
    if reply.error.code != code:
        raise CheckFailed(
            f"{after} was answered with error {reply.error.code} ({reply.error.message!r}), "
            f"not {int(code)} {code.name}"
        )
    return reply


async def error_with_null_id(
    w: Wire, code: ErrorCode, sent_id: RequestId | None, what: str
) -> ErrorResponse:
    """Wait for the error answering a line whose id the child may not be able to read: its id
    must be `null`, or the id the line carried when it had one."""
    allowed: set[Any] = {None, sent_id}

    def match(r: Reply) -> bool:
        return r.id in allowed

    reply: Reply = await w.wait_for(
        lambda: w.take_reply(match), f"no answer to {what}", REPLY_TIMEOUT
    )
    return expect_error(reply, code, what)


async def still_serves(w: Wire, after: str) -> None:
    """A `ping` right after something unusual must still get `{}`."""
    reply = await w.reply(await w.request("ping"), f"a ping sent after {after}")
    w.typed_result("ping", reply)


def run_params(run_id: str, workspace: str) -> AgentRunParams:
    return AgentRunParams(
        run_id=run_id,
        prompt="Call the complete tool to finish this conformance task.",
        description="conformance",
        workspace=workspace,
        agent=AgentDefinition(type="general", max_iterations=4),
    )


def run_events(w: Wire, run_id: str) -> list[AgentEventParams]:
    events = []
    for n in w.notifications:
        if n.method == "agent/event":
            ev: AgentEventParams = decode_params("agent/event", n.params)
            if ev.run_id == run_id:
                events.append(ev)
    return events


def model_requests(w: Wire) -> list[Request]:
    return [r for r in w.requests if r.method == "model/complete"]


# --- the checks -----------------------------------------------------------------------------


async def check_handshake(w: Wire) -> None:
    init = await initialize(w)
    if init.protocol_version != PROTOCOL_VERSION:
        raise CheckFailed(
            f"initialize answered protocolVersion {init.protocol_version}, not {PROTOCOL_VERSION}"
        )
    if not init.server_info.name:
        raise CheckFailed("initialize answered an empty serverInfo.name")
    if init.pid <= 0:
        raise CheckFailed(f"initialize answered pid {init.pid}, not a process id")
    if init.max_message_bytes < 1:
        raise CheckFailed(f"initialize announced maxMessageBytes {init.max_message_bytes}")
    await still_serves(w, "initialize")


async def check_unsupported_version(w: Wire) -> None:
    what = f"initialize with protocolVersion {SUPPORTED_BOGUS_VERSION}"
    reply = await w.call("initialize", init_params(SUPPORTED_BOGUS_VERSION))
    err = expect_error(reply, ErrorCode.UNSUPPORTED_VERSION, what)
    data = err.error.data
    versions = data.get("supportedVersions") if isinstance(data, dict) else None
    if not isinstance(versions, list) or PROTOCOL_VERSION not in versions:
        raise CheckFailed(
            f"the UNSUPPORTED_VERSION error carries data {data!r}, not "
            f"{{'supportedVersions': [...{PROTOCOL_VERSION}...]}}"
        )
    # A refused handshake leaves the child uninitialized: the parent may retry.
    await initialize(w)
    await still_serves(w, "a refused and a retried initialize")


async def check_already_initialized(w: Wire) -> None:
    await initialize(w)
    reply = await w.call("initialize", init_params())
    expect_error(reply, ErrorCode.ALREADY_INITIALIZED, "a second initialize")
    await still_serves(w, "a second initialize")


async def check_not_initialized(w: Wire) -> None:
    reply = await w.call("ping")
    expect_error(reply, ErrorCode.NOT_INITIALIZED, "a ping before initialize")
    await initialize(w)
    await still_serves(w, "a refused ping and initialize")


async def check_ping(w: Wire) -> None:
    await initialize(w)
    for _ in range(3):
        reply = await w.call("ping")
        w.typed_result("ping", reply)
        assert isinstance(reply, Response)
        if msgspec.json.decode(reply.result) != {}:
            raise CheckFailed(f"ping answered {_show(reply.result)}, not {{}}")


async def check_parse_error(w: Wire) -> None:
    await initialize(w)
    await w.send(b'{"jsonrpc": "2.0", "method": "ping", "id": 7, "params": {"x": "unterminated\n')
    await error_with_null_id(w, ErrorCode.PARSE_ERROR, None, "a line that is not valid JSON")
    await still_serves(w, "malformed JSON")


async def check_invalid_request(w: Wire) -> None:
    await initialize(w)
    await w.send(b'{"jsonrpc": "2.0", "id": "invalid-1", "method": 42, "params": {}}\n')
    await error_with_null_id(
        w, ErrorCode.INVALID_REQUEST, "invalid-1", 'a request whose "method" is a number'
    )
    await w.send(b'{"jsonrpc": "1.0", "id": "invalid-2", "method": "ping"}\n')
    await error_with_null_id(
        w, ErrorCode.INVALID_REQUEST, "invalid-2", 'a request with "jsonrpc": "1.0"'
    )
    await still_serves(w, "invalid requests")


async def check_method_not_found(w: Wire) -> None:
    await initialize(w)
    rid = await w.request("conformance/no-such-method", {})
    reply = await w.reply(rid, "a request for an unknown method")
    expect_error(reply, ErrorCode.METHOD_NOT_FOUND, "a request for an unknown method")
    await still_serves(w, "an unknown method")


async def check_invalid_params(w: Wire) -> None:
    await initialize(w)
    rid = await w.request("agent/run", {"runId": 7, "workspace": ["not", "a", "path"]})
    reply = await w.reply(rid, "agent/run with params that do not fit its schema")
    expect_error(reply, ErrorCode.INVALID_PARAMS, "agent/run with a numeric runId and no prompt")
    await still_serves(w, "invalid params")


async def check_notifications_get_no_reply(w: Wire) -> None:
    await initialize(w)
    await w.notify("conformance/no-such-notification", {"x": 1})
    await w.notify("agent/cancel", AgentCancelParams(run_id="conformance-no-such-run"))
    await still_serves(w, "two notifications")
    await anyio.sleep(QUIET_AFTER)
    extra = w.pending_replies()
    if extra:
        raise CheckFailed(f"a notification was answered: {_describe(extra[0])}")


async def check_run(w: Wire) -> None:
    await initialize(w)
    run_id = "conformance-run-1"
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        rid = await w.request("agent/run", run_params(run_id, ws))
        reply = await w.reply(
            rid, "agent/run (the kit's model answers a turn calling complete)", RUN_TIMEOUT
        )
    asked = model_requests(w)
    if not asked:
        raise CheckFailed("the run ended without asking the parent for a model turn")
    for req in asked:
        params: ModelCompleteParams = decode_params("model/complete", req.params)
        if params.run_id != run_id:
            raise CheckFailed(f"model/complete named runId {params.run_id!r}, not {run_id!r}")
        if not params.messages:
            raise CheckFailed("model/complete sent no messages")
    result: RunResult = w.typed_result("agent/run", reply)
    if not (result.success and result.status == "completed"):
        raise CheckFailed(
            f"the run answered success={result.success} status={result.status!r} "
            f"({result.message!r}), not a completed run"
        )
    if result.summary != COMPLETE_SUMMARY:
        raise CheckFailed(
            f"the run's summary is {result.summary!r}, not the one passed to complete "
            f"({COMPLETE_SUMMARY!r})"
        )
    events = run_events(w, run_id)
    if not events:
        raise CheckFailed("the run sent no agent/event notifications")
    seqs = [e.seq for e in events]
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        raise CheckFailed(f"agent/event seq does not increase: {seqs[:20]}")


ARTIFACT_TEXT = b"written by the conformance kit\n"


def _artifact_workspace(tmp: str) -> str:
    """`tmp/workspace` holding `conformance.txt` and `sub/`, next to `tmp/outside.txt`."""
    ws = os.path.join(tmp, "workspace")
    os.makedirs(os.path.join(ws, "sub"))
    with open(os.path.join(ws, "conformance.txt"), "wb") as f:
        f.write(ARTIFACT_TEXT)
    with open(os.path.join(tmp, "outside.txt"), "wb") as f:
        f.write(b"outside the workspace\n")
    return ws


async def check_artifacts(w: Wire) -> None:
    paths = ["conformance.txt", "sub", "missing.txt", "../outside.txt"]
    w.model = completing(paths)
    await initialize(w)
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as tmp:
        ws = _artifact_workspace(tmp)
        rid = await w.request("agent/run", run_params("conformance-artifacts-1", ws))
        reply = await w.reply(rid, f"agent/run (complete with paths {paths})", RUN_TIMEOUT)
    result: RunResult = w.typed_result("agent/run", reply)
    if not result.success:
        raise CheckFailed(f"the run failed ({result.message!r}) instead of completing")
    real_ws = os.path.realpath(ws)
    got = sorted((a.path, a.fs_type) for a in result.artifacts)
    want = sorted(
        (os.path.join(root, name), kind)
        for root in {ws, real_ws}
        for name, kind in (("conformance.txt", "file"), ("sub", "directory"))
    )
    if not got or not set(got) <= set(want) or len(got) != 2:
        raise CheckFailed(
            f"complete({paths}) gave artifacts {got}, not the absolute paths of conformance.txt "
            f"and sub/ under the workspace {real_ws}"
        )
    size = next(a.size for a in result.artifacts if a.fs_type == "file")
    if size != len(ARTIFACT_TEXT):
        raise CheckFailed(f"the artifact's size is {size}, not {len(ARTIFACT_TEXT)}")
    skipped = sorted(s.path for s in result.skipped)
    if skipped != sorted(paths[2:]):
        raise CheckFailed(f"complete({paths}) skipped {skipped}, not {sorted(paths[2:])}")


async def check_cancel(w: Wire) -> None:
    w.model = never_complete
    await initialize(w)
    run_id = "conformance-cancel-1"
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        rid = await w.request("agent/run", run_params(run_id, ws))
        await w.wait_for(
            lambda: model_requests(w) or w.take_reply(lambda r: r.id == rid),
            "the run did not ask for a model turn",
            RUN_TIMEOUT,
        )
        early = w.take_reply(lambda r: r.id == rid)
        if early is not None:
            raise CheckFailed(f"agent/run ended before its model turn: {_describe(early)}")
        await w.notify("agent/cancel", AgentCancelParams(run_id=run_id, reason="conformance"))
        reply = await w.reply(rid, "agent/run after agent/cancel", RUN_TIMEOUT)
    result: RunResult = w.typed_result("agent/run", reply)
    if result.status != "aborted" or result.success:
        raise CheckFailed(
            f"the cancelled run answered success={result.success} status={result.status!r}, "
            "not success=false status='aborted'"
        )
    await still_serves(w, "a cancelled run")


async def check_byte_cap(w: Wire) -> None:
    init = await initialize(w)
    cap = init.max_message_bytes
    if cap > MAX_CAP_TESTED:
        raise CheckFailed(
            f"the child announces a {cap}-byte cap; the kit tests up to {MAX_CAP_TESTED}"
        )
    # A line of exactly the cap is a message like any other.
    await w.send(_padded_ping("at-cap", cap))
    reply = await w.reply("at-cap", f"a ping line of exactly the announced {cap} bytes", 30.0)
    w.typed_result("ping", reply)
    # One byte more is refused with MESSAGE_TOO_LARGE, and the child reads on.
    await w.send(_padded_ping("over-cap", cap + 1))
    err = await error_with_null_id(
        w, ErrorCode.MESSAGE_TOO_LARGE, "over-cap", f"a line of {cap + 1} bytes (cap {cap})"
    )
    del err
    await still_serves(w, "an oversized line")
    if w.take_reply(lambda r: r.id == "over-cap"):
        raise CheckFailed("the oversized line was also answered as a request")


def _padded_ping(rid: str, size: int) -> bytes:
    head = b'{"jsonrpc":"2.0","id":"' + rid.encode() + b'","method":"ping","params":{"pad":"'
    tail = b'"}}'
    pad = size - len(head) - len(tail)
    assert pad >= 0
    return head + b"x" * pad + tail + b"\n"


async def check_shutdown_exit(w: Wire) -> None:
    await initialize(w)
    reply = await w.call("shutdown")
    if isinstance(reply, ErrorResponse):
        raise CheckFailed(f"shutdown was answered with error {reply.error.code}")
    if bytes(reply.result).strip() != b"null":
        raise CheckFailed(f"shutdown answered {_show(reply.result)}, not null")
    await w.notify("exit")
    status = await w.wait_exit(EXIT_TIMEOUT)
    if status is None:
        raise CheckFailed(f"the child was still running {EXIT_TIMEOUT:g}s after shutdown and exit")
    if status != 0:
        raise CheckFailed(f"after shutdown and exit the child ended with {describe_status(status)}")


async def check_eof_exit(w: Wire) -> None:
    await initialize(w)
    w.close_stdin()
    status = await w.wait_exit(EOF_EXIT_TIMEOUT)
    if status is None:
        raise CheckFailed(f"the child was still running {EOF_EXIT_TIMEOUT:g}s after stdin EOF")


async def check_stdout_is_protocol(w: Wire) -> None:
    """A whole session; `run_suite` adds what every earlier check saw on stdout."""
    await initialize(w)
    await still_serves(w, "initialize")
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as ws:
        rid = await w.request("agent/run", run_params("conformance-stdout-1", ws))
        await w.reply(rid, "agent/run", RUN_TIMEOUT)
    await w.call("shutdown")
    await w.notify("exit")
    await w.wait_exit(EXIT_TIMEOUT)
    with anyio.move_on_after(1.0):
        await w.wait_for(lambda: w.stdout_closed, "", 1.0)


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Wire], Awaitable[None]]
    summary: str


CHECKS: tuple[Check, ...] = (
    Check("handshake", check_handshake, "initialize v1 answers version, serverInfo and pid"),
    Check(
        "unsupported-version",
        check_unsupported_version,
        "a version it does not speak gets UNSUPPORTED_VERSION with supportedVersions",
    ),
    Check("already-initialized", check_already_initialized, "a second initialize is refused"),
    Check("not-initialized", check_not_initialized, "a request before initialize is refused"),
    Check("ping", check_ping, "ping answers {}"),
    Check("parse-error", check_parse_error, "malformed JSON gets -32700 with id null"),
    Check("invalid-request", check_invalid_request, "an invalid envelope gets -32600"),
    Check("method-not-found", check_method_not_found, "an unknown method gets -32601"),
    Check("invalid-params", check_invalid_params, "params off the schema get -32602"),
    Check(
        "notifications-unanswered",
        check_notifications_get_no_reply,
        "notifications, known or not, get no reply",
    ),
    Check("run", check_run, "agent/run brokers model/complete and streams ordered events"),
    Check(
        "artifacts",
        check_artifacts,
        "complete's paths become artifacts (absolute, under the workspace) or skipped ones",
    ),
    Check("cancel", check_cancel, "agent/cancel makes the pending run answer aborted"),
    Check("byte-cap", check_byte_cap, "a line over maxMessageBytes gets MESSAGE_TOO_LARGE"),
    Check("shutdown-exit", check_shutdown_exit, "shutdown answers null, exit ends with status 0"),
    Check("eof-exit", check_eof_exit, f"stdin EOF ends the child within {EOF_EXIT_TIMEOUT:g}s"),
    Check("stdout-protocol-only", check_stdout_is_protocol, "nothing but protocol on stdout"),
)
CHECK_NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)


# --- running the suite ----------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    passed: bool
    why: str = ""
    junk: list[str] = field(default_factory=list)


@dataclass
class Report:
    outcomes: list[Outcome]

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def failed(self) -> int:
        return len(self.outcomes) - self.passed

    def failures(self) -> dict[str, str]:
        return {o.name: o.why for o in self.outcomes if not o.passed}


async def run_check(check: Check, command: Sequence[str], env: Mapping[str, str]) -> Outcome:
    """Run one check on a fresh child; never raises for anything the child did."""
    junk: list[str] = []
    try:
        with anyio.fail_after(CHECK_DEADLINE):
            async with open_wire(command, env) as w:
                try:
                    await check.run(w)
                finally:
                    junk = list(w.junk)
    except CheckFailed as exc:
        return Outcome(check.name, False, str(exc), junk)
    except TimeoutError:
        why = f"the check did not finish within {CHECK_DEADLINE:g}s"
        return Outcome(check.name, False, why, junk)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return Outcome(check.name, False, f"a message does not fit the schema: {exc}", junk)
    except Exception as exc:  # a bug of the kit must not hide the other checks
        return Outcome(check.name, False, f"the kit failed: {type(exc).__name__}: {exc}", junk)
    return Outcome(check.name, True, "", junk)


async def run_suite(
    command: Sequence[str],
    *,
    out: TextIO | None = None,
    only: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    jobs: int = DEFAULT_JOBS,
) -> Report:
    """Run every check (or those named in `only`) against `command`, `jobs` children at a
    time; print one line per check to `out`, in the order of `CHECKS`, then the totals."""
    if not command:
        raise ValueError("conformance needs a command to check")
    unknown = sorted(set(only or ()) - set(CHECK_NAMES))
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_NAMES)}")
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    child_env = build_child_env(os.environ) if env is None else dict(env)
    checks = [c for c in CHECKS if not only or c.name in only]
    outcomes: list[Outcome | None] = [None] * len(checks)
    printed = 0
    limiter = anyio.CapacityLimiter(jobs)

    def show_ready() -> None:
        nonlocal printed
        while printed < len(checks) and (o := outcomes[printed]) is not None:
            if out is not None:
                line = f"PASS {o.name}" if o.passed else f"FAIL {o.name}: {o.why}"
                print(line, file=out, flush=True)
            printed += 1

    async def one(i: int) -> None:
        async with limiter:
            outcome = await run_check(checks[i], command, child_env)
        if checks[i].run is check_stdout_is_protocol:
            # Reported last: it also answers for what every other check saw on stdout.
            while any(o is None for j, o in enumerate(outcomes) if j != i):
                await done.wait()
            outcome = _with_junk_of_all(outcome, [o for o in outcomes if o is not None])
        outcomes[i] = outcome
        done.set()
        show_ready()

    done = _Pulse()
    async with anyio.create_task_group() as tg:
        for i in range(len(checks)):
            tg.start_soon(one, i)
    report = Report([o for o in outcomes if o is not None])
    if out is not None:
        print(f"{report.passed} passed, {report.failed} failed", file=out, flush=True)
    return report


class _Pulse:
    """An event that can fire many times: `wait()` returns at the next `set()`."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait(self) -> None:
        await self._event.wait()


def _with_junk_of_all(own: Outcome, others: list[Outcome]) -> Outcome:
    junk = [f"[{o.name}] {j}" for o in others for j in o.junk]
    junk += [f"[{own.name}] {j}" for j in own.junk]
    if not own.passed or not junk:
        return own
    more = f" (and {len(junk) - 1} more)" if len(junk) > 1 else ""
    return Outcome(own.name, False, f"non-protocol output on stdout: {junk[0]}{more}", own.junk)


# --- command line -------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check",
        action="append",
        choices=CHECK_NAMES,
        metavar="NAME",
        help=f"run only this check (repeatable): {', '.join(CHECK_NAMES)}",
    )
    p.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="let the child inherit this variable (or glob) beyond the allowlist",
    )
    p.add_argument(
        "--jobs", type=int, default=DEFAULT_JOBS, help="children to run at a time (default 4)"
    )
    p.add_argument("child_command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def main(args: argparse.Namespace) -> int:
    """Run the suite for `tether conformance`; 0 when every check passed, 1 otherwise."""
    command = list(args.child_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ValueError(
            "tether conformance: give the child command after --, e.g. "
            "tether conformance -- node child.js"
        )
    env = build_child_env(os.environ, pass_through=args.pass_env)
    print(f"tether conformance: {shlex.join(command)}", file=sys.stderr, flush=True)
    report = anyio.run(
        lambda: run_suite(command, out=sys.stdout, only=args.check, env=env, jobs=args.jobs)
    )
    return 0 if report.failed == 0 else 1


# --- helpers ----------------------------------------------------------------------------------


def describe_status(status: int) -> str:
    if status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"status {status}"


def _show(data: bytes | msgspec.Raw, limit: int = 120) -> str:
    text = bytes(data).decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _describe(reply: Reply) -> str:
    if isinstance(reply, ErrorResponse):
        return f"error {reply.error.code} {reply.error.message!r} (id {reply.id!r})"
    return f"result {_show(reply.result)} (id {reply.id!r})"
