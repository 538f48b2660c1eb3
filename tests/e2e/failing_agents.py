"""Agents a test child hosts through `--agent FILE:callable` that fail in their own way. Not
collected by pytest: no `test_` prefix."""

from __future__ import annotations

import sys

import anyio

from tether.child.agent import AgentContext, AgentOutcome
from tether.protocol.messages import AgentRunParams


class Raises:
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        print("the agent is about to break: the ledger is missing", file=sys.stderr, flush=True)
        raise RuntimeError("no ledger")


def raises(params: AgentRunParams) -> Raises:
    return Raises()


class Waits:
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        await ctx.emit("report", {"waiting": True})
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def waits(params: AgentRunParams) -> Waits:
    return Waits()
