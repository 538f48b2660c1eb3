"""The tiny agent of the `agent/run` round-trip figure: it finishes at once, so a run costs
only what the runtime adds around an agent (the run's set-up, its `started` event, the result).

Hosted with `python -I -m tether.child --agent /path/to/tiny_agent.py:make`.
"""

from __future__ import annotations

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams


class Tiny:
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        return Finished(summary="ok", message="the tiny agent finished")


def make(params: AgentRunParams) -> Tiny:
    return Tiny()
