"""The built-in agent loop: model turn → tool calls → results → next turn.

A run ends when `complete` is called (`Finished` with its summary and artifacts), when a stop
condition holds (`"no_tool_calls"`: a turn that calls no tool ends the run with its text), when
`maxIterations` model turns have passed (`Failed(budget_exhausted)`), or when the parent
answers a model turn with an error (`Failed(agent_error)`). Cancellation is not handled here: the
runner's cancel scope interrupts whatever the loop awaits and reports the run as aborted.

Later stages plug in here: compaction rewrites `self.messages` between turns, and the mode
(explore/build) is already applied to the tool set the context carries.
"""

from __future__ import annotations

import logging

from tether.child.agent import AgentContext, AgentOutcome, Failed, Finished
from tether.child.peer import ConnectionClosed
from tether.child.tools import Completion, ToolInputError, ToolOutcome
from tether.protocol import ProtocolError, RemoteError
from tether.protocol.messages import ChatMessage, ToolCall

log = logging.getLogger("tether.child")

NO_TOOL_CALLS = "no_tool_calls"
EVENT_PREVIEW_CHARS = 8000
"""Tool results are previewed, not copied, in events: the parent relays progress, not data."""
NUDGE = (
    "Continue with the task. When it is done, call the `complete` tool with a summary and "
    "the paths of anything you produced."
)


class AgentLoop:
    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        definition = ctx.definition
        self.messages = self._opening(ctx)
        for iteration in range(1, definition.max_iterations + 1):
            ctx.progress.iteration_count = iteration
            await ctx.emit("step", {"iteration": iteration})
            try:
                turn = await ctx.complete_model(self.messages)
            except (RemoteError, ProtocolError, ConnectionClosed) as exc:
                # The parent refused the turn (no model, provider down), its reply did not fit
                # the protocol, or the transcript passed its byte cap: the run cannot go on.
                reason = exc.message if isinstance(exc, RemoteError | ProtocolError) else str(exc)
                return Failed(
                    kind="agent_error",
                    message=f"the model turn failed: {reason}",
                    summary=ctx.progress.last_text,
                )
            reply = ChatMessage(
                role="assistant", content=turn.message.content, tool_calls=turn.message.tool_calls
            )
            self.messages.append(reply)
            if reply.content:
                ctx.progress.last_text = reply.content
                await ctx.emit("text", {"text": reply.content})

            if not reply.tool_calls:
                if NO_TOOL_CALLS in definition.stop_conditions:
                    return Finished(
                        summary=reply.content,
                        message="the model answered without calling a tool (stop condition)",
                    )
                self.messages.append(ChatMessage(role="user", content=NUDGE))
                continue

            completion = await self._call_tools(ctx, reply.tool_calls)
            if completion is not None:
                return Finished(
                    summary=completion.summary,
                    message="the agent called complete",
                    artifacts=completion.artifacts,
                    skipped=completion.skipped,
                )
        return Failed(
            kind="budget_exhausted",
            message=f"the run used its {definition.max_iterations} iterations without completing",
            summary=ctx.progress.last_text,
        )

    def _opening(self, ctx: AgentContext) -> list[ChatMessage]:
        opening: list[ChatMessage] = []
        if ctx.definition.instructions:
            opening.append(ChatMessage(role="system", content=ctx.definition.instructions))
        opening.extend(ctx.params.history)
        opening.append(ChatMessage(role="user", content=ctx.params.prompt))
        return opening

    async def _call_tools(self, ctx: AgentContext, calls: list[ToolCall]) -> Completion | None:
        """Run a turn's calls in order; every call gets a result message, even failed ones."""
        completion: Completion | None = None
        for call in calls:
            await ctx.emit(
                "tool_call", {"id": call.id, "name": call.name, "arguments": call.arguments}
            )
            if completion is not None:
                outcome = ToolOutcome(
                    content="not run: the task was already completed", is_error=True
                )
            else:
                outcome = await self._call_tool(ctx, call)
            if outcome.completion is not None:
                completion = outcome.completion
            await ctx.emit(
                "tool_result",
                {
                    "id": call.id,
                    "name": call.name,
                    "isError": outcome.is_error,
                    "content": outcome.content[:EVENT_PREVIEW_CHARS],
                    "truncated": len(outcome.content) > EVENT_PREVIEW_CHARS,
                },
            )
            content = f"error: {outcome.content}" if outcome.is_error else outcome.content
            self.messages.append(ChatMessage(role="tool", content=content, tool_call_id=call.id))
        return completion

    async def _call_tool(self, ctx: AgentContext, call: ToolCall) -> ToolOutcome:
        tool = ctx.tools.get(call.name)
        if tool is None:
            available = ", ".join(ctx.tools.names())
            return ToolOutcome(
                content=f"unknown tool {call.name!r}; available tools: {available}",
                is_error=True,
            )
        try:
            async with ctx.heartbeats(f"tool:{call.name}"):
                return await tool.run(ctx, call.arguments)
        except ToolInputError as exc:
            return ToolOutcome(content=str(exc), is_error=True)
        except Exception as exc:
            # A tool bug must not kill the run: the model hears a short reason, the traceback
            # goes to stderr.
            log.error("tool %s failed", call.name, exc_info=exc)
            return ToolOutcome(
                content=f"{call.name} failed: {type(exc).__name__}: {exc}", is_error=True
            )
