"""The supervisor `benchmarks/crash.py` SIGKILLs: continuable agents that keep receiving
follow-ups, saying on stdout what it sends, what it was answered, and where it is.

    python -m benchmarks.crash_driver STATE WORKSPACE --seed N [--beat SECONDS]

It opens `Supervisor(state_dir=STATE)`, finds its `AGENTS` agents by label (spawning those it
does not find: the first run), and then sends each agent follow-up after follow-up, all agents
at once, forever. Half the agents keep their child warm between messages, half have no
keep-alive (every message a cold resume). One JSON object a line, each flushed before the step
it announces, so whatever the harness read before a SIGKILL is true:

    {"started": WALL, "pid": PID}                 at start-up
    {"listed": [{"id", "label", "status"}...]}    what the store held when this process began
    {"sending": ID, "message": TEXT}              before `send_message` (the store may have it)
    {"ack": ID, "message": TEXT, "summary": S, "success": B}   after it returned (handed over)
    {"granted": ID, "wall": WALL, "seconds": S, "tookOver": WHY}   an activation was taken
    {"phase": "turn" | "append" | "settle" | "heartbeat" | "resume", "agent": ID}
                                                  just before a model turn, a stored turn, a
                                                  stored answer, a lease renewal, a cold resume
    {"error": ID, "message": TEXT}                `send_message` raised (it is tried again)
    {"stopping": true} / {"stopped": true}        SIGTERM: the supervisor closes, then it exits

The model answers each message with `complete(summary="answer to <message>")`; a message
ending in ` +` takes one `list_dir` turn first. Every turn costs 10 input and 5 output tokens
and waits a random 0-20 ms, so a kill often lands while one is in flight.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from tether.parent import Supervisor
from tether.parent.agents.service import AgentError
from tether.parent.agents.sessions import Activation, LeasePolicy, SessionError, SessionStore
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    Usage,
)

AGENTS = 4
LABEL = "crash agent {}"
TURN = Usage(input_tokens=10, output_tokens=5)


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def answer_to(message: str) -> str:
    return f"answer to {message}"


class Model:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.calls = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        said = [m.content for m in params.messages if m.role == "user"][-1]
        since = 0
        for m in reversed(params.messages):
            if m.role == "user":
                break
            since += m.role == "assistant"
        say(phase="turn", run=params.run_id)
        await anyio.sleep(self.rng.uniform(0, 0.02))
        self.calls += 1
        if said.endswith(" +") and since == 0:
            call = ToolCall(id=f"l{self.calls}", name="list_dir", arguments={"path": "."})
        else:
            call = ToolCall(
                id=f"c{self.calls}", name="complete", arguments={"summary": answer_to(said)}
            )
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content=f"turn {self.calls}", tool_calls=[call]),
            usage=TURN,
            stop_reason="tool_use",
        )


def _announce(name: str, phase: str) -> None:
    """Say `phase` just before every call of `Activation.<name>` in this process."""
    original: Callable[..., Awaitable[Any]] = getattr(Activation, name)

    async def announced(self: Activation, *args: Any, **kwargs: Any) -> Any:
        say(phase=phase, agent=self.agent_id)
        return await original(self, *args, **kwargs)

    setattr(Activation, name, announced)


def _time_acquire() -> None:
    """Say when each activation is granted, and how long taking its lease took."""
    original = SessionStore.acquire

    async def timed(self: SessionStore, agent_id: str, *, wait: float = 0.0) -> Any:
        t0 = time.monotonic()
        got = await original(self, agent_id, wait=wait)
        if isinstance(got, Activation):
            took = got.took_over.why if got.took_over is not None else None
            say(
                granted=got.agent_id,
                wall=time.time(),
                seconds=time.monotonic() - t0,
                tookOver=took,
            )
        return got

    SessionStore.acquire = timed  # type: ignore[method-assign]


async def talk(
    sup: Supervisor, model: Model, agent_id: str, index: int, rng: random.Random
) -> None:
    n = 0
    cold = True  # a new process: its first message to each agent is a cold resume
    while True:
        message = f"m {os.getpid()} {index} {n}" + (" +" if rng.random() < 0.3 else "")
        if cold:
            say(phase="resume", agent=agent_id)
        say(sending=agent_id, message=message)
        try:
            result = await sup.send_message(agent_id, message, wait=30, model=model)
        except (AgentError, SessionError) as exc:
            say(error=agent_id, message=str(exc))
            await anyio.sleep(0.2)
            continue
        say(ack=agent_id, message=message, summary=result.summary, success=result.success)
        n += 1
        cold = not sup.agents.is_warm(agent_id)


async def main(args: argparse.Namespace) -> None:
    say(started=time.time(), pid=os.getpid())
    rng = random.Random(args.seed)
    for name, phase in (("append", "append"), ("settle", "settle"), ("heartbeat", "heartbeat")):
        _announce(name, phase)
    _time_acquire()
    lease = LeasePolicy(heartbeat_every=args.beat) if args.beat else None
    model = Model(rng)
    async with Supervisor(state_dir=args.state, lease=lease) as sup:
        found = {a.label: a for a in await sup.list_agents(limit=1000)}
        say(listed=[{"id": a.id, "label": a.label, "status": a.status} for a in found.values()])
        ids = []
        for i in range(AGENTS):
            known = found.get(LABEL.format(i))
            if known is not None:
                ids.append(known.id)
                continue
            spawned = await sup.spawn_agent(
                f"start {i}",
                agent="explorer",
                workspace=args.workspace,
                model=model,
                label=LABEL.format(i),
                keep_alive=300 if i % 2 == 0 else 0,
            )
            first = await spawned.result()
            say(ack=spawned.id, message=f"start {i}", summary=first.summary, success=first.success)
            ids.append(spawned.id)
        async with anyio.create_task_group() as tg:
            for i, agent_id in enumerate(ids):
                tg.start_soon(talk, sup, model, agent_id, i, random.Random(rng.random()))
            # SIGTERM is the harness's clean stop: the supervisor closes as it would on any exit.
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    say(stopping=True)
                    tg.cancel_scope.cancel()
                    break
    say(stopped=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("state")
    parser.add_argument("workspace")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--beat", type=float, default=None, help="heartbeat_every (default: 15 s)")
    anyio.run(main, parser.parse_args())
