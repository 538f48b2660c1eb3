"""The broker under load, in a process of its own: many live children, each asking the parent
for model turns one after another, beside `ping` across the same children at the same
concurrency.

`python -m benchmarks.broker_load --children 256` starts that many runs of
`benchmarks/children/loop_agent.py` in one `Supervisor` (the defaults: the zygote, the sandbox
where the host has one; one run per child, a model the parent serves that answers at once) and
prints one JSON object:

    ready_s      from the first `start()` to every child waiting at its first gate
    ping_us      per phase: every `ping` round trip, in µs, while all children idle at a gate —
                 every child pinged by a task of its own, `--pings` times, all at once (as many
                 requests in flight as children, as in the load that follows)
    turn_us      per phase: every model turn's round trip as its child timed it, in µs
                 (`complete_model`: the request, the parent's broker and the model, the answer)
    turns_per_s  per phase: model turns the parent served over the time it served them
    turns        per phase: how many

Each phase: the pings, then the gate opened and every child asks for turns for `--seconds`.
Everything is bounded by deadlines; every child is disposed on every path.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.run.handle import RunHandle
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    Usage,
)

LOOP_AGENT = f"{Path(__file__).resolve().parent / 'children' / 'loop_agent.py'}:make"


class GateModel:
    """Answers every turn at once, except each child's `gate N` turn, held until phase N opens;
    notes when each plain turn was served."""

    def __init__(self, children: int, phases: int) -> None:
        self.children = children
        self.opened = [anyio.Event() for _ in range(phases)]
        self.gathered = [anyio.Event() for _ in range(phases)]
        self._waiting = [0] * phases
        self.served: list[list[int]] = [[] for _ in range(phases)]
        self.phase = 0
        self.answer = ModelCompleteResult(
            message=ChatMessage(role="assistant", content="ok"), usage=Usage(1, 1)
        )

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        text = params.messages[-1].content
        if text.startswith("gate "):
            k = int(text[5:])
            self._waiting[k] += 1
            if self._waiting[k] == self.children:
                self.gathered[k].set()
            await self.opened[k].wait()
            return self.answer
        self.served[self.phase].append(time.perf_counter_ns())
        return self.answer


async def _ping_all(handles: list[RunHandle], pings: int) -> list[float]:
    got: list[float] = []

    async def pinger(handle: RunHandle) -> None:
        for _ in range(pings):
            rtt = await handle.ping()
            assert rtt is not None, f"run {handle.run_id} did not answer a ping"
            got.append(rtt * 1e6)

    async with anyio.create_task_group() as tg:
        for handle in handles:
            tg.start_soon(pinger, handle)
    return got


async def load(children: int, phases: int, seconds: float, pings: int) -> dict[str, Any]:
    model = GateModel(children, phases)
    config = ChildConfig(command=(*DEFAULT_COMMAND, "--agent", LOOP_AGENT))
    agent = AgentDefinition(max_iterations=1_000_000_000)
    out: dict[str, Any] = {"children": children, "ping_us": [], "turn_us": [], "turns": []}
    out["turns_per_s"] = []
    with tempfile.TemporaryDirectory(prefix="tether-load-") as workspace:
        async with Supervisor(config) as sup:
            t0 = time.perf_counter()
            handles = [
                await sup.start(
                    f"{phases} {seconds}", agent=agent, workspace=workspace, model=model
                )
                for _ in range(children)
            ]
            with anyio.fail_after(120):
                await model.gathered[0].wait()
            out["ready_s"] = time.perf_counter() - t0
            for phase in range(phases):
                with anyio.fail_after(120):
                    if phase:
                        await model.gathered[phase].wait()
                    out["ping_us"].append(await _ping_all(handles, pings))
                model.phase = phase
                model.opened[phase].set()
            with anyio.fail_after(120 + phases * seconds):
                results = [await handle.result() for handle in handles]
    for result in results:
        assert result.success, result.message
    turns = [json.loads(r.summary) for r in results]
    for phase in range(phases):
        served = model.served[phase]
        out["turn_us"].append([t for child in turns for t in child[phase]])
        out["turns"].append(len(served))
        span = (served[-1] - served[0]) / 1e9 if len(served) > 1 else 0.0
        out["turns_per_s"].append(len(served) / span if span > 0 else 0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--children", type=int, default=256)
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pings", type=int, default=20)
    args = ap.parse_args()
    got = anyio.run(load, args.children, args.phases, args.seconds, args.pings)
    print(json.dumps(got))


if __name__ == "__main__":
    main()
