"""What delegation costs: one task call beside a plain run of the same sub-agent, and a whole
orchestrated demo run.

`.venv/bin/python -m benchmarks.orchestration [--rounds 7]`, interleaved round by round, in one
supervisor:

- plain: `Supervisor.run` of an explorer (the built-in role's wire definition, the sub-agent
  system prompt) whose scripted model answers `complete` at once: spawn, handshake, one turn,
  result, dispose;
- delegated: the same explorer reached through an orchestrator's `task` call, timed as the
  orchestrator sees it: from its model's answer holding the call to its next model request,
  which holds the result (the child forwards `tool/call`, the parent validates, admits, spawns
  and runs the sub-agent, writes the ledger, answers; the child appends the result and asks
  again);
- demo: the whole orchestrated demo run (`examples/orchestrate.json`: two explorers in
  parallel, a tester, a verifier FAIL, a fix, a verifier PASS), from `orchestrate()` to its
  return.

Prints the medians and minima; overhead = delegated - plain.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from tether.parent import ModelCompleteParams, ModelCompleteResult, ScriptedModel, Supervisor
from tether.parent.delegation import builtin_registry

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ORCHESTRATOR = "You are an orchestrator"
DONE = {"toolCalls": [{"name": "complete", "arguments": {"summary": "found it"}}]}
TASK = {
    "name": "task",
    "arguments": {"subagent_type": "explorer", "description": "look", "prompt": "Find it."},
}
BOOK = {
    "scripts": [
        {"when": ORCHESTRATOR, "turns": [{"toolCalls": [TASK]}, DONE]},
        {"when": "Role: explorer", "turns": [DONE]},
    ]
}


class Stopwatch:
    """A scripted model (`book`: its script as JSON) that notes, on `clock`, when the
    orchestrator's task turn was answered and when its next request (holding every result)
    came."""

    def __init__(
        self, book: str | None = None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.model = ScriptedModel.from_json(book if book is not None else json.dumps(BOOK))
        self.clock = clock
        self.answered: float | None = None
        self.next_request: float | None = None

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        system = params.messages[0].content if params.messages else ""
        orchestrator = ORCHESTRATOR in system
        if orchestrator and self.answered is not None and self.next_request is None:
            self.next_request = self.clock()
        result = await self.model.complete(params)
        if orchestrator and self.answered is None:
            self.answered = self.clock()
        return result


async def rounds(n: int) -> dict[str, list[float]]:
    explorer = next(d for d in builtin_registry() if d.type == "explorer").to_wire()
    plain_model = ScriptedModel.from_json(json.dumps([DONE]))
    got: dict[str, list[float]] = {"plain": [], "delegated": [], "demo": []}
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        async with Supervisor() as sup:
            for _ in range(n):
                t = time.perf_counter()
                result = await sup.run("Find it.", agent=explorer, workspace=ws, model=plain_model)
                got["plain"].append(time.perf_counter() - t)
                assert result.success, result

                watch = Stopwatch()
                done = await sup.orchestrate("Go.", model=watch, workspace=ws)
                assert done.success and done.tasks[0].output.status == "completed", done
                assert watch.answered is not None and watch.next_request is not None
                got["delegated"].append(watch.next_request - watch.answered)

                demo = Path(tmp) / "demo"
                shutil.rmtree(demo, ignore_errors=True)
                shutil.copytree(EXAMPLES / "workspace", demo)
                t = time.perf_counter()
                done = await sup.orchestrate(
                    "Fix it.", model=f"scripted:{EXAMPLES / 'orchestrate.json'}", workspace=demo
                )
                got["demo"].append(time.perf_counter() - t)
                assert done.success and len(done.ledger.records) == 6, done
    return got


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    got = anyio.run(rounds, args.rounds)
    for name, values in got.items():
        print(
            f"{name:<10} median {statistics.median(values) * 1000:7.1f} ms   "
            f"min {min(values) * 1000:7.1f} ms   (n={len(values)})"
        )
    overhead = [d - p for d, p in zip(got["delegated"], got["plain"], strict=True)]
    print(
        f"overhead   median {statistics.median(overhead) * 1000:7.1f} ms   "
        f"(delegated - plain, round by round)"
    )


if __name__ == "__main__":
    main()
