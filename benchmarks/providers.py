"""The providers group of `scripts/bench`: one whole scripted run through each of `spawn`,
`fork`, `inprocess` and `acp`, each beside a floor measured in the same rounds.

Per round, interleaved: a bare `python -I -c pass` spawn to exit and a bare `python -c "import
acp"` spawn to exit (the ACP agent's own start-up, which no driver can avoid); the tether
runtime and a parent endpoint talking over in-memory pipes with no supervisor (initialize,
`agent/run`, one model turn, `complete`: what the in-process provider cannot avoid); then one
`Supervisor.run` through each provider, the supervisor's default isolation level, one supervisor
for the whole group (its model gateway started in the dropped round 0).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio

from benchmarks.report import Figure, Results
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.isolation import choose_level
from tether.parent.supervisor import Supervisor

ROOT = Path(__file__).resolve().parents[1]
ACP_AGENT = ROOT / "tests" / "children" / "acp_agent.py"
ONE_TURN = '[{"text": "done", "toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]}]'
PROVIDERS = ("spawn", "fork", "inprocess", "acp")


def _ms(ns: int) -> float:
    return ns / 1e6


def _floor_python(s: defaultdict[str, list[float]]) -> None:
    t0 = time.perf_counter_ns()
    subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
    s["floor.provider_python"].append(_ms(time.perf_counter_ns() - t0))
    t0 = time.perf_counter_ns()
    subprocess.run([sys.executable, "-c", "import acp"], check=True)
    s["floor.acp_import"].append(_ms(time.perf_counter_ns() - t0))


async def _bare_in_memory_run(workspace: str) -> None:
    """The runtime and a parent endpoint over memory pipes, no supervisor, no provider."""
    from tether.child.server import serve_streams
    from tether.parent.run.broker import Broker, RunModels
    from tether.protocol.connection import Connection
    from tether.protocol.messages import (
        PROTOCOL_VERSION,
        AgentDefinition,
        AgentRunParams,
        InitializeParams,
        PeerInfo,
    )
    from tether.wire import Endpoint
    from tether.wire.child_session import ChildSession
    from tether.wire.in_memory import serve_in_memory

    broker = Broker("bare", RunModels(main=ScriptedModel.from_json(ONE_TURN)), None, lambda e: None)
    async with serve_in_memory(serve_streams) as peer:
        endpoint = Endpoint(
            Connection("parent"),
            peer.receive,
            peer.send,
            on_request=broker.on_request,
            on_notification=broker.on_notification,
            strict=True,
        )
        session = ChildSession(endpoint)
        async with anyio.create_task_group() as tg:
            tg.start_soon(endpoint.run)
            await session.initialize(
                InitializeParams(protocol_version=PROTOCOL_VERSION, client_info=PeerInfo(name="b"))
            )
            got = await session.run(
                AgentRunParams(
                    run_id="bare", prompt="bench", workspace=workspace, agent=AgentDefinition()
                )
            )
            assert got.success, got.message
            await peer.close_input()
            await peer.stopped.wait()
            tg.cancel_scope.cancel()


async def providers_group(res: Results, rounds: int, workspace: str) -> None:
    s: defaultdict[str, list[float]] = defaultdict(list)
    acp = f"acp:{sys.executable} {ACP_AGENT}"
    steps = json.dumps([{"say": "ok"}])
    level = choose_level("auto").level
    async with Supervisor() as sup:
        caller = await sup.start(
            "the caller", model=ScriptedModel.from_json(ONE_TURN), workspace=workspace
        )
        assert (await caller.result()).success
        for rnd in range(rounds + 1):  # round 0 warms caches and starts the gateway: dropped
            _floor_python(s)
            t0 = time.perf_counter_ns()
            await _bare_in_memory_run(workspace)
            s["floor.inmemory_run"].append(_ms(time.perf_counter_ns() - t0))
            for name in PROVIDERS:
                kwargs: dict[str, Any] = {"model": ScriptedModel.from_json(ONE_TURN)}
                prompt = "bench"
                if name == "fork":
                    kwargs["fork_from"] = caller
                if name == "acp":
                    prompt = steps
                t0 = time.perf_counter_ns()
                got = await sup.run(
                    prompt, workspace=workspace, provider=acp if name == "acp" else name, **kwargs
                )
                took = _ms(time.perf_counter_ns() - t0)
                assert got.success, (name, got.message)
                s[f"providers.{name}"].append(took)
            if rnd == 0:
                for samples in s.values():
                    samples.clear()
    _figures(res, s, level)


def _figures(res: Results, s: defaultdict[str, list[float]], level: str) -> None:
    res.add(
        Figure(
            "floor.provider_python",
            "`python -I -c pass`, spawn to exit (providers group)",
            "ms",
            s["floor.provider_python"],
            "from just before `subprocess.run` to its return, interleaved with the provider runs",
        )
    )
    res.add(
        Figure(
            "floor.acp_import",
            '`python -c "import acp"`, spawn to exit',
            "ms",
            s["floor.acp_import"],
            "the ACP package's import, which every Python ACP agent pays at start-up",
        )
    )
    res.add(
        Figure(
            "floor.inmemory_run",
            "one run of the runtime over memory pipes, no supervisor",
            "ms",
            s["floor.inmemory_run"],
            "`serve_streams` and a parent `Endpoint` over two `memory_pipe`s: initialize, "
            "`agent/run`, one scripted `model/complete`, `complete`, the result, end of input",
        )
    )
    common = (
        "`Supervisor.run` of a one-turn run (scripted model) from the call to its return; "
        f"isolation level {level} where the provider has one"
    )
    res.add(
        Figure(
            "providers.spawn",
            "whole run through `spawn`",
            "ms",
            s["providers.spawn"],
            f"{common}: spawn, handshake, `agent/run`, `model/complete`, `complete`, dispose",
            floor="floor.provider_python",
        )
    )
    res.add(
        Figure(
            "providers.fork",
            "whole run through `fork`",
            "ms",
            s["providers.fork"],
            f"{common}, seeded with an earlier run's completed turns (`fork_from=`)",
            floor="providers.spawn",
        )
    )
    res.add(
        Figure(
            "providers.inprocess",
            "whole run through `inprocess`",
            "ms",
            s["providers.inprocess"],
            f"{common}: the runtime served inside the supervisor's process (no isolation)",
            floor="floor.inmemory_run",
        )
    )
    res.add(
        Figure(
            "providers.acp",
            "whole run through `acp` (the Python test agent)",
            "ms",
            s["providers.acp"],
            f"{common}: tests/children/acp_agent.py spawned through the seam (a private network "
            "namespace with the gateway's socket under a root sandbox), initialize, "
            "session/new, session/prompt, one message, the ladder (close stdin)",
            floor="floor.acp_import",
        )
    )
