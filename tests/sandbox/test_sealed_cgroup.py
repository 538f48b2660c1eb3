"""A sandboxed child is sealed in its cgroup: nothing of its tree can leave it (Landlock allows
no write to any `cgroup.procs`, seccomp refuses `clone3` and so `CLONE_INTO_CGROUP`), so its
dispose takes a v2 cgroup's `populated 0` as the whole answer and skips the scans of /proc
for its session and tree marker. Anything less than the whole guarantee keeps the scans."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from sandbox_targets import config, needs_sandbox, run_bash

from tether.parent.process import supervised
from tether.parent.process.cgroups import ChildCgroup, cgroupfs_mount_points
from tether.parent.process.host import Host
from tether.parent.process.launchers import Local, resolve_launcher
from tether.parent.process.spawn import sealed_in_cgroup
from tether.parent.supervisor import Supervisor

pytestmark = pytest.mark.anyio
SPAWNERS = pytest.mark.parametrize("spawner", ["exec", "zygote"])

V2 = ChildCgroup(Host("hybrid", {}), {"unified": Path("/sys/fs/cgroup/unified/x")})
V1_ONLY = ChildCgroup(Host("cgroup1", {}), {"memory": Path("/sys/fs/cgroup/memory/x")})
PLAN: dict[str, Any] = {
    "level": "sandbox",
    "abi": 4,
    "seccomp": True,
    "workspace": "/srv/work",
    "writes": ["/tmp", "/var/tmp", "/dev/shm"],
    "home": "/tmp/home",
}


def no_cgroupfs() -> list[str]:
    return []


def sealed(plan: dict[str, Any], **kwargs: Any) -> bool:
    args: dict[str, Any] = {"cgroup": V2, "launcher": None, "mounts": no_cgroupfs, **kwargs}
    return sealed_in_cgroup(args["cgroup"], plan, args["launcher"], args["mounts"])


def test_a_local_child_under_landlock_and_seccomp_with_a_v2_cgroup_is_sealed() -> None:
    assert sealed(PLAN)
    assert sealed(PLAN, launcher=Local())


@pytest.mark.parametrize(
    "change",
    [
        {"level": "process"},
        {"seccomp": False},
        {"abi": 0},
        {"abi": None},
        {"writes": ["/tmp", "/sys/fs/cgroup/unified"]},
        {"workspace": "/"},
    ],
    ids=["process level", "no seccomp", "no landlock", "no abi", "writes cgroupfs", "writes /"],
)
def test_a_plan_short_of_the_whole_guarantee_is_not_sealed(change: dict[str, Any]) -> None:
    mounts = ["/sys/fs/cgroup/unified"]
    assert not sealed({**PLAN, **change}, mounts=lambda: mounts)


def test_a_child_without_a_plan_a_v2_cgroup_or_on_another_launcher_is_not_sealed() -> None:
    assert not sealed_in_cgroup(V2, None, None, no_cgroupfs)
    assert not sealed_in_cgroup(None, PLAN, None, no_cgroupfs)
    assert not sealed_in_cgroup(V1_ONLY, PLAN, None, no_cgroupfs)
    assert not sealed(PLAN, launcher=resolve_launcher("pidns"))


def test_a_cgroup_filesystem_inside_a_granted_path_unseals_the_child() -> None:
    assert not sealed(PLAN, mounts=lambda: ["/srv/work/cg"])  # mounted inside the workspace
    assert not sealed(PLAN, mounts=lambda: ["/srv"])  # the workspace is inside one
    assert sealed(PLAN, mounts=lambda: ["/srv/other"])


def test_the_hosts_cgroup_filesystems_are_read_from_mountinfo() -> None:
    points = cgroupfs_mount_points()
    with open("/proc/self/mountinfo") as f:
        listed = [line.split(" - ")[1].split()[0] for line in f]
    assert len(points) == sum(kind in ("cgroup", "cgroup2") for kind in listed)
    assert all(os.path.isabs(point) for point in points)


def _scans(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every `tree_procs` call the supervised child makes, by whether it scans all of /proc."""
    calls: list[bool] = []
    real = supervised.tree_procs

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(bool(kwargs.get("thorough", True)))
        return real(*args, **kwargs)

    monkeypatch.setattr(supervised, "tree_procs", spy)
    return calls


DAEMON = "setsid sh -c 'sleep 300 & echo $! > daemon.pid' && sleep 0.2 && cat daemon.pid"
"""A grandchild that leaves the session and outlives the child."""


async def run_daemon(sup: Supervisor, workspace: Path, level: str) -> int:
    """A run whose child leaves `DAEMON` behind: the daemon's pid, which must be gone once it
    is over."""
    with anyio.fail_after(120):
        result, out = await run_bash(sup, workspace, DAEMON, level=level)
    assert result.success, result.message
    return int(out.splitlines()[-1])


@SPAWNERS
@pytest.mark.parametrize(
    ("isolation", "scanned"),
    [pytest.param("sandbox", False, marks=needs_sandbox), ("process", True)],
    ids=["sandboxed: the empty cgroup is trusted", "process level: /proc is scanned"],
)
async def test_a_childs_dispose_scans_proc_only_when_its_tree_could_have_left_its_cgroup(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spawner: str,
    isolation: str,
    scanned: bool,
    thread_runs: Callable[[int], bool],
) -> None:
    """Either way the daemon the child left behind is gone when the run is over."""
    scans = _scans(monkeypatch)
    async with Supervisor(config(spawner=spawner, isolation=isolation)) as sup:
        if not scanned and sup.host.tier not in ("hybrid", "cgroup2"):
            pytest.skip(f"the {sup.host.tier} tier gives a child no v2 cgroup to trust")
        assert not thread_runs(await run_daemon(sup, tmp_path, isolation))
    assert (True in scans) == scanned, scans
