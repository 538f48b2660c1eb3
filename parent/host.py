"""What this host offers for containment, detected once per process: the one place tiers are
probed and chosen.

Each tier is probed by looking at this process's own cgroups (/proc/self/cgroup) and where it
may create children:

- cgroup v2 (`cgroup2`): a subtree of the unified hierarchy we can write to, whose children
  really get the `memory` and `pids` controllers;
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
    """`cgroup2`, `cgroup1` or `process-group`."""
    parents: dict[str, Path] = field(default_factory=dict)
    """Where per-child cgroups go: controller (`unified` on v2) → writable parent directory."""
    why: str = ""
    """Why a cgroup tier is not available, when it is not."""

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


TIERS = ("cgroup2", "cgroup1", "process-group")
"""Every containment tier, most complete first."""


def _probe_v2(own: dict[str, str]) -> Host:
    unified_mount = ROOT if (ROOT / "cgroup.controllers").exists() else ROOT / "unified"
    if "unified" not in own or not (unified_mount / "cgroup.controllers").exists():
        return Host("cgroup2", why="no cgroup v2 hierarchy is mounted for this process")
    base = unified_mount / own["unified"].lstrip("/")
    controllers = (unified_mount / "cgroup.controllers").read_text().split()
    if not {"memory", "pids"} <= set(controllers):
        have = " ".join(controllers) or "none"
        return Host(
            "cgroup2",
            why=f"the cgroup v2 hierarchy at {unified_mount} has no memory and pids "
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


def _probe_v1(own: dict[str, str]) -> Host:
    parents: dict[str, Path] = {}
    for controller in ("memory", "pids", "freezer"):
        if controller not in own:
            continue
        base = ROOT / controller / own[controller].lstrip("/")
        if base.is_dir() and _writable_dir(base):
            parents[controller] = base
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
    for tier in ("cgroup2", "cgroup1"):
        got = probes.get(tier) or probe(tier)
        if available(got):
            return got
        reasons.append(f"{tier}: {got.why}")
    return Host("process-group", {}, why="; ".join(reasons))


_hosts: dict[str, Host] = {}


def host(containment: str = "auto") -> Host:
    """The containment tier `containment` names (`auto`: the most complete this host offers),
    detected once per process; the first call also sweeps cgroups left behind by supervisors
    that were killed. Raises `ValueError` for an unknown tier or one this host does not offer."""
    if not _hosts:
        from tether.parent.cgroups import sweep_stale

        probes = {tier: probe(tier) for tier in TIERS}
        for got in probes.values():
            if got.parents:
                sweep_stale(got)
        _hosts.update(probes)
        _hosts["auto"] = choose(probes)
    if containment not in _hosts:
        raise ValueError(f"containment {containment!r}: expected auto or one of {', '.join(TIERS)}")
    got = _hosts[containment]
    if not available(got):
        raise ValueError(f"containment {containment!r} is not available on this host: {got.why}")
    return got
