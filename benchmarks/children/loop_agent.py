"""The looping agent of the broker-under-load figure (`benchmarks/broker_load.py`): it asks
the parent for model turns one after another, timing each, in phases the parent opens.

Its prompt is `PHASES SECONDS`. Each phase begins with one `gate N` turn, which the parent
holds until it opens phase N (so every child of the fleet is alive and idle while the parent
measures `ping` across them); then the agent asks for plain turns for `SECONDS` of its own
clock, timing each from the call to its answer (`perf_counter_ns` around the run's
`AgentContext.complete_model`: the request written, the parent's broker, a model that answers
at once, the answer read). It finishes with every phase's round trips, in µs, as JSON in its
summary.

Hosted with `python -I -m tether.child --agent /path/to/loop_agent.py:make`.
"""

from __future__ import annotations

import json
import time

from tether.child.agent import AgentContext, AgentOutcome, Finished
from tether.protocol.messages import AgentRunParams, ChatMessage


class Loop:
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        count, seconds = ctx.params.prompt.split()
        phases: list[list[int]] = []
        for phase in range(int(count)):
            await ctx.complete_model([ChatMessage(role="user", content=f"gate {phase}")], tools=[])
            turn = [ChatMessage(role="user", content="turn")]
            times: list[int] = []
            until = time.monotonic() + float(seconds)
            while time.monotonic() < until:
                t0 = time.perf_counter_ns()
                await ctx.complete_model(turn, tools=[])
                times.append((time.perf_counter_ns() - t0) // 1000)
            phases.append(times)
        return Finished(summary=json.dumps(phases), message="looped")


def make(params: AgentRunParams) -> Loop:
    return Loop()
