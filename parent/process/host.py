"""What this host offers for containment, detected once per process: the one place tiers are
probed and chosen.

Each tier is probed by looking at this process's own cgroups (/proc/self/cgroup) and where it
may create children:

- cgroup v2 (`cgroup2`): a subtree of the unified hierarchy we can write to, whose children
  really get the `memory` and `pids` controllers;
- `hybrid`: a writable subtree of the unified (v2) hierarchy *without* those controllers — the
  common hybrid layout, where they are bound to v1, or a v2 host that cannot delegate them.
  Each child gets a v2 cgroup for tracking and teardown (`cgroup.kill`, or `cgroup.freeze`
  then SIGKILL on kernels before 5.14; `cgroup.events` says when it is empty) and, for limits,
  cgroups in the v1 `memory` and `pids` hierarchies where those are writable (rlimits
  otherwise). `auto` prefers it to `cgroup1`: its limits come from the same v1 controllers, and
  its teardown is better (a kill no fork can outrun and no freezer wait, emptiness announced
  rather than polled);
- cgroup v1 (`cgroup1`): the `memory`, `pids` and `freezer` hierarchies, each under this
  process's own cgroup in that hierarchy;
- `process-group`: always available: rlimits, the process group, and a psutil walk.

`host(containment)` answers from the cache; its first call also sweeps cgroups left behind by
supervisors that were SIGKILLed (`cgroups.sweep_stale`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "tether-"


@dataclass(frozen=True)
class Host:
    """What this host offers for containment."""

    tier: str
    """`cgroup2`, `hybrid`, `cgroup1` or `process-group`."""
    parents: dict[str, Path] = field(default_factory=dict)
    """Where per-child cgroups go: controller (`unified` for the v2 hierarchy) → writable
    parent directory."""
    why: str = ""
    """Why a cgroup tier is not available, when it is not."""
    v2_files: frozenset[str] = frozenset()
    """The teardown files a child's v2 cgroup has here (`cgroup.kill`, `cgroup.freeze`,
    `cgroup.events`), as probed."""

    def enforces(self, controller: str) -> bool:
        """Whether per-child cgroups enforce this controller (`memory`, `pids`)."""
        return self.tier == "cgroup2" or controller in self.parents


def _own_cgroups() -> dict[str, str]:
    """Controller name (or `unified` for v2) → this process's cgroup path."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            out["unified"] = path
        for c in controllers.split(","):
            if c:
                out[c] = path
    return out


def _writable_dir(path: Path) -> bool:
    probe = path / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


TIERS = ("cgroup2", "hybrid", "cgroup1", "process-group")
"""Every containment tier, most complete first."""


def unified_mount() -> Path:
    """Where the unified (v2) hierarchy is mounted: /sys/fs/cgroup on a pure v2 host, its
    `unified` subdirectory on a hybrid one."""
    return ROOT if (ROOT / "cgroup.controllers").exists() else ROOT / "unified"


def _probe_v2(own: dict[str, str]) -> Host:
    mount = unified_mount()
    if "unified" not in own or not (mount / "cgroup.controllers").exists():
        return Host("cgroup2", why="no cgroup v2 hierarchy is mounted for this process")
    base = mount / own["unified"].lstrip("/")
    controllers = (mount / "cgroup.controllers").read_text().split()
    if not {"memory", "pids"} <= set(controllers):
        have = " ".join(controllers) or "none"
        return Host(
            "cgroup2",
            why=f"the cgroup v2 hierarchy at {mount} has no memory and pids "
            f"controllers (it has: {have}); they are bound to cgroup v1",
        )
    if not _writable_dir(base):
        return Host("cgroup2", why=f"cannot create cgroups under {base} (not root, no delegation)")
    # A child cgroup has memory.max and pids.max only when its parent enables the controllers
    # for its children, and v2 refuses that in a non-root cgroup that holds processes (ours).
    _enable_controllers(base)
    if not _children_get_controllers(base):
        return Host(
            "cgroup2",
            why=f"the memory and pids controllers cannot be enabled for child cgroups under "
            f"{base} (its cgroup.subtree_control): a cgroup that holds processes cannot hand "
            "controllers down; run the supervisor in a delegated cgroup of its own",
        )
    return Host("cgroup2", {"unified": base})


def _enable_controllers(base: Path) -> None:
    enabled = set((base / "cgroup.subtree_control").read_text().split())
    missing = {"memory", "pids"} - enabled
    if missing:
        with contextlib.suppress(OSError):
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))


def _children_get_controllers(base: Path) -> bool:
    probe = base / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / "memory.max").exists() and (probe / "pids.max").exists()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


V2_TEARDOWN = ("cgroup.kill", "cgroup.freeze")
"""What a v2 cgroup kills its members with: `cgroup.kill` (Linux 5.14+), else `cgroup.freeze`
(5.2+) and SIGKILL to each frozen member."""


def _probe_hybrid(own: dict[str, str]) -> Host:
    mount = unified_mount()
    if "unified" not in own or not (mount / "cgroup.controllers").exists():
        return Host("hybrid", why="no cgroup v2 (unified) hierarchy is mounted for this process")
    base = mount / own["unified"].lstrip("/")
    probe = base / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return Host("hybrid", why=f"cannot create cgroups under {base} (not root, no delegation)")
    try:
        files = {f for f in (*V2_TEARDOWN, "cgroup.events") if (probe / f).exists()}
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    if "cgroup.events" not in files or not files & set(V2_TEARDOWN):
        return Host(
            "hybrid",
            why=f"cgroups under {base} have no cgroup.events and cgroup.kill or cgroup.freeze "
            "(a kernel before 5.2)",
        )
    parents = {"unified": base, **_v1_parents(own, ("memory", "pids"))}
    return Host("hybrid", parents, v2_files=frozenset(files))


def _v1_parents(own: dict[str, str], controllers: tuple[str, ...]) -> dict[str, Path]:
    """The writable directories, one per v1 hierarchy, under this process's own cgroup."""
    parents: dict[str, Path] = {}
    for controller in controllers:
        if controller not in own:
            continue
        base = ROOT / controller / own[controller].lstrip("/")
        if base.is_dir() and _writable_dir(base):
            parents[controller] = base
    return parents


def _probe_v1(own: dict[str, str]) -> Host:
    parents = _v1_parents(own, ("memory", "pids", "freezer"))
    if "freezer" in parents or "pids" in parents:
        return Host("cgroup1", parents)
    return Host(
        "cgroup1", why="no writable cgroup v1 freezer or pids hierarchy (not root, or not mounted)"
    )


def probe(tier: str) -> Host:
    """What `tier` offers here; a tier that is not available has no parents and says `why`.
    The process-group tier is always available."""
    if tier == "cgroup2":
        return _probe_v2(_own_cgroups())
    if tier == "hybrid":
        return _probe_hybrid(_own_cgroups())
    if tier == "cgroup1":
        return _probe_v1(_own_cgroups())
    if tier == "process-group":
        return Host("process-group")
    raise ValueError(f"unknown containment tier {tier!r}; expected one of {', '.join(TIERS)}")


def available(host: Host) -> bool:
    return host.tier == "process-group" or bool(host.parents)


def choose(probes: dict[str, Host]) -> Host:
    """The most complete available tier among `probes` (tier → `probe(tier)`); when no cgroup
    tier is available, the process-group tier, saying why in `why`."""
    reasons = []
    for tier in TIERS[:-1]:
        got = probes.get(tier) or probe(tier)
        if available(got):
            return got
        reasons.append(f"{tier}: {got.why}")
    return Host("process-group", {}, why="; ".join(reasons))


_hosts: dict[str, Host] = {}


def host(containment: str = "auto") -> Host:
    """The containment tier `containment` names (`auto`: the most complete this host offers),
    detected once per process (what killed supervisors left behind is swept when a supervisor
    starts: `cgroups.sweep_stale_once`). Raises `ValueError` for an unknown tier or one this
    host does not offer."""
    if not _hosts:
        probes = {tier: probe(tier) for tier in TIERS}
        _hosts.update(probes)
        _hosts["auto"] = choose(probes)
    if containment not in _hosts:
        raise ValueError(f"containment {containment!r}: expected auto or one of {', '.join(TIERS)}")
    got = _hosts[containment]
    if not available(got):
        raise ValueError(f"containment {containment!r} is not available on this host: {got.why}")
    return got


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (another user's counts): what a name minted with a
    supervisor's pid (a cgroup, a scratch directory) is checked against before it is swept."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
