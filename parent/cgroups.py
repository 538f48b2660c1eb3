"""Per-child cgroups: the containment tier that sees every process a child starts.

Detection (`detect()`) looks at this process's own cgroups, as listed in /proc/self/cgroup, and
finds where it may create children:

- cgroup v2 (`cgroup2`): a subtree of the unified hierarchy we can write to, with the
  `memory` and `pids` controllers enabled for children where available;
- cgroup v1 (`cgroup1`): the `memory`, `pids` and `freezer` hierarchies, each under this
  process's own cgroup in that hierarchy;
- otherwise nothing: the supervisor falls back to rlimits, the process group and a psutil walk.

A child's cgroup is created before it is spawned and joined by the trampoline before the child's
first line runs, so nothing it does escapes it: a setsid + double-fork daemon is still a member.
Dispose kills by membership (`cgroup.kill` on v2; freeze, SIGKILL every member, thaw on v1),
then the cgroup is removed. Names carry the supervisor's pid, so cgroups left behind by a
supervisor that was SIGKILLed are found and swept at the next start (`sweep_stale`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
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


def detect() -> Host:
    """The most complete tier this host offers (what `containment="auto"` picks)."""
    return choose({})


@dataclass
class ChildCgroup:
    """The cgroups of one child (one directory per v1 controller, or one on v2)."""

    host: Host
    dirs: dict[str, Path]

    @classmethod
    def create(cls, host: Host, name: str, *, memory: int | None, pids: int | None) -> ChildCgroup:
        dirs: dict[str, Path] = {}
        try:
            for controller, parent in host.parents.items():
                d = parent / f"{PREFIX}{name}"
                d.mkdir()
                dirs[controller] = d
            cg = cls(host, dirs)
            cg._apply(memory, pids)
        except OSError:
            cls(host, dirs).remove()
            raise
        return cg

    def _apply(self, memory: int | None, pids: int | None) -> None:
        if self.host.tier == "cgroup2":
            d = self.dirs["unified"]
            if memory is not None:
                (d / "memory.max").write_text(str(memory))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
                with contextlib.suppress(OSError):
                    (d / "memory.oom.group").write_text("1")
            if pids is not None:
                (d / "pids.max").write_text(str(pids))
            return
        if memory is not None and "memory" in self.dirs:
            d = self.dirs["memory"]
            (d / "memory.limit_in_bytes").write_text(str(memory))
            with contextlib.suppress(OSError):  # absent when swap accounting is off
                (d / "memory.memsw.limit_in_bytes").write_text(str(memory))
        if pids is not None and "pids" in self.dirs:
            (self.dirs["pids"] / "pids.max").write_text(str(pids))

    @property
    def procs_files(self) -> list[str]:
        """The `cgroup.procs` files the trampoline writes its own pid into."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def members(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                found.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return found

    # --- what happened ------------------------------------------------------------------------

    def _kv(self, controller: str, filename: str) -> dict[str, int]:
        d = self.dirs.get(controller)
        if d is None:
            return {}
        out: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for line in (d / filename).read_text().splitlines():
                k, _, v = line.partition(" ")
                with contextlib.suppress(ValueError):
                    out[k] = int(v)
        return out

    def oom_kills(self) -> int:
        if self.host.tier == "cgroup2":
            return self._kv("unified", "memory.events").get("oom_kill", 0)
        return self._kv("memory", "memory.oom_control").get("oom_kill", 0)

    def pids_max_hits(self) -> int:
        controller = "unified" if self.host.tier == "cgroup2" else "pids"
        return self._kv(controller, "pids.events").get("max", 0)

    # --- teardown -----------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL every member, including any forked while we were at it."""
        if self.host.tier == "cgroup2":
            with contextlib.suppress(OSError):
                (self.dirs["unified"] / "cgroup.kill").write_text("1")
                return
        freezer = self.dirs.get("freezer")
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("FROZEN")
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)  # members are frozen: none can exit and be reused
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("THAWED")

    def remove(self, timeout: float = 1.0) -> bool:
        """Remove the directories once empty; returns whether all are gone."""
        deadline = time.monotonic() + timeout
        for d in list(self.dirs.values()):
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.005)
        return True


def sweep_stale(host: Host) -> list[Path]:
    """Remove cgroups left by supervisors that are no longer alive (killing any members)."""
    removed: list[Path] = []
    for parent in host.parents.values():
        with contextlib.suppress(OSError):
            for d in parent.iterdir():
                if not d.name.startswith(PREFIX) or not d.is_dir():
                    continue
                owner = d.name[len(PREFIX) :].split("-", 1)[0]
                if not owner.isdigit() or _pid_alive(int(owner)):
                    continue
                cg = ChildCgroup(host, {k: d for k, p in host.parents.items() if p == parent})
                cg.kill()
                if cg.remove(timeout=0.5):
                    removed.append(d)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
