"""Many live children at once through the zygote, in a process of its own.

`python -m benchmarks.fleet --children 256` raises the descriptor limit as a `Supervisor` does
when it starts, starts a zygote, then forks that many tether children from it, each spawned
and held the way `Supervisor` holds a child (`spawn_child`: a cgroup of its own on a cgroup
tier; the child's context: reader, stderr drain, exit watch), and prints one JSON object:

    ready_s      from just before the first spawn to the last `initialize` answered (the
                 children are forked one after another and boot in parallel; then every
                 `initialize` is sent at once)
    ping_us      every `ping` round trip, in µs: `--rounds` rounds, each pinging every child
                 once, one at a time, while all of them are alive
    uss_mib      each idle child's USS (psutil `memory_full_info()`)
    ping_one_us  as many pings to one child alone, before the others are spawned
    dispose_s    from just before every child's `dispose()` is started at once to the last
                 one returning (shutdown rung, exit, sweep, reap)
    survivors    children (and processes of their trees) alive after the dispose
    *_cpu_s      the CPU time this process (the supervisor's side) spent in a phase, and
                 the children's own CPU time over their whole lives (from their rusage)
    reached      how many children were live at once (fewer than asked when memory ran low
                 or the time guard fired; see `stopped`)

Guarded so it cannot hang: the spawning stops when the host's available memory falls under
`--reserve-mib` or after `--spawn-seconds`, every phase has a deadline, and whatever was
spawned is disposed on every path.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from typing import Any

import anyio
import psutil

from tether.parent.process.config import ChildConfig
from tether.parent.process.env import build_child_env
from tether.parent.process.host import host
from tether.parent.process.limits import Limits, raise_open_files_limit
from tether.parent.process.proc import SpawnError
from tether.parent.process.spawn import spawn_child
from tether.parent.process.supervised import SupervisedChild
from tether.parent.process.zygote import Zygote, ZygoteSpawner
from tether.protocol.messages import PROTOCOL_VERSION, InitializeParams, PeerInfo

MIB = 1 << 20


async def fleet(n: int, rounds: int, reserve_mib: int, spawn_seconds: float) -> dict[str, Any]:
    raise_open_files_limit()
    zygote = await Zygote.start(build_child_env(os.environ))
    cfg = ChildConfig()
    tier = host()
    children: list[SupervisedChild] = []
    ready: list[SupervisedChild] = []
    out: dict[str, Any] = {"asked": n, "stopped": ""}

    spawner = ZygoteSpawner(lambda: zygote, skip=len(cfg.command))

    async def handshake(child: SupervisedChild) -> None:
        await child.session.initialize(
            InitializeParams(protocol_version=PROTOCOL_VERSION, client_info=PeerInfo(name="b"))
        )
        child.ready = True
        ready.append(child)

    try:
        # The same pings to one live child alone, first: the figure to read the fleet's
        # against (a loaded machine slows both alike).
        async with await spawn_child(cfg, Limits(), tier, "fleet", spawner=spawner) as alone:
            await handshake(alone)
            ready.clear()
            one: list[float] = []
            for _ in range(rounds * n):
                t = time.perf_counter_ns()
                await alone.session.ping()
                one.append((time.perf_counter_ns() - t) / 1e3)
            out["ping_one_us"] = one
        async with contextlib.AsyncExitStack() as stack:
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            for _ in range(n):
                if time.perf_counter() - t0 > spawn_seconds:
                    out["stopped"] = f"spawning stopped after {spawn_seconds:g} s"
                    break
                if psutil.virtual_memory().available < reserve_mib * MIB:
                    out["stopped"] = f"spawning stopped: under {reserve_mib} MiB free"
                    break
                try:
                    child = await spawn_child(cfg, Limits(), tier, "fleet", spawner=spawner)
                except SpawnError as exc:
                    out["stopped"] = f"spawning stopped: {exc}"
                    break
                await stack.enter_async_context(child)
                children.append(child)
            out["spawned_s"] = time.perf_counter() - t0
            out["spawn_cpu_s"] = time.process_time() - cpu0
            # The children boot in parallel while later ones are forked; then every handshake
            # is sent at once (each child's context is entered first: its reader runs).
            with anyio.move_on_after(60) as guard:
                async with anyio.create_task_group() as tg:
                    for child in children:
                        tg.start_soon(handshake, child)
            out["ready_s"] = time.perf_counter() - t0
            out["ready_cpu_s"] = time.process_time() - cpu0
            if guard.cancelled_caught:
                out["stopped"] += " (handshakes cut by the time guard)"
            out["reached"] = len(ready)
            pings: list[float] = []
            with anyio.move_on_after(60):
                for _ in range(rounds):
                    for child in ready:
                        t = time.perf_counter_ns()
                        await child.session.ping()
                        pings.append((time.perf_counter_ns() - t) / 1e3)
            out["ping_us"] = pings
            out["uss_mib"] = [_uss(c.pid) for c in ready]
            t1 = time.perf_counter()
            cpu1 = time.process_time()
            with anyio.CancelScope(shield=True), anyio.move_on_after(60):
                async with anyio.create_task_group() as tg:
                    for child in children:
                        tg.start_soon(child.dispose)
            out["dispose_s"] = time.perf_counter() - t1
            out["dispose_cpu_s"] = time.process_time() - cpu1
            out["rungs"] = sorted({c.disposed.rung for c in children if c.disposed})
    finally:
        with anyio.CancelScope(shield=True):
            await zygote.aclose()
    left = {p for c in children if c.disposed for p in c.disposed.survivors}
    left |= {c.pid for c in children if _alive(c.pid)}
    out["survivors"] = sorted(left)
    out["children_cpu_s"] = sum(c.observed.cpu_seconds or 0.0 for c in children)
    return out


def _uss(pid: int) -> float:
    try:
        return float(psutil.Process(pid).memory_full_info().uss) / MIB
    except psutil.Error:
        return 0.0


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--children", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reserve-mib", type=int, default=2048)
    ap.add_argument("--spawn-seconds", type=float, default=60.0)
    args = ap.parse_args()
    got = anyio.run(
        fleet, args.children, args.rounds, args.reserve_mib, args.spawn_seconds, backend="asyncio"
    )
    print(json.dumps(got))


if __name__ == "__main__":
    main()
