"""Scale-out through Ray beside the local supervisor: one brokered run, and many children.

`python -m benchmarks.ray_scale --children 256 --runs 20` starts a two-node Ray cluster on
loopback in this process (head + one node, one CPU each, an 80 MiB object store: what the
tests use), and measures, all with the real tether child and a one-turn scripted model whose
turn is brokered by the driver:

- `run`: one `await sup.run(...)` (spawn, handshake, the brokered `model/complete`, result,
  dispose), through `RayPlacement` on the second node and through a local `Supervisor`,
  interleaved (`--runs` of each, one of each per round);
- `swarm`: `--children` runs started at once and awaited, from the first `start()` to the last
  result, over both nodes (`per_node` = half of them) and, for comparison, locally;
- memory: while each swarm runs, a summed PSS is sampled every 0.2 s; its peak, minus the same
  sum taken just before, is what the swarm cost. Over Ray, the sum is of this process and every
  descendant (the cluster's processes, the host actors, the children); locally, of this process
  and the processes the swarm started (the zygote, the children), since the cluster's own
  processes are no part of a local swarm. Each baseline waits for the tree to settle first
  (`settle`). Also the idle cluster's PSS, and this process's VmHWM.

Prints one JSON object; `benchmarks/bench.py` turns it into figures when Ray is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Ray reads this when it is imported: keep every address on 127.0.0.1 (see tests/placement).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import anyio
import psutil

from tether.parent import ChildConfig, Supervisor
from tether.parent.models.scripted import ScriptedModel

ONE_TURN = (
    b'[{"text": "done", "toolCalls": [{"name": "complete",'
    b' "arguments": {"summary": "ok", "paths": []}}]}]'
)
NODE_ARGS: dict[str, Any] = {
    "num_cpus": 1,
    "object_store_memory": 80 * 1024 * 1024,
    "node_ip_address": "127.0.0.1",
}
MIB = 1 << 20
SWARM_CONFIG = ChildConfig(handshake_timeout=120.0)
"""Hundreds of interpreters starting at once on a small shared machine can take longer than
the default 10 s to answer `initialize`; the swarm measures time, not that timeout."""


def _pss(pid: int) -> int:
    """One process's PSS in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree() -> list[int]:
    """This process and every live descendant."""
    me = psutil.Process()
    return [me.pid, *(p.pid for p in me.children(recursive=True))]


def tree_pss(skip: frozenset[int] = frozenset()) -> int:
    """Summed PSS of this process and every descendant not in `skip`: each shared page
    counted once, split among its sharers (RSS would count the interpreter's pages once per
    process)."""
    return sum(_pss(pid) for pid in _tree() if pid not in skip)


SETTLE_SECONDS = 15.0


def settle() -> None:
    """Wait (at most `SETTLE_SECONDS`) until the tree holds the same processes for 1.5 s: the
    previous phase's processes (a closed placement's host actors, a supervisor's children) are
    gone, so they are not in the baseline a phase's memory is measured from. A process that
    exits mid-phase after being counted in the baseline takes its memory off the peak: that
    is how a local swarm once read 0.04 MiB."""
    deadline = time.monotonic() + SETTLE_SECONDS
    last, steady_since = set(_tree()), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = set(_tree())
        if now != last:
            last, steady_since = now, time.monotonic()
        elif time.monotonic() - steady_since >= 1.5:
            return


@contextmanager
def peak_pss(*, new_only: bool = False) -> Iterator[dict[str, int]]:
    """Sample the tree's PSS every 0.2 s while the block runs; yields {"before", "peak"}.
    `new_only`: count this process and only the descendants the block starts (a local swarm:
    the cluster's processes, already there, are not its memory, and their own ups and downs
    are not either)."""
    settle()
    skip = frozenset(_tree()[1:]) if new_only else frozenset()
    out = {"before": tree_pss(skip), "peak": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            out["peak"] = max(out["peak"], tree_pss(skip))
            stop.wait(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join()
        out["peak"] = max(out["peak"], tree_pss(skip))


def vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


async def measure(children: int, runs: int, workspace: str, nodes: list[str]) -> dict[str, Any]:
    from tether.parent.placement import RayPlacement

    model = ScriptedModel.from_json(ONE_TURN)
    local_ms: list[float] = []
    ray_ms: list[float] = []
    async with Supervisor() as local, RayPlacement(nodes=[nodes[1]]) as remote:
        for _ in range(runs):
            for sup, into in ((local, local_ms), (remote, ray_ms)):
                t0 = time.perf_counter()
                result = await sup.run("bench", model=model, workspace=workspace)
                into.append((time.perf_counter() - t0) * 1000)
                if not result.success:
                    raise RuntimeError(f"a run failed: {result.message}")
    swarm: dict[str, Any] = {}
    per_node = max(1, (children + len(nodes) - 1) // len(nodes))
    for name in ("local", "ray"):
        with peak_pss(new_only=name == "local") as mem:
            t_open = time.perf_counter()
            placed: Any = (
                Supervisor(SWARM_CONFIG)
                if name == "local"
                else RayPlacement(SWARM_CONFIG, nodes=nodes, per_node=per_node)
            )
            async with placed:
                t0 = time.perf_counter()
                results = await _swarm(placed, children, model, workspace)
                seconds = time.perf_counter() - t0
                t_close = time.perf_counter()
            closed = time.perf_counter() - t_close
        ok = sum(r.success for r in results)
        if ok != children:
            failures = sorted({r.message for r in results if not r.success})[:3]
            raise RuntimeError(f"only {ok} of {children} {name} runs succeeded: {failures}")
        swarm[name] = {
            "seconds": seconds,
            "open_s": t0 - t_open,
            "close_s": closed,
            "pss_before_mib": mem["before"] / MIB,
            "pss_peak_mib": mem["peak"] / MIB,
        }
    return {"run_ms": {"local": local_ms, "ray": ray_ms}, "swarm": swarm}


async def _swarm(sup: Any, children: int, model: Any, workspace: str) -> list[Any]:
    handles = [await sup.start("bench", model=model, workspace=workspace) for _ in range(children)]
    return [await h.result() for h in handles]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--children", type=int, default=256)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    started = time.perf_counter()
    cluster = Cluster(
        initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False}
    )
    try:
        cluster.add_node(**NODE_ARGS)
        ray.init(address=cluster.address, logging_level="error", log_to_driver=False)
        cluster.wait_for_nodes()
        up = time.perf_counter() - started
        time.sleep(1.0)  # let the nodes' agents settle before the idle figure
        idle = tree_pss()
        head = ray.get_runtime_context().get_node_id()
        nodes = [head] + [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]
        with tempfile.TemporaryDirectory(prefix="tether-bench-") as ws:
            out = anyio.run(measure, args.children, args.runs, ws, nodes, backend="asyncio")
    finally:
        ray.shutdown()
        cluster.shutdown()
    out.update(
        children=args.children,
        cluster_start_s=up,
        cluster_idle_pss_mib=idle / MIB,
        driver_vm_hwm_mib=vm_hwm_kib() / 1024,
        run_median_ms={k: statistics.median(v) for k, v in out["run_ms"].items()},
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
