"""The table of runs: start one, continue a kept one, cancel one, cancel all, and turn how an
activation ended into a `RunResult`.

Each activation (the run itself, and each `agent/message` that continues it) executes inside
its own cancel scope; `agent/cancel` and `shutdown` cancel that scope and it answers
`status: "aborted"` with whatever progress it made. A run id is busy while an activation of it
is live. A run started with `continuable: true` is kept when it ends — its agent (with its
transcript) and its context (event numbering goes on) — until the child exits; a run that is
not continuable is forgotten.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import anyio

from tether.child.agent import (
    Agent,
    AgentContext,
    AgentOutcome,
    Failed,
    Finished,
    NeedsInput,
    RunProgress,
)
from tether.child.heartbeats import Heartbeats
from tether.child.loop import AgentLoop
from tether.child.tools import ToolRegistry
from tether.child.workspace import Workspace
from tether.protocol import ErrorCode, WireError
from tether.protocol.messages import AgentRunParams, ClientCapabilities, Failure, RunResult
from tether.wire import Endpoint

log = logging.getLogger("tether.child")

AgentFactory = Callable[[AgentRunParams], Agent]


def default_agent(params: AgentRunParams) -> Agent:
    return AgentLoop()


class _Live:
    __slots__ = ("done", "reason", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.done: anyio.Event | None = None
        """Made only for whoever waits for the run's end (`cancel_all`): most runs have none."""
        self.reason = ""

    def ended(self) -> None:
        if self.done is not None:
            self.done.set()


class _Kept:
    """A finished continuable run: what `agent/message` continues."""

    __slots__ = ("agent", "ctx", "params")

    def __init__(self, params: AgentRunParams, agent: Agent, ctx: AgentContext) -> None:
        self.params = params
        self.agent = agent
        self.ctx = ctx


class RunTable:
    def __init__(
        self,
        peer: Endpoint,
        tools: ToolRegistry,
        *,
        agent_factory: AgentFactory = default_agent,
        beats: Heartbeats | None = None,
    ) -> None:
        """`beats`: the child's heartbeat task, shared by every run's waits."""
        self._peer = peer
        self._beats = beats
        self._tools = tools
        self._agent_factory = agent_factory
        self._live: dict[str, _Live] = {}
        self._kept: dict[str, _Kept] = {}
        self._workspace: tuple[str, int, int, Workspace] | None = None
        """The last workspace resolved: its path as given, the (device, inode) it named."""
        self.parent_capabilities = ClientCapabilities()
        self._emit_lock = anyio.Lock(fast_acquire=True)
        """Shared by the runs' contexts: a lock per run cost a run more than any event did."""

    def is_live(self, run_id: str) -> bool:
        return run_id in self._live

    @property
    def live(self) -> int:
        """How many runs have not produced their result yet."""
        return len(self._live)

    async def run(self, params: AgentRunParams) -> RunResult:
        """Run to the end and return the result; a run id already in use is RUN_BUSY."""
        if params.run_id in self._live or params.run_id in self._kept:
            raise WireError(ErrorCode.RUN_BUSY, f"run {params.run_id!r} is already in use")
        live = self._live[params.run_id] = _Live()
        try:
            return await self._run(params, live)
        finally:
            del self._live[params.run_id]
            live.ended()

    async def message(self, run_id: str, message: str) -> RunResult:
        """Continue a kept run with the next user message: RUN_BUSY while an activation of it
        is live (messages are not queued), UNKNOWN_RUN for a run that was not kept."""
        if run_id in self._live:
            raise WireError(ErrorCode.RUN_BUSY, f"run {run_id!r} is still running")
        kept = self._kept.get(run_id)
        if kept is None:
            raise WireError(
                ErrorCode.UNKNOWN_RUN,
                f"no finished continuable run {run_id!r} in this child (runs are kept only "
                "when started with continuable: true)",
            )
        resume = getattr(kept.agent, "resume", None)
        if resume is None:
            raise WireError(
                ErrorCode.UNKNOWN_RUN, f"the agent of run {run_id!r} cannot be continued"
            )
        live = self._live[run_id] = _Live()
        ctx = kept.ctx
        ctx.progress = RunProgress()
        try:
            outcome = await self._activate(
                kept.params, ctx, live, lambda: resume(ctx, message), started=False
            )
        finally:
            del self._live[run_id]
            live.ended()
        return _result(kept.params, ctx.progress, outcome)

    def _resolve(self, path: str) -> Workspace:
        """The run's workspace. Runs of one child mostly name the same one: when the path
        still names the directory it did last time, and the resolved root still names it too
        (one `stat` each instead of a `realpath` walk), the last resolution stands."""
        last = self._workspace
        if last is not None and last[0] == path:
            try:
                st = os.stat(path)
                if (st.st_dev, st.st_ino) == last[1:3]:
                    workspace = last[3]
                    root = os.stat(workspace.root) if path != workspace.root_text else st
                    if (root.st_dev, root.st_ino) == last[1:3]:
                        return workspace
            except OSError:
                pass  # resolved afresh below, which says what is wrong
        workspace = Workspace(path)
        st = os.stat(workspace.root_text)
        self._workspace = (path, st.st_dev, st.st_ino, workspace)
        return workspace

    async def _run(self, params: AgentRunParams, live: _Live) -> RunResult:
        try:
            workspace = self._resolve(params.workspace)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            failed = Failed(
                kind="agent_error", message=f"workspace {params.workspace!r} is unusable: {reason}"
            )
            return _result(params, RunProgress(), failed)
        definition = params.agent
        tools = self._tools.select(
            definition.tools, read_only=definition.read_only, continuable=params.continuable
        )
        if params.parent_tools:
            tools = tools.with_parent_tools(params.parent_tools)
        ctx = AgentContext(
            params,
            workspace=workspace,
            tools=tools,
            peer=self._peer,
            parent_capabilities=self.parent_capabilities,
            runtime_tools=self._tools,
            emit_lock=self._emit_lock,
            beats=self._beats,
        )
        agent = self._agent_factory(params)
        outcome = await self._activate(params, ctx, live, lambda: agent.run(ctx), started=True)
        if params.continuable:
            self._kept[params.run_id] = _Kept(params, agent, ctx)
        return _result(params, ctx.progress, outcome)

    async def _activate(
        self,
        params: AgentRunParams,
        ctx: AgentContext,
        live: _Live,
        body: Callable[[], Awaitable[AgentOutcome]],
        *,
        started: bool,
    ) -> AgentOutcome:
        """One activation of a run under its cancel scope; never raises for what the agent
        does."""
        definition = params.agent
        outcome: AgentOutcome | None = None
        with live.scope:
            try:
                # `started` and the user-turn count belong to the runtime, not to the agent,
                # so a replacement agent gets them too.
                ctx.progress.turn_count += 1
                if started:
                    await ctx.emit(
                        "started",
                        {
                            "agentType": definition.type,
                            "description": params.description,
                            "tools": ctx.tools.names(),
                            "readOnly": definition.read_only,
                        },
                    )
                outcome = await body()
                if not isinstance(outcome, Finished | Failed | NeedsInput):
                    log.error("run %s: the agent returned %r", params.run_id, outcome)
                    outcome = Failed(
                        kind="agent_error",
                        message=f"the agent returned a {type(outcome).__name__}, not a "
                        "Finished or Failed outcome",
                        summary=ctx.progress.last_text,
                    )
            except Exception as exc:
                log.error("run %s failed", params.run_id, exc_info=exc)
                outcome = Failed(
                    kind="agent_error",
                    message="the agent failed with an internal error (details are on stderr)",
                    summary=ctx.progress.last_text,
                )
        if outcome is None:  # our own cancel, absorbed by the run's scope
            why = f": {live.reason}" if live.reason else ""
            outcome = Failed(kind="cancelled", message=f"the run was cancelled{why}")
        return outcome

    def cancel(self, run_id: str, reason: str = "") -> bool:
        live = self._live.get(run_id)
        if live is None:
            return False
        live.reason = live.reason or reason
        live.scope.cancel()
        return True

    async def cancel_all(self, reason: str) -> None:
        """Cancel every live run and wait until each has produced its result."""
        waiting = list(self._live.values())
        for live in waiting:
            live.reason = live.reason or reason
            if live.done is None:
                live.done = anyio.Event()
            live.scope.cancel()
        for live in waiting:
            assert live.done is not None
            await live.done.wait()


def _result(params: AgentRunParams, progress: RunProgress, outcome: AgentOutcome) -> RunResult:
    # One RunResult built per branch (no base copied with `replace`: a run pays for one).
    if isinstance(outcome, Finished):
        return RunResult(
            success=True,
            status="completed",
            run_id=params.run_id,
            summary=outcome.summary,
            message=outcome.message,
            artifacts=outcome.artifacts,
            skipped=outcome.skipped,
            turn_count=progress.turn_count,
            iteration_count=progress.iteration_count,
            usage=progress.usage,
        )
    if isinstance(outcome, NeedsInput):
        return RunResult(
            success=True,
            status="needs_input",
            run_id=params.run_id,
            summary=outcome.summary or progress.last_text,
            message="the run asks its orchestrator a question",
            question=outcome.question,
            turn_count=progress.turn_count,
            iteration_count=progress.iteration_count,
            usage=progress.usage,
        )
    return RunResult(
        success=False,
        status="aborted" if outcome.kind == "cancelled" else "error",
        run_id=params.run_id,
        summary=outcome.summary or progress.last_text,
        message=outcome.message,
        failure=Failure(kind=outcome.kind),
        turn_count=progress.turn_count,
        iteration_count=progress.iteration_count,
        usage=progress.usage,
    )
