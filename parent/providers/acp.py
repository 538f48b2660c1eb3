"""The ACP driver: one task for an Agent Client Protocol agent, over its stdin/stdout.

Theory of operation
-------------------
Whoever spawned the agent (the supervisor's spawn seam: scrubbed environment, limits,
containment, the ladder) hands `AcpDriver` the agent's stdin and stdout as anyio byte streams.
The driver speaks ACP through the `agent-client-protocol` package over tether's own
`PipeTransport` (a byte cap, a JSON-RPC shape check, the first fault recorded) and never spawns,
signals or reaps anything: `run()` returns an `AcpOutcome` and the caller walks its ladder. An
ACP agent has no `shutdown` request, so closing its stdin is the first rung.

`run()` does, each step bounded:

1. `initialize`, advertising exactly what the parent serves: `fs/read_text_file`, and
   `fs/write_text_file` unless the run is read-only; no terminals (see below). Then
   `authenticate` if the task names a method the agent offers, and `session/new` with the
   workspace as cwd and no MCP servers. All of it within `AcpLimits.handshake`.
2. `session/prompt` with the task (and a fork's earlier turns, see `acp_mapping`), under the
   wall clock and the idle clock. The idle clock counts from the agent's last message or model
   call through the gateway, and stands still while the parent itself is busy for the agent
   (a model call in flight, a permission request before the policy).
3. While the prompt runs, the agent's requests are served by `_Client`:
   `session/update` → tether events through `on_event` (`UpdateFolder`);
   `session/request_permission` → the run's approval policy, except that in explore mode
   (read-only) a mutating tool kind is refused without asking; `fs/*` → `ConfinedFiles`,
   writes refused in explore mode; terminals, elicitation and extension methods → refused.
   Terminals are refused rather than served confined because the parent would have to spawn
   the agent's commands itself, outside the agent's sandbox, limits and tree; the agent runs
   its own commands, under the same containment as itself.
4. The stop reason becomes the run's status (`stop_outcome`); the summary is the agent's last
   message; usage and the model-call count are what the parent metered (`meter`, the gateway's
   grant for this child), never what the agent claims. A turn that fails (an error answer or
   stop reason) while the meter says the budget is spent is `budget_exhausted`: the gateway
   refused the agent's model calls, and the agent reports that as its own failure.

`cancel()` sends `session/cancel`, answers every pending permission request `cancelled`, and
gives the agent `AcpLimits.cancel_grace` to end the prompt with `cancelled`; past it the run is
cut (`observed.cancelled`) and the caller's ladder takes the agent down.

Nothing the agent does raises out of `run()`: garbage, an oversize line, silence, a crash, a
malformed answer or an error answer all end as an `AcpOutcome` whose `observed` record says
what happened, in the terms `tether.parent.process.classify` turns into a `failure.kind`. The caller
adds what only it saw (exit status, signal, rung, stderr tail) before classifying;
`AcpOutcome.result()` classifies without it.

Runs on the asyncio backend only (the ACP package is asyncio-based).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import anyio
import msgspec
from acp import PROTOCOL_VERSION, Client, RequestError, connect_to_agent
from acp.client.connection import ClientSideConnection
from acp.schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallUpdate,
    WriteTextFileResponse,
)
from anyio import CancelScope
from anyio.abc import ByteReceiveStream, ByteSendStream
from pydantic import ValidationError

from tether._about import __version__
from tether.parent.process.classify import Observed, classify, failure_of
from tether.parent.providers.acp_mapping import (
    UpdateFolder,
    cancelled_answer,
    is_mutation,
    permission_answer,
    render_prompt,
    stop_outcome,
)
from tether.parent.providers.acp_transport import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_SEND_TIMEOUT,
    PipeTransport,
)
from tether.parent.providers.confined_fs import ConfinedFiles, FileRefused
from tether.parent.run.events import ChildEvent
from tether.protocol.messages import (
    Artifact,
    ChatMessage,
    Failure,
    FailureKind,
    RunResult,
    ToolApproveParams,
    ToolApproveResult,
    Usage,
)

log = logging.getLogger(__name__)

ApprovePolicy = Callable[[ToolApproveParams], Awaitable[ToolApproveResult] | ToolApproveResult]
"""The run's approval policy (the same shape the supervisor takes for tether children)."""
EventCallback = Callable[[ChildEvent], None]

CLOSE_TIMEOUT = 5.0
"""How long closing the connection may take (it cancels the package's handler tasks)."""
_IDLE_POLL = 1.0
TEXT_PAUSE = 0.2
"""A message the agent has not finished is shown as far as it got after this much quiet."""


class Meter(Protocol):
    """What the parent metered for this agent: the gateway's grant for its token."""

    @property
    def usage(self) -> Usage: ...

    @property
    def calls(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def last_active(self) -> float:
        """`time.monotonic()` of the last call's start or end."""
        ...

    @property
    def exhausted(self) -> bool:
        """The agent's token budget is spent (its model calls are being refused)."""
        ...


@dataclass(frozen=True)
class AcpTask:
    run_id: str
    prompt: str
    workspace: str | Path
    read_only: bool = False
    """Explore mode: fs writes and mutating permission requests are refused."""
    history: Sequence[ChatMessage] = ()
    """A fork's completed turns, sent ahead of the task (see `acp_mapping.render_prompt`)."""
    auth_method: str | None = None
    """Call `authenticate` with this method id when the agent offers it (`codex-acp` wants
    `openai-api-key` before `session/new`); the credential itself is the gateway token the
    caller put in the agent's environment."""


@dataclass(frozen=True)
class AcpLimits:
    handshake: float = 30.0
    """`initialize` + `authenticate` + `session/new`, together."""
    wall: float | None = None
    """The whole run, from `run()`."""
    idle: float | None = None
    """Silence from the agent during the prompt (see the module docstring)."""
    cancel_grace: float = 5.0
    """How long the agent has to end the prompt after `session/cancel`."""
    send_timeout: float = DEFAULT_SEND_TIMEOUT
    """How long one message may wait for the agent to read its input."""
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES


@dataclass
class AcpOutcome:
    """What one driven task came to; see the module docstring."""

    run_id: str
    answer: RunResult | None
    """The result built from the agent's answer to `session/prompt`, if it answered."""
    observed: Observed
    """Why there is no answer (or what else went wrong), for `classify`."""
    agent: dict[str, str] = field(default_factory=dict)
    """The agent's `agentInfo` from `initialize` (name, version), if it sent one."""
    usage: Usage = field(default_factory=Usage)
    model_calls: int = 0
    refusals: list[str] = field(default_factory=list)
    """What the parent refused the agent, in order (fs writes, permissions, terminals, ...)."""

    def result(self) -> RunResult:
        """The run's `RunResult`, classified from what the driver alone observed."""
        if self.answer is not None:
            return self.answer
        got = classify(self.observed)
        failure = failure_of(self.observed)
        assert got is not None and failure is not None  # an unanswered run always classifies
        kind, message = got
        return RunResult(
            success=False,
            status="aborted" if kind == "cancelled" else "error",
            message=message,
            failure=failure,
            run_id=self.run_id,
            usage=self.usage,
            iteration_count=self.model_calls,
        )


class AcpDriver:
    """Drives one task through one ACP agent; see the module docstring."""

    def __init__(
        self,
        to_agent: ByteSendStream,
        from_agent: ByteReceiveStream,
        task: AcpTask,
        *,
        approve: ApprovePolicy | None = None,
        on_event: EventCallback | None = None,
        meter: Meter | None = None,
        limits: AcpLimits | None = None,
        client_info: Implementation | None = None,
        observed: Observed | None = None,
    ) -> None:
        self.task = task
        self.limits = limits or AcpLimits()
        self.transport = PipeTransport(
            to_agent,
            from_agent,
            max_line_bytes=self.limits.max_line_bytes,
            send_timeout=self.limits.send_timeout,
        )
        self.observed = observed if observed is not None else Observed()
        """Filled in as things happen; pass the spawner's own record to share one."""
        self._meter = meter
        self._files = ConfinedFiles(task.workspace)
        self._approve = approve
        self._on_event = on_event
        self._client_info = client_info or Implementation(name="tether", version=__version__)
        self._folder = UpdateFolder(task.run_id, self._emit)
        self._cancel = anyio.Event()
        self._prompt_done = anyio.Event()
        self._conn: ClientSideConnection | None = None
        self._session_id: str | None = None
        self._prompting = False
        self._asking = 0
        self._last_local = time.monotonic()
        self._answer: RunResult | None = None
        self._agent: dict[str, str] = {}
        self._written: dict[str, None] = {}
        self._refusals: list[str] = []
        self._ran = False

    # --- the caller's side --------------------------------------------------------------------

    @property
    def prompted(self) -> bool:
        """The task went out to the agent (`session/prompt` was sent)."""
        return self._prompting or self._prompt_done.is_set()

    def cancel(self) -> None:
        """Ask the agent to stop (idempotent, returns at once); `run()` returns within the
        cancel grace either way."""
        self._cancel.set()

    async def run(self) -> AcpOutcome:
        if self._ran:
            raise RuntimeError("an AcpDriver runs one task")
        self._ran = True
        # `_Client` serves a subset of the package's `Client` protocol on purpose: the methods it
        # leaves out are answered "method not found" by the package's router.
        conn = connect_to_agent(cast(Client, _Client(self)), self.transport)
        self._conn = conn
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_clocks, tg.cancel_scope)
                tg.start_soon(self._watch_cancel, tg.cancel_scope)
                await self._converse(conn)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
                await conn.close()
        return self._outcome()

    # --- the conversation ---------------------------------------------------------------------

    async def _converse(self, conn: ClientSideConnection) -> None:
        step = "initialize"
        try:
            with anyio.move_on_after(self.limits.handshake) as handshake:
                init = await conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=self._capabilities(),
                    client_info=self._client_info,
                )
                if init.agent_info is not None:
                    self._agent = {
                        "name": init.agent_info.name,
                        "version": init.agent_info.version,
                    }
                if init.protocol_version != PROTOCOL_VERSION:
                    self.observed.protocol_error = (
                        f"the agent speaks ACP version {init.protocol_version}; the parent "
                        f"speaks {PROTOCOL_VERSION}"
                    )
                    return
                offered = {m.id for m in init.auth_methods or []}
                if self.task.auth_method is not None and self.task.auth_method in offered:
                    step = "authenticate"
                    await conn.authenticate(method_id=self.task.auth_method)
                step = "session/new"
                session = await conn.new_session(cwd=str(self._files.root), mcp_servers=[])
                self._session_id = session.session_id
            if handshake.cancelled_caught:
                self.observed.handshake = self.limits.handshake
                return
            self._folder.event(
                "started",
                {"agentType": "acp", "agent": dict(self._agent), "sessionId": session.session_id},
            )
            step = "session/prompt"
            self._prompting = True
            self._last_local = time.monotonic()
            try:
                response = await conn.prompt(
                    session_id=session.session_id,
                    prompt=render_prompt(self.task.prompt, self.task.history),
                )
            finally:
                self._prompting = False
                self._prompt_done.set()
            self._folder.flush()
            self._answer = self._answer_of(response.stop_reason)
        except RequestError as exc:
            why = f"the agent answered {step} with an error: {_error_text(exc)}"
            if step == "session/prompt" and self._budget_spent():
                self._answer = self._failed("budget_exhausted", _BUDGET + why)
            else:
                self.observed.agent_error = why
        except ValidationError as exc:
            self.observed.protocol_error = (
                f"the agent's answer to {step} is malformed: {_first(exc)}"
            )
        except ConnectionError as exc:
            self._connection_lost(step, exc)
        except Exception as exc:  # the boundary: whatever the package raised, the run ends
            log.warning("ACP run %s: %s failed", self.task.run_id, step, exc_info=True)
            self.observed.protocol_error = (
                f"talking to the agent failed during {step}: {type(exc).__name__}: {exc}"
            )
        finally:
            self._folder.flush()

    def _capabilities(self) -> ClientCapabilities:
        return ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=not self.task.read_only),
            terminal=False,
        )

    def _budget_spent(self) -> bool:
        return self._meter is not None and self._meter.exhausted

    def _failed(self, kind: FailureKind, message: str) -> RunResult:
        """A result for a prompt the agent ended in failure."""
        self._folder.flush()
        return msgspec.structs.replace(
            self._answer_of("end_turn"),
            success=False,
            status="error",
            message=message,
            failure=Failure(kind=kind),
        )

    def _answer_of(self, stop_reason: str) -> RunResult:
        outcome = stop_outcome(stop_reason, cancel_requested=self._cancel.is_set())
        failure = None
        message = outcome.error or ""
        if outcome.status != "completed":
            kind: FailureKind = "cancelled" if outcome.by_cancel else "agent_error"
            if outcome.status == "error" and self._budget_spent():
                kind, message = "budget_exhausted", _BUDGET + message
            failure = Failure(kind=kind)
        return RunResult(
            success=outcome.status == "completed",
            status=outcome.status,
            summary=self._folder.summary,
            message=message,
            artifacts=self._artifacts(),
            turn_count=1,
            iteration_count=self._meter.calls if self._meter else 0,
            usage=self._meter.usage if self._meter else Usage(),
            failure=failure,
            run_id=self.task.run_id,
        )

    def _connection_lost(self, step: str, exc: ConnectionError) -> None:
        fault = self.transport.fault
        if fault is not None:
            if fault.kind == "oversize":
                self.observed.oversize = fault.message
            else:
                self.observed.protocol_error = fault.message
        elif self.transport.eof:
            self.observed.truncated = self.transport.truncated
        else:
            self.observed.protocol_error = (
                f"the connection to the agent failed during {step}: {exc}"
            )

    # --- clocks and cancellation --------------------------------------------------------------

    async def _watch_clocks(self, scope: CancelScope) -> None:
        start = time.monotonic()
        wall, idle = self.limits.wall, self.limits.idle
        while True:
            now = time.monotonic()
            waits = [_IDLE_POLL]
            if wall is not None:
                if now - start >= wall:
                    self.observed.deadline = wall
                    scope.cancel()
                    return
                waits.append(start + wall - now)
            shown = self._folder.pending_since
            if shown is not None:
                if now - shown >= TEXT_PAUSE:
                    self._folder.emit_pending()
                else:
                    waits.append(shown + TEXT_PAUSE - now)
            if idle is not None and self._prompting:
                quiet = now - self._last_activity(now)
                if quiet >= idle:
                    self.observed.idle = idle
                    scope.cancel()
                    return
                waits.append(idle - quiet)
            await anyio.sleep(max(0.01, min(waits)))

    def _last_activity(self, now: float) -> float:
        meter = self._meter
        if self._asking > 0 or (meter is not None and meter.in_flight > 0):
            self._last_local = now  # the parent is busy for the agent: its clock stands still
        last = max(self.transport.last_received, self._last_local)
        if meter is not None:
            last = max(last, meter.last_active)
        return last

    async def _watch_cancel(self, scope: CancelScope) -> None:
        await self._cancel.wait()
        conn, session = self._conn, self._session_id
        if conn is None or session is None or not self._prompting:
            if not self._prompt_done.is_set():
                self.observed.cancelled = True
                scope.cancel()
            return
        with anyio.move_on_after(self.limits.send_timeout):
            try:
                await conn.cancel(session_id=session)
            except Exception:  # the agent's input is gone: the grace below still applies
                log.debug("ACP run %s: session/cancel not sent", self.task.run_id, exc_info=True)
        with anyio.move_on_after(self.limits.cancel_grace):
            await self._prompt_done.wait()
        if not self._prompt_done.is_set():
            self.observed.cancelled = True
            scope.cancel()

    # --- serving the agent (called by `_Client`) ----------------------------------------------

    def check_session(self, session_id: str) -> None:
        if self._session_id is None or session_id != self._session_id:
            raise RequestError.invalid_params({"details": f"unknown session {session_id!r}"})

    def refuse(self, what: str) -> None:
        self._refusals.append(what)

    def fold(self, update: Any) -> None:
        self._folder.fold(update, time.monotonic())

    async def decide_permission(
        self, tool_call: ToolCallUpdate, options: Sequence[PermissionOption]
    ) -> RequestPermissionResponse:
        seen = self._folder.tool(tool_call.tool_call_id)
        kind = tool_call.kind or (seen.kind if seen else None)
        title = tool_call.title or (seen.title if seen else "") or tool_call.tool_call_id
        raw_input = tool_call.raw_input
        if raw_input is None and seen is not None:
            raw_input = seen.raw_input
        if self._cancel.is_set():
            return cancelled_answer()
        if self.task.read_only and is_mutation(kind):
            self.refuse(f"permission for {kind or 'an unnamed kind of'} tool {title!r}: read-only")
            return permission_answer(options, allow=False)
        params = ToolApproveParams(
            run_id=self.task.run_id,
            tool=kind or "other",
            arguments={
                "toolCallId": tool_call.tool_call_id,
                "title": title,
                "input": _jsonable(raw_input),
                "locations": [
                    loc.path for loc in (tool_call.locations or []) if getattr(loc, "path", None)
                ],
            },
        )
        decision = await self._ask(params)
        if decision is None:
            return cancelled_answer()
        if not decision.allow:
            self.refuse(f"permission for {kind or 'other'} tool {title!r}: {decision.reason}")
        return permission_answer(options, allow=decision.allow)

    async def _ask(self, params: ToolApproveParams) -> ToolApproveResult | None:
        """The policy's decision, or `None` when the run was cancelled before it came."""
        if self._approve is None:
            return ToolApproveResult(allow=True, reason="allowed by the default policy")
        approve = self._approve
        decision: ToolApproveResult | None = None
        self._asking += 1
        try:
            async with anyio.create_task_group() as tg:

                async def decide() -> None:
                    nonlocal decision
                    try:
                        got = approve(params)
                        if inspect.isawaitable(got):
                            got = await got
                        decision = (
                            got
                            if isinstance(got, ToolApproveResult)
                            else ToolApproveResult(allow=False, reason="the policy gave no answer")
                        )
                    except Exception as exc:
                        decision = ToolApproveResult(
                            allow=False, reason=f"the approval policy failed: {type(exc).__name__}"
                        )
                    tg.cancel_scope.cancel()

                async def on_cancel() -> None:
                    await self._cancel.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(decide)
                tg.start_soon(on_cancel)
        finally:
            self._asking -= 1
            self._last_local = time.monotonic()
        return decision

    async def read_file(self, path: str, line: int | None, limit: int | None) -> str:
        try:
            return await anyio.to_thread.run_sync(self._files.read_text, path, line, limit)
        except FileRefused as exc:
            raise _fs_error(exc) from None

    async def write_file(self, path: str, content: str) -> None:
        if self.task.read_only:
            self.refuse(f"fs/write_text_file {path}: read-only")
            raise RequestError(
                -32602, "writing files is refused: this run is read-only (explore mode)"
            )
        try:
            await anyio.to_thread.run_sync(self._files.write_text, path, content)
        except FileRefused as exc:
            self.refuse(f"fs/write_text_file {path}: {exc}")
            raise _fs_error(exc) from None
        self._written[path] = None

    # --- results ------------------------------------------------------------------------------

    def _artifacts(self) -> list[Artifact]:
        """The files the parent wrote for the agent that are still there."""
        out: list[Artifact] = []
        for path in self._written:
            got = self._files.describe(path)
            if got is not None:
                out.append(got)
        return out

    def _outcome(self) -> AcpOutcome:
        return AcpOutcome(
            run_id=self.task.run_id,
            answer=self._answer,
            observed=self.observed,
            agent=dict(self._agent),
            usage=self._meter.usage if self._meter else Usage(),
            model_calls=self._meter.calls if self._meter else 0,
            refusals=list(self._refusals),
        )

    def _emit(self, event: ChildEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a listener's bug must not end the run
            log.exception("ACP run %s: the event callback failed", self.task.run_id)


class _Client:
    """The ACP client methods the package calls for the agent's requests; each one checks the
    session and hands the work to the driver."""

    def __init__(self, driver: AcpDriver) -> None:
        self._d = driver

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        # No await before the fold: the package runs each notification in its own task, and
        # updates must be folded in the order they arrived.
        self._d.check_session(session_id)
        self._d.fold(update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self._d.check_session(session_id)
        return await self._d.decide_permission(tool_call, options)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self._d.check_session(session_id)
        return ReadTextFileResponse(content=await self._d.read_file(path, line, limit))

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self._d.check_session(session_id)
        await self._d.write_file(path, content)
        return WriteTextFileResponse()

    async def create_terminal(self, session_id: str, command: str, **kwargs: Any) -> Any:
        self._d.refuse(f"terminal/create {command!r}")
        raise _no_terminals()

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise _no_terminals()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise _no_terminals()

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise _no_terminals()

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise _no_terminals()

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        self._d.refuse("elicitation/create")
        raise RequestError(-32601, "the parent does not ask the user anything for a sub-agent")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


_BUDGET = "the sub-agent's token budget ran out; "


def _no_terminals() -> RequestError:
    return RequestError(
        -32601,
        "the parent serves no terminals (it did not advertise them): run commands with your "
        "own tools, inside your own sandbox",
    )


def _fs_error(exc: FileRefused) -> RequestError:
    return RequestError(-32002 if exc.missing else -32602, str(exc))


def _error_text(exc: RequestError) -> str:
    text = f"{exc} (code {exc.code})"
    details = exc.data.get("details") if isinstance(exc.data, dict) else None
    if isinstance(details, str) and details:
        text += f": {details[:200]}"
    return text


def _first(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)[:200]
    e = errors[0]
    where = ".".join(str(p) for p in e.get("loc", ()))
    return f"{where or 'the answer'}: {e.get('msg', '')}"[:200]


def _jsonable(value: Any) -> Any:
    """`value` as plain JSON data (tool inputs arrive as arbitrary JSON already)."""
    try:
        return msgspec.json.decode(msgspec.json.encode(value))
    except (TypeError, msgspec.EncodeError, msgspec.DecodeError):
        return repr(value)
