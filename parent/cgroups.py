"""Per-child cgroups: the containment tier that sees every process a child starts.

Where they may be created is the host's business (`host.py`). A child's cgroup is created before
it is spawned and joined before the child's first line runs, so nothing it does escapes it: a
setsid + double-fork daemon is still a member. Dispose kills by membership (`cgroup.kill` on v2;
freeze, SIGKILL every member, thaw on v1), then the cgroup is removed. Names carry the
supervisor's pid, so cgroups left behind by a supervisor that was SIGKILLed are found and swept
at the next start (`sweep_stale`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tether.parent.host import PREFIX, Host


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
