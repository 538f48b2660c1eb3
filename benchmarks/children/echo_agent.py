"""The echo agent of the follow-up round-trip figure: each activation (the prompt, each
follow-up) says its text back as one `text` event and finishes at once, so a follow-up costs
only what the runtime and the parent add around an agent — the same work as the ACP echo
agent it is compared with (`acp_echo.py`: one `agent_message_chunk`, then `end_turn`).

Hosted with `python -I -m tether.child --agent /path/to/echo_agent.py:make`.
"""

from __future__ import annotations

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams


class Echo:
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        return await self.resume(ctx, ctx.params.prompt)

    async def resume(self, ctx: AgentContext, message: str) -> AgentOutcome:
        await ctx.emit("text", {"text": message})
        return Finished(summary=message, message="echoed")


def make(params: AgentRunParams) -> Echo:
    return Echo()
