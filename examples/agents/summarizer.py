"""Your own agent, hosted by a tether child:

    tether run "What is here?" --agent examples/agents/summarizer.py:make --model ...

The child calls `make(params)` once per run and awaits `run(ctx)`. The context gives the same
powers as the built-in loop: model turns brokered by the parent, the confined tools (with the
run's mode and approval policy), progress events, and cancellation.
"""

from __future__ import annotations

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams, ChatMessage


class Summarizer:
    def __init__(self, params: AgentRunParams) -> None:
        self.task = params.prompt

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        listing = await ctx.call_tool("list_dir", {"path": "."})
        await ctx.emit("text", {"text": f"{len(listing.content.splitlines())} entries"})
        turn = await ctx.complete_model(
            [
                ChatMessage(role="system", content="Summarize the listing in one sentence."),
                ChatMessage(role="user", content=f"{self.task}\n\n{listing.content}"),
            ]
        )
        return Finished(summary=turn.message.content, message="summarized the workspace")


def make(params: AgentRunParams) -> Summarizer:
    return Summarizer(params)
