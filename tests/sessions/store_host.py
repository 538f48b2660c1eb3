"""A process that uses the session store the way a supervisor would, driven by the tests.

    store_host.py append STATE [--agent ID] [--bytes N]
        create an agent (unless given one), acquire it, then append turns forever, printing
        `agent ID` first and `appended K` after the append of turn K has returned
    store_host.py hold STATE AGENT [--wait S] [--stale S] [--beat S] [--ready]
        with --ready: print `ready` and wait for a line on stdin before acquiring; then acquire
        and print the outcome as JSON; if acquired, hold it (heartbeats running) until stdin
        closes, then release and print `released`; if the lease is lost meanwhile, print `lost`
    store_host.py churn STATE --turns N
        create an agent, acquire it, append N turns with a heartbeat and a listing between
        each, release; print `done` (for contention: several of these run at once)

Every line is flushed at once: a test that SIGKILLs this process trusts what it already read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio

from tether.parent.agents.sessions import (
    Activation,
    Busy,
    LeaseLost,
    LeasePolicy,
    SessionStore,
    Unavailable,
)
from tether.protocol.messages import AgentDefinition, ChatMessage, Usage


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def turn(k: int, size: int) -> list[ChatMessage]:
    return [
        ChatMessage(role="assistant", content=f"turn {k} " + "x" * size),
        ChatMessage(role="tool", content=f"result {k}", tool_call_id=f"call-{k}"),
    ]


async def append(args: argparse.Namespace) -> None:
    async with SessionStore(args.state) as store:
        agent_id = args.agent or (await store.create_agent(AgentDefinition())).id
        say(f"agent {agent_id}")
        activation = await store.acquire(agent_id, wait=30)
        assert isinstance(activation, Activation), activation
        k = 0
        while True:
            await activation.append(turn(k, args.bytes), Usage(input_tokens=10, output_tokens=1))
            say(f"appended {k}")
            k += 1


async def _stdin_closed() -> None:
    await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


async def hold(args: argparse.Namespace) -> None:
    policy = LeasePolicy(stale_after=args.stale, heartbeat_every=args.beat)
    async with SessionStore(args.state, lease=policy) as store:
        if args.ready:
            say("ready")
            await anyio.to_thread.run_sync(sys.stdin.readline)
        outcome = await store.acquire(args.agent, wait=args.wait)
        if isinstance(outcome, Busy):
            say(json.dumps({"outcome": "busy", "pid": os.getpid(), "holder": outcome.holder.pid}))
            return
        if isinstance(outcome, Unavailable):
            say(json.dumps({"outcome": "unavailable", "reason": outcome.reason}))
            return
        took = outcome.took_over
        say(
            json.dumps(
                {
                    "outcome": "acquired",
                    "pid": os.getpid(),
                    "took_over": None if took is None else {"pid": took.pid, "why": took.why},
                }
            )
        )
        try:
            async with outcome:
                await _stdin_closed()
        except LeaseLost:
            say("lost")
            return
        say("released")


async def churn(args: argparse.Namespace) -> None:
    async with SessionStore(args.state) as store:
        agent = await store.create_agent(AgentDefinition(), label=f"churn {os.getpid()}")
        activation = await store.acquire(agent.id, wait=30)
        assert isinstance(activation, Activation), activation
        async with activation:
            for k in range(args.turns):
                await activation.append(turn(k, 512), Usage(input_tokens=3, output_tokens=2))
                await activation.heartbeat()
                await store.list_agents(limit=20)
            await activation.release("idle")
        say("done")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("append")
    p.add_argument("state")
    p.add_argument("--agent")
    p.add_argument("--bytes", type=int, default=4096)
    p = sub.add_parser("hold")
    p.add_argument("state")
    p.add_argument("agent")
    p.add_argument("--wait", type=float, default=0.0)
    p.add_argument("--stale", type=float, default=60.0)
    p.add_argument("--beat", type=float, default=None)
    p.add_argument("--ready", action="store_true")
    p = sub.add_parser("churn")
    p.add_argument("state")
    p.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    anyio.run({"append": append, "hold": hold, "churn": churn}[args.command], args)


if __name__ == "__main__":
    main()
