"""A real two-node Ray cluster on loopback for the scale-out tests, and a reaper that knows it.

The cluster (head + one more node, one CPU each, an 80 MiB object store) is started once for
the module that asks for it and ended with it; every Ray process it started must be gone
afterwards. All of its traffic stays on 127.0.0.1: Ray would otherwise pick the machine's
external address (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` keeps `127.0.0.1` as given), and
`assert_loopback_only` checks every listening socket of every process of the cluster.

The workers run with Ray's subreaper flag on, which sets SIGCHLD to SIG_IGN in them: the trap
the node host must undo (`test_a_crash_on_a_node_reads_as_the_same_crash`).

The root `reaper` fails a test that leaves any process of its own; here the cluster's own
processes live across tests, so this directory's `reaper` fails a test that leaves a *tether*
process (a child, its shim or trampoline, a keeper) or a live actor instead, and the cluster
fixture checks on its way out that nothing of the cluster is left at all.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

NODE_ARGS: dict[str, Any] = {
    "num_cpus": 1,
    "object_store_memory": 80 * 1024 * 1024,
    "node_ip_address": "127.0.0.1",
}
# Ray reads this once, when it is imported: with it, an address of 127.0.0.1 stays 127.0.0.1;
# without it, Ray swaps in the machine's external address. Set before anything imports ray.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # nothing is reported anywhere
CLUSTER_ENV = {
    "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper": "true",
    # Notice a dead node in seconds, not half a minute (the raylet-kill test).
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
TETHER_MARKS = ("_trampoline.py", "_pidns.py", "_keeper.py", "tether.child", "tests/children")


@dataclass
class RayCluster:
    cluster: Any
    head: str
    """The head node's id (the driver's node)."""
    worker: str
    """The second node's id."""
    worker_node: Any
    """The second node's process handle (`ray._private.node.Node`), for the fault tests."""

    @property
    def nodes(self) -> list[str]:
        return [self.head, self.worker]


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def cluster_processes() -> list[psutil.Process]:
    """Every descendant of this test process (the cluster's and anything they started)."""
    return psutil.Process().children(recursive=True)


def assert_loopback_only() -> int:
    """No process of the cluster listens on a non-loopback address; returns how many
    listening sockets were checked (a check that saw none would prove nothing)."""
    seen = 0
    for p in [psutil.Process(), *cluster_processes()]:
        try:
            conns = p.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                seen += 1
                assert is_loopback(c.laddr.ip), f"{p.pid} {p.name()} listens on {c.laddr}"
            elif c.raddr:
                assert is_loopback(c.raddr.ip), f"{p.pid} {p.name()} talks to {c.raddr}"
    return seen


def sigchld_ignored(pid: int | str = "self") -> bool:
    """Whether SIGCHLD is ignored in a process (its `SigIgn` mask, as the kernel has it)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGCHLD - 1) & 1)
    return False


def tether_processes() -> list[psutil.Process]:
    """Descendants that are tether's (a child, shim, trampoline or keeper), not Ray's."""
    found = []
    for p in cluster_processes():
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())
            marked = any(m in cmd for m in TETHER_MARKS)
            if not marked:
                with contextlib.suppress(psutil.AccessDenied):
                    marked = "TETHER_TREE" in p.environ()
            if marked:
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def live_actors() -> list[dict[str, Any]]:
    import ray

    # The GCS's actor table (the state API needs the dashboard, which is not started here).
    table = ray._private.state.actors()
    return [a for a in table.values() if a.get("State") not in ("DEAD",)]


def wait_until(predicate: Any, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    assert not ray_constants.ENABLE_RAY_CLUSTER, "ray was imported before 127.0.0.1 was kept"
    # The cluster's processes inherit these at their start; the driver (this process) must
    # not: under the subreaper flag, SIGCHLD would be ignored here too.
    saved = {k: os.environ.get(k) for k in CLUSTER_ENV}
    os.environ.update(CLUSTER_ENV)
    cluster = None
    try:
        cluster = Cluster(
            initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False}
        )
        worker_node = cluster.add_node(**NODE_ARGS)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        ray.init(address=cluster.address, logging_level="warning", log_to_driver=False)
        cluster.wait_for_nodes()
        head = ray.get_runtime_context().get_node_id()
        nodes = [n for n in ray.nodes() if n["Alive"]]
        assert len(nodes) == 2
        assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
        worker = next(n["NodeID"] for n in nodes if n["NodeID"] != head)
        assert assert_loopback_only() > 0
        assert not sigchld_ignored(), "joining the cluster made this process ignore SIGCHLD"
        yield RayCluster(cluster, head, worker, worker_node)
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        cluster.shutdown()
        left = cluster_processes()
        if not wait_until(lambda: not [p for p in cluster_processes() if _alive(p)], 10.0):
            left = [p for p in cluster_processes() if _alive(p)]
            for p in left:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            pytest.fail(f"the cluster left processes: {[p.pid for p in left]}")


def _alive(p: psutil.Process) -> bool:
    try:
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def reaper(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it left a tether process or a live actor on the cluster."""
    yield
    if "ray_cluster" not in request.fixturenames:
        return
    if not wait_until(lambda: not tether_processes(), 5.0):
        left = tether_processes()
        described = []
        for p in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                described.append(f"{p.pid} {p.cmdline()!r}")
                p.kill()
        pytest.fail("tether processes left behind: " + "; ".join(described))
    if not wait_until(lambda: not live_actors(), 10.0, 0.2):
        pytest.fail(f"actors left behind: {live_actors()}")
