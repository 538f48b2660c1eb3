"""What joining a child's cgroup costs on this host, and how to make it cheap (`tether doctor`).

Every child joins a cgroup of its own before its first line runs: the trampoline (cold spawn)
or the forked child (zygote) writes its pid to `cgroup.procs`. The kernel serialises every
migration between cgroups on one global per-CPU rwsem, and unless the cgroup2 hierarchy is
mounted with `favordynmods` taking it for writing waits for an RCU grace period: 7 to 30 ms on a
busy 2-core VM, most of a zygote spawn (the fork itself is ≈ 1 ms). With `favordynmods`
(kernel 6.0+) the same join takes ≈ 0.5 ms, at a small cost to every fork and exit on the
host. tether does not change host mounts itself; the doctor measures the join and says how.

tether keeps the wait off the usual paths: the zygote's standby joins a cgroup made for it
ahead of the request (`Zygote.child_cgroup`), and an unsandboxed child run in place by its
trampoline joins while its runtime imports (`tether.contain.inplace`). It stays on the path of
a sandboxed cold spawn (the sandbox needs a single-threaded process, after the join), of a
zygote child forked on request (spawns back to back, before a standby has parked), and of
every `command=` child.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from tether.parent.process.cgroups import ChildCgroup
from tether.parent.process.host import Host

SLOW_JOIN_MS = 2.0
"""A join slower than this is waiting for a grace period (with `favordynmods`: ≈ 0.5 ms)."""
SAMPLES = 3
_JOIN = (
    "import sys, time\n"
    "t = time.perf_counter_ns()\n"
    "for path in sys.argv[1:]:\n"
    "    with open(path, 'w') as f:\n"
    "        f.write('0')\n"
    "print(time.perf_counter_ns() - t)\n"
)


def cgroup2_mount(mountinfo: str | None = None) -> tuple[str, set[str]] | None:
    """Where the cgroup2 hierarchy is mounted and its super-block options, or `None`
    (`mountinfo`: the text of /proc/self/mountinfo, read when not given)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] == "cgroup2":
            return fields[4], set(tail[2].split(","))
    return None


def kernel_features() -> set[str]:
    try:
        return set(Path("/sys/kernel/cgroup/features").read_text().split())
    except OSError:
        return set()


def advice(
    join_ms: float | None, mount: tuple[str, set[str]] | None, features: set[str]
) -> str | None:
    """What to do about a slow join, or `None` when there is nothing to do (pure)."""
    if join_ms is None or join_ms < SLOW_JOIN_MS:
        return None
    if mount is None:
        return (
            f"each child's cgroup join takes {join_ms:.1f} ms here (an RCU grace period on "
            "the v1 hierarchies); a cgroup2 mount with favordynmods would make it ≈ 0.5 ms"
        )
    where, options = mount
    if "favordynmods" in options:
        return None  # already favoured: the join is slow for another reason (load)
    if "favordynmods" not in features:
        return (
            f"each child's cgroup join takes {join_ms:.1f} ms here (an RCU grace period); "
            "kernels 6.0+ make it ≈ 0.5 ms with the cgroup2 mount option favordynmods"
        )
    return (
        f"each child's cgroup join takes {join_ms:.1f} ms here (an RCU grace period, on the "
        "path of sandboxed cold spawns, back-to-back zygote spawns and command= children); "
        f"`mount -o remount,favordynmods {where}` makes it ≈ 0.5 ms, at a small cost "
        "to every fork and exit on the host"
    )


def measure(host: Host, samples: int = SAMPLES) -> float | None:
    """Median milliseconds a fresh process takes to join a fresh cgroup on `host`'s tier
    (every hierarchy a child joins), or `None` where the tier has no cgroups or the probe
    fails."""
    if not host.parents:
        return None
    try:
        cg = ChildCgroup.create(
            host, f"doctor-{os.getpid()}-{uuid.uuid4().hex[:6]}", memory=None, pids=None
        )
    except OSError:
        return None
    try:
        got = [_join_once(cg.procs_files) for _ in range(samples)]
    finally:
        cg.remove()
    times = [t for t in got if t is not None]
    return statistics.median(times) if times else None


def _join_once(procs: Sequence[str]) -> float | None:
    try:
        out = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _JOIN, *procs],
            capture_output=True,
            timeout=10,
            check=True,
        )
        return int(out.stdout) / 1e6
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def report(host: Host) -> dict[str, object]:
    join_ms = measure(host)
    mount = cgroup2_mount()
    out: dict[str, object] = {
        "joinMs": None if join_ms is None else round(join_ms, 2),
        "favordynmods": mount is not None and "favordynmods" in mount[1],
    }
    tip = advice(join_ms, mount, kernel_features())
    if tip is not None:
        out["advice"] = tip
    return out
