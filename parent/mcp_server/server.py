"""Serve `ServedTool`s over one MCP connection with the SDK's low-level `Server`.

Theory of operation
-------------------
`ToolServer(tools, instructions=...)` answers `tools/list` with each tool's name, title,
description, input and output schemas and hints, and `tools/call` by running the tool's call
as a task of its own call group (`run()` holds it), not in the SDK's handler: the handler waits
for it. So:

- a call always has an owner. When the SDK cancels the handler (the client sent
  `notifications/cancelled`, or closed the connection, or the server is stopping), the handler
  stops the runs the call started (`ctx.stops`: from that instant their brokers serve nothing),
  cancels its call and waits for it, shielded from that cancellation and bounded by
  `dispose_bound`, then lets the cancellation go on; a call that outlives the bound is still the
  call group's (and its sub-agents the supervisor's), and is taken down when they close. The
  task call's own sub-agents are disposed by its runner through the ladder on that cancellation.
  MCP never answers a cancelled request, so the stop's receipt (`tether.parent.run.stop`) goes
  to the server's log on stderr, one line per stopped call.
- with a progress token on the request, the call's progress lines go to a `ProgressFeed` that a
  task of the handler sends as `notifications/progress` (numbered 1, 2, ...; no total); the last
  lines are sent before the result.
- nothing a tool does becomes a protocol error: its `Answer` becomes a `CallToolResult` (text,
  structured content, `isError`), and an exception from a tool becomes an error answer (and a
  log line on stderr). Only a call of a tool this server does not offer is a JSON-RPC error
  (`INVALID_PARAMS`), as MCP asks.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from tether.parent.mcp_server.progress import ProgressFeed
from tether.parent.mcp_server.stdio import ReadStream, WriteStream
from tether.parent.mcp_server.tools import Answer, CallContext, ServedTool
from tether.parent.process.wired import version
from tether.parent.run.stop import describe

log = logging.getLogger("tether.mcp")

SERVER_NAME = "tether"
DEFAULT_DISPOSE_BOUND = 15.0
"""Seconds a cancelled call may take to dispose of its sub-agents before the handler lets the
cancellation go on (the default ladder's rungs and the cancel grace add up to 9 s)."""


@dataclass
class _Call:
    """One tool call, run by the call group."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: Answer | None = None


class ToolServer:
    def __init__(
        self,
        tools: Sequence[ServedTool],
        *,
        instructions: str,
        dispose_bound: float = DEFAULT_DISPOSE_BOUND,
    ) -> None:
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique: {names}")
        self.tools = {t.name: t for t in tools}
        self.instructions = instructions
        self.dispose_bound = dispose_bound
        self.sdk: Server[Any] = Server(
            SERVER_NAME,
            version=version(),
            instructions=instructions,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self._calls: TaskGroup | None = None
        self._ids = itertools.count(1)

    async def run(self, read_stream: ReadStream, write_stream: WriteStream) -> None:
        """Serve one connection until the client closes it; then every call still running is
        cancelled (its sub-agents disposed) before this returns."""
        async with anyio.create_task_group() as calls:
            self._calls = calls
            try:
                await self.sdk.run(
                    read_stream, write_stream, self.sdk.create_initialization_options()
                )
            finally:
                calls.cancel_scope.cancel()
                self._calls = None

    # --- tools/list ---------------------------------------------------------------------------

    def listing(self) -> list[types.Tool]:
        return [
            types.Tool(
                name=t.name,
                title=t.title,
                description=t.description,
                input_schema=t.input_schema,
                output_schema=t.output_schema,
                annotations=types.ToolAnnotations.model_validate(t.hints) if t.hints else None,
            )
            for t in self.tools.values()
        ]

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.listing())

    # --- tools/call ---------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = self.tools.get(params.name)
        if tool is None:
            offered = ", ".join(self.tools) or "none"
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown tool {params.name[:80]!r}; this server offers: {offered}",
            )
        feed = ProgressFeed() if _progress_token(ctx) is not None else None
        context = CallContext(id=str(next(self._ids)), progress=feed.put if feed else _ignore)
        async with anyio.create_task_group() as tg:
            if feed is not None:
                tg.start_soon(_send_progress, feed, ctx.session)
            try:
                answer = await self._owned(tool, dict(params.arguments or {}), context)
            finally:
                if feed is not None:
                    feed.close()  # the sender sends what is queued, then ends
        return types.CallToolResult(
            content=[types.TextContent(text=answer.text)],
            structured_content=answer.structured,
            is_error=answer.is_error,
        )

    async def _owned(self, tool: ServedTool, arguments: dict[str, Any], ctx: CallContext) -> Answer:
        """Run the call in the call group and wait for it (see the module docstring)."""
        if self._calls is None:
            raise RuntimeError("ToolServer.run() is not running")
        call = _Call()
        self._calls.start_soon(self._execute, tool, arguments, ctx, call)
        try:
            await call.done.wait()
        except anyio.get_cancelled_exc_class():
            ctx.stops.ask("cancelled by the MCP client")
            with anyio.move_on_after(self.dispose_bound, shield=True) as bound:
                call.scope.cancel()
                await call.done.wait()
                if ctx.stops.stopped_runs:
                    receipt = await ctx.stops.receipt()
                    log.warning("call %s (%s): %s", ctx.id, tool.name, describe(receipt))
            if bound.cancelled_caught:
                log.warning(
                    "call %s (%s) was not over %g s after it was cancelled; "
                    "its sub-agents are taken down when the server stops",
                    ctx.id,
                    tool.name,
                    self.dispose_bound,
                )
            raise
        assert call.answer is not None
        return call.answer

    async def _execute(
        self, tool: ServedTool, arguments: dict[str, Any], ctx: CallContext, call: _Call
    ) -> None:
        try:
            with call.scope:
                call.answer = await tool.call(arguments, ctx)
        except Exception as exc:  # a tool's bug is the client's error answer, not a wire error
            log.exception("the %s tool failed", tool.name)
            call.answer = Answer(
                f"tether could not serve this {tool.name} call: {type(exc).__name__}: {exc}",
                is_error=True,
            )
        finally:
            if call.answer is None:
                call.answer = Answer(f"the {tool.name} call was cancelled", is_error=True)
            call.done.set()


async def _send_progress(feed: ProgressFeed, session: ServerSession) -> None:
    sent = 0
    async for line in feed:
        sent += 1
        try:
            await session.report_progress(sent, None, line)
        except Exception:  # the client is gone; progress is best effort
            log.debug("a progress notification could not be sent", exc_info=True)
            return


def _progress_token(ctx: ServerRequestContext[Any]) -> object:
    meta = ctx.meta or {}
    return meta.get("progress_token", meta.get("progressToken"))


def _ignore(line: str) -> None:
    pass
