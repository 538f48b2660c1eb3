"""The fan-out group of `scripts/bench`: one orchestrator turn that makes 32 task calls, beside
32 bare `Supervisor.run` calls of the same sub-agent started together, in turn round by round.

- delegated: `sup.orchestrate()` whose scripted orchestrator answers its first turn with 32
  `task` calls (explorers, `max_concurrent=32`) and completes on its second; timed as the
  orchestrator sees it, from its model's answer holding the calls to its next model request,
  which holds the 32 results: the child forwards each call (`tool/call`), the parent's gate
  admits, records and runs each sub-agent (the ledger, the `subagent.*` events, the result's
  artifacts checked again as delivered), and the child appends the results;
- bare: 32 `sup.run()` of the same sub-agent (the explorer's wire definition, with the
  sub-agent system prompt) started together in one task group; from the first start to the
  last result.

Every sub-agent is tiny and scripted: two model turns (`list_dir`, then `complete`), through
the zygote and the sandbox (the supervisor's defaults). One supervisor for the group.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import anyio

from benchmarks.orchestration import ORCHESTRATOR, Stopwatch
from benchmarks.report import Figure, Results
from tether.parent import ScriptedModel, Supervisor
from tether.parent.delegation import builtin_registry
from tether.parent.process.isolation import choose_level

FAN_OUT = 32
SUBAGENT_TURNS = [
    {"toolCalls": [{"name": "list_dir", "arguments": {"path": "."}}]},
    {"toolCalls": [{"name": "complete", "arguments": {"summary": "found it"}}]},
]


def _book(n: int) -> str:
    calls = [
        {
            "name": "task",
            "arguments": {
                "subagent_type": "explorer",
                "description": f"look {i}",
                "prompt": f"Find it ({i}).",
            },
        }
        for i in range(n)
    ]
    done = {"toolCalls": [{"name": "complete", "arguments": {"summary": "all found"}}]}
    return json.dumps(
        {
            "scripts": [
                {"when": ORCHESTRATOR, "turns": [{"toolCalls": calls}, done]},
                {"when": "Role: explorer", "turns": SUBAGENT_TURNS},
            ]
        }
    )


def _ms(ns: float) -> float:
    return ns / 1e6


async def fanout_group(res: Results, rounds: int, workspace: str, n: int = FAN_OUT) -> None:
    s: defaultdict[str, list[float]] = defaultdict(list)
    explorer = next(d for d in builtin_registry() if d.type == "explorer").to_wire()
    bare_model = ScriptedModel.from_json(json.dumps(SUBAGENT_TURNS))
    level = choose_level("auto").level

    async def bare(sup: Supervisor) -> None:
        results = []

        async def one(i: int) -> None:
            results.append(
                await sup.run(
                    f"Find it ({i}).", agent=explorer, workspace=workspace, model=bare_model
                )
            )

        t0 = time.perf_counter_ns()
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        s["context.fanout_bare"].append(_ms(time.perf_counter_ns() - t0))
        assert len(results) == n and all(r.success for r in results), results

    async def delegated(sup: Supervisor) -> None:
        watch = Stopwatch(_book(n), clock=time.perf_counter_ns)
        done = await sup.orchestrate("Go.", model=watch, workspace=workspace, max_concurrent=n)
        assert done.success, done.result
        assert len(done.tasks) == n, done.tasks
        assert all(t.output.status == "completed" for t in done.tasks), done.tasks
        assert len(done.ledger.records) == n, done.ledger.records
        assert watch.answered is not None and watch.next_request is not None
        took = watch.next_request - watch.answered
        s["tether.fanout"].append(_ms(took))
        s["tether.fanout_rate"].append(n / (took / 1e9))

    async with Supervisor() as sup:
        for rnd in range(rounds + 1):  # round 0 starts the zygote and warms up; dropped
            steps = (bare, delegated) if rnd % 2 else (delegated, bare)
            for step in steps:
                await step(sup)
            if rnd == 0:
                s.clear()
    res.add(
        Figure(
            "context.fanout_bare",
            f"{n} bare `Supervisor.run` of a tiny sub-agent started together",
            "ms",
            s["context.fanout_bare"],
            f"{n} `sup.run()` of the explorer's wire definition (the sub-agent system prompt) in "
            "one task group, each a scripted two-turn run (`list_dir`, then `complete`) through "
            f"the zygote, isolation `{level}`; from the first start to the last result; in turn "
            "with the delegated fan-out, one supervisor",
        )
    )
    res.add(
        Figure(
            "tether.fanout",
            f"one orchestrator turn of {n} task calls, each a tiny sub-agent",
            "ms",
            s["tether.fanout"],
            f"`sup.orchestrate()` whose scripted orchestrator makes {n} `task` calls to explorers "
            f"in one turn (`max_concurrent={n}`), the same sub-agents as the bare runs; from its "
            "model's answer holding the calls to its next request holding the results: each "
            "call forwarded by the child, the gate (budget, admission, the run, the ledger "
            "record, `subagent.*` events, artifacts checked again as delivered), the results "
            "appended by the child",
            floor="context.fanout_bare",
        )
    )
    res.add(
        Figure(
            "tether.fanout_rate",
            f"sub-agent runs per second, end to end, {n} at a time",
            "runs/s",
            s["tether.fanout_rate"],
            f"{n} over the fan-out's time (each sub-agent spawned, run for two turns, disposed "
            "and its result delivered to the orchestrator's model)",
        )
    )
