"""Agents a test child hosts through `--agent FILE:callable` (loaded by path: `-I` ignores
PYTHONPATH). Not collected by pytest: no `test_` prefix."""

from __future__ import annotations

import anyio

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams, ChatMessage


class Echo:
    """Asks the model once, reads the file the model names, reports, and finishes."""

    def __init__(self, params: AgentRunParams) -> None:
        self.prompt = params.prompt

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        turn = await ctx.complete_model([ChatMessage(role="user", content=self.prompt)])
        path = turn.message.content.strip()
        read = await ctx.call_tool("read_file", {"path": path})
        denied = await ctx.call_tool("write_file", {"path": "x.txt", "content": "x"})
        await ctx.emit(
            "report", {"read": path, "isError": read.is_error, "writeDenied": denied.is_error}
        )
        return Finished(
            summary=f"{path}: {read.content.split(chr(9), 1)[-1].strip()}",
            message="the custom agent finished",
        )


def make(params: AgentRunParams) -> Echo:
    return Echo(params)


class WaitsForCancel:
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        await ctx.emit("report", {"waiting": True})
        try:
            await anyio.sleep_forever()
        finally:
            (ctx.workspace.root / "saw-cancel.txt").write_text("cancelled")
        raise AssertionError("unreachable")


def waiter(params: AgentRunParams) -> WaitsForCancel:
    return WaitsForCancel()


def returns_nonsense(params: AgentRunParams) -> object:
    class Bad:
        async def run(self, ctx: AgentContext) -> object:
            return "not an outcome"

    return Bad()
