"""A bring-your-own agent for the trace tests: it lists the workspace, asks its model which
file to write, writes it through the runtime's tools (approved by the parent), reports each
tool call and result in its events as the built-in loop does, and finishes with the file as
its artifact and the model's text as its summary."""

from __future__ import annotations

from typing import Any

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams, Artifact, ChatMessage, ToolSpec

WRITE = ToolSpec(
    name="write_file",
    description="Write a file in the workspace.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)


class Notes:
    def __init__(self, params: AgentRunParams) -> None:
        self.task = params.prompt

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        listing = await self.tool(ctx, "l1", "list_dir", {"path": "."})
        messages = [
            ChatMessage(role="system", content="Write one note file, then say what you did."),
            ChatMessage(role="user", content=f"{self.task}\n\n{listing}"),
        ]
        turn = await ctx.complete_model(messages, tools=[WRITE])
        paths = []
        for call in turn.message.tool_calls:
            await self.tool(ctx, call.id, call.name, call.arguments)
            paths.append(str(call.arguments.get("path", "")))
        messages.append(turn.message)
        last = await ctx.complete_model(messages, tools=[])
        found = [ctx.workspace.describe(p) for p in paths]
        artifacts = [a for a in found if isinstance(a, Artifact)]
        return Finished(summary=last.message.content, message="noted", artifacts=artifacts)

    async def tool(
        self, ctx: AgentContext, call_id: str, name: str, arguments: dict[str, Any]
    ) -> str:
        await ctx.emit("tool_call", {"id": call_id, "name": name, "arguments": arguments})
        outcome = await ctx.call_tool(name, arguments, call_id=call_id)
        await ctx.emit(
            "tool_result",
            {"id": call_id, "name": name, "isError": outcome.is_error, "content": outcome.content},
        )
        return outcome.content


def make(params: AgentRunParams) -> Notes:
    return Notes(params)
