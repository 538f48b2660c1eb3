"""What an agent sees of its run (`AgentContext`) and what it hands back (`AgentOutcome`).

The split keeps the loop replaceable: an `Agent` is anything with `async run(ctx)`. The default
is `loop.AgentLoop`; a "bring your own agent" implementation gets the same context, so it talks
to the model, emits progress and asks for approval exactly the way the built-in loop does, and
never touches the wire itself.

Bring your own agent
--------------------
`python -I -m tether.child --agent SPEC` (or `TETHER_AGENT=SPEC` in the child's environment)
hosts a user's agent instead of `AgentLoop`; SPEC is `package.module:callable` or
`/path/to/file.py:callable` (see `agent_spec.py`). The contract:

* the callable is called once per run with that run's `AgentRunParams` (prompt, definition,
  workspace, history) and returns an `Agent`: any object with `async run(ctx) -> AgentOutcome`;
* `run` receives this module's `AgentContext`: `ctx.params`, `ctx.definition`, `ctx.workspace`,
  `ctx.read_only`, `ctx.tools` (the run's tool set); `await ctx.complete_model(messages)` for
  a model turn through the parent (usage is counted for the result); `await
  ctx.call_tool(name, arguments)` to run a tool with the mode and approval applied (returns a
  `ToolOutcome`, never raises for what the tool does); `await ctx.emit(kind, data)` for
  progress events; `ctx.heartbeats(...)` around anything slow; `ctx.progress.last_text` is the
  summary used if the run fails or is cancelled;
* it returns `Finished(summary=..., message=..., artifacts=..., skipped=...)` or
  `Failed(kind=..., message=...)` (a `ToolOutcome.completion` from `complete` carries the
  artifacts). Anything else, or an exception, ends the run as `agent_error`;
* cancellation (`agent/cancel`, `shutdown`) arrives as anyio/asyncio cancellation at whatever
  the agent awaits; it may clean up in `finally` (shielded if it must await), then must let the
  cancellation propagate. The runtime reports the run as `aborted`. The `started` event and the
  turn count are the runtime's; the agent emits everything else it wants the parent to see.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
from msgspec import Struct, field

from tether.child.tools import ToolInputError, ToolOutcome, ToolRegistry
from tether.child.workspace import Workspace
from tether.protocol import ConnectionClosed, LocalProtocolError, RemoteError
from tether.protocol.messages import (
    HEARTBEAT_SECONDS,
    AgentDefinition,
    AgentEventParams,
    AgentRunParams,
    Artifact,
    ChatMessage,
    ClientCapabilities,
    EventKind,
    FailureKind,
    ModelCompleteParams,
    ModelCompleteResult,
    SkippedPath,
    ToolApproveParams,
    ToolApproveResult,
    ToolCallParams,
    ToolSpec,
    Usage,
)
from tether.protocol.methods import AGENT_EVENT, MODEL_COMPLETE, TOOL_APPROVE, TOOL_CALL

if TYPE_CHECKING:
    from tether.child.heartbeats import Heartbeats
    from tether.wire import Endpoint

log = logging.getLogger("tether.child")

CURRENT_CALL_ID: contextvars.ContextVar[str] = contextvars.ContextVar(
    "tether_current_tool_call_id", default=""
)
"""The model's id of the tool call being run, for tools that pass it on (parent tools)."""


class Finished(Struct, frozen=True, kw_only=True):
    """The run reached its end: `complete` was called, or a stop condition held."""

    summary: str
    message: str
    artifacts: list[Artifact] = field(default_factory=list)
    skipped: list[SkippedPath] = field(default_factory=list)


class Failed(Struct, frozen=True, kw_only=True):
    """The run could not reach its end; `summary` keeps whatever text it got to."""

    kind: FailureKind
    message: str
    summary: str = ""


class NeedsInput(Struct, frozen=True, kw_only=True):
    """A continuable run paused to ask its orchestrator something (`ask_orchestrator`); the
    answer arrives as the next `agent/message`."""

    question: str
    summary: str = ""


AgentOutcome = Finished | Failed | NeedsInput


class Agent(Protocol):
    async def run(self, ctx: AgentContext) -> AgentOutcome: ...


class Continuable(Protocol):
    """An agent whose finished run can take a follow-up message on its own transcript
    (`agent/message`); the built-in loop is one. An agent without `resume` is not continued."""

    async def resume(self, ctx: AgentContext, message: str) -> AgentOutcome: ...


class RunProgress:
    """Counters the runner reports even when a run is cut short (cancelled, failed)."""

    def __init__(self) -> None:
        self.turn_count = 0
        """User turns handled: 1 for the run's prompt (continuations would add more)."""
        self.iteration_count = 0
        """Model turns taken by the loop; bounded by the definition's `maxIterations`."""
        self.input_tokens = 0
        self.output_tokens = 0
        self.last_text = ""
        """The latest non-empty assistant text: the summary when `complete` is never called."""

    @property
    def usage(self) -> Usage:
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)


class AgentContext:
    """One run's view of the runtime: its definition and workspace, the model, events, policy."""

    def __init__(
        self,
        params: AgentRunParams,
        *,
        workspace: Workspace,
        tools: ToolRegistry,
        peer: Endpoint,
        parent_capabilities: ClientCapabilities,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        runtime_tools: ToolRegistry | None = None,
        emit_lock: anyio.Lock | None = None,
        beats: Heartbeats | None = None,
    ) -> None:
        """`emit_lock`: one the run table shares among its runs (all their events go down one
        pipe anyway, and it is held only while a write waits); a lock of its own otherwise.
        `beats`: the child's one heartbeat task (`heartbeats.py`); without it each wait beats
        from a task of its own."""
        self.params = params
        self._workspace = workspace
        self.tools = tools
        """The run's tool set: the definition's list, minus mutating tools in explore mode."""
        self._runtime_tools = runtime_tools if runtime_tools is not None else tools
        self.progress = RunProgress()
        self._peer = peer
        self._parent = parent_capabilities
        self._heartbeat_seconds = heartbeat_seconds
        self._beats = beats
        self._seq = 0
        # Held while a seq is taken and its event written, so seq order is wire order even
        # when the heartbeat task and the loop emit at the same moment.
        # fast_acquire: no event-loop turn per event while nobody else holds it.
        self._emit_lock = emit_lock if emit_lock is not None else anyio.Lock(fast_acquire=True)

    # --- what the run is ----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.params.run_id

    @property
    def definition(self) -> AgentDefinition:
        return self.params.agent

    @property
    def workspace(self) -> Workspace:
        return self._workspace

    @property
    def read_only(self) -> bool:
        return self.params.agent.read_only

    @property
    def continuable(self) -> bool:
        return self.params.continuable

    # --- talking to the parent ----------------------------------------------------------------

    async def emit(self, kind: EventKind, data: Mapping[str, Any] | None = None) -> None:
        """Send one `agent/event`. Progress is best effort: an event that cannot be sent (over
        the parent's cap, pipe gone) is logged and dropped, and never fails the run."""
        async with self._emit_lock:
            params = AgentEventParams(
                run_id=self.run_id, seq=self._seq, kind=kind, data=dict(data or {})
            )
            self._seq += 1
            try:
                await self._peer.notify(AGENT_EVENT, params)
            except (LocalProtocolError, ConnectionClosed) as exc:
                log.warning("dropped %s event %d of run %s: %s", kind, params.seq, self.run_id, exc)

    async def complete_model(
        self,
        messages: list[ChatMessage],
        *,
        tools: list[ToolSpec] | None = None,
        purpose: Literal["turn", "compaction"] = "turn",
        model: str | None = None,
    ) -> ModelCompleteResult:
        """One model turn brokered by the parent; its usage is added to the run's total.

        Raises `RemoteError` when the parent answers with an error (no model configured,
        provider failure) and `LocalProtocolError` when the transcript passes the parent's cap.
        """
        params = ModelCompleteParams(
            run_id=self.run_id,
            messages=messages,
            model=model if model is not None else self.definition.model,
            tools=self.tools.specs() if tools is None else tools,
            purpose=purpose,
        )
        async with self.heartbeats("model"):
            result = await self._peer.request(MODEL_COMPLETE, params)
        self.progress.input_tokens += result.usage.input_tokens
        self.progress.output_tokens += result.usage.output_tokens
        return result

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any], *, call_id: str = ""
    ) -> ToolOutcome:
        """Run one tool the way the runtime allows it, and never raise for what it does.

        In explore mode a mutating tool is hard-denied here whatever the definition lists or
        any policy would say (the parent is not even asked); in build mode a mutating tool
        runs only after `tool/approve` allows it, and a denial comes back as the tool's error
        result. Unknown tools, bad arguments and tool bugs are error results too.
        """
        tool = self.tools.get(name)
        known = tool or self._runtime_tools.get(name)
        if known is not None and known.mutates and self.read_only:
            return ToolOutcome(
                content=f"denied: {name} modifies the workspace and this run is read-only "
                "(explore mode)",
                is_error=True,
            )
        if tool is None:
            available = ", ".join(self.tools.names())
            return ToolOutcome(
                content=f"unknown tool {name!r}; available tools: {available}", is_error=True
            )
        if tool.mutates:
            verdict = await self.approve(name, arguments)
            if not verdict.allow:
                why = f": {verdict.reason}" if verdict.reason else ""
                return ToolOutcome(content=f"denied by the parent{why}", is_error=True)
        token = CURRENT_CALL_ID.set(call_id)
        try:
            async with self.heartbeats(f"tool:{name}"):
                return await tool.run(self, dict(arguments))
        except ToolInputError as exc:
            return ToolOutcome(content=str(exc), is_error=True)
        except Exception as exc:
            # A tool bug must not kill the run: the model hears a short reason, the traceback
            # goes to stderr.
            log.error("tool %s failed", name, exc_info=exc)
            return ToolOutcome(content=f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        finally:
            CURRENT_CALL_ID.reset(token)

    async def call_parent_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Ask the parent to run one of this run's `parentTools` (`tool/call`)."""
        params = ToolCallParams(
            run_id=self.run_id, name=name, arguments=dict(arguments), call_id=CURRENT_CALL_ID.get()
        )
        try:
            got = await self._peer.request(TOOL_CALL, params)
        except RemoteError as exc:
            return ToolOutcome(content=f"the parent refused {name}: {exc.message}", is_error=True)
        return ToolOutcome(content=got.content, is_error=got.is_error, compact=got.compact)

    async def approve(self, tool: str, arguments: Mapping[str, Any]) -> ToolApproveResult:
        if self.read_only:
            return ToolApproveResult(allow=False, reason="the run is read-only (explore mode)")
        if not self._parent.tool_approval:
            return ToolApproveResult(allow=False, reason="the parent has no approval policy")
        params = ToolApproveParams(run_id=self.run_id, tool=tool, arguments=dict(arguments))
        try:
            async with self.heartbeats("approval"):
                result = await self._peer.request(TOOL_APPROVE, params)
        except RemoteError as exc:
            # A parent that cannot answer has not approved: an error answer is a denial.
            return ToolApproveResult(
                allow=False, reason=f"the parent's policy failed: {exc.message}"
            )
        return result

    def heartbeats(self, waiting_for: str) -> AbstractAsyncContextManager[None]:
        """Emit a `heartbeat` event every few seconds while the body runs, so the parent can
        tell a slow turn or tool from a wedged child."""
        if self._beats is not None:
            return self._beats.waiting(self, waiting_for)
        return self._own_heartbeats(waiting_for)

    @asynccontextmanager
    async def _own_heartbeats(self, waiting_for: str) -> AsyncIterator[None]:
        failed: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._beat, waiting_for)
            try:
                yield
            except Exception as exc:
                # Re-raised below, outside the task group, so callers catch the body's own
                # exception rather than an ExceptionGroup around it.
                failed = exc
            finally:
                tg.cancel_scope.cancel()
        if failed is not None:
            raise failed

    async def _beat(self, waiting_for: str) -> None:
        started = time.monotonic()
        while True:
            await anyio.sleep(self._heartbeat_seconds)
            elapsed = round(time.monotonic() - started, 1)
            await self.emit("heartbeat", {"waitingFor": waiting_for, "elapsedSeconds": elapsed})
