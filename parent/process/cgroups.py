"""Per-child cgroups: the containment tier that sees every process a child starts.

Where they may be created is the host's business (`host.py`). A child's cgroup is created before
it is spawned and joined before the child's first line runs, so nothing it does escapes it: a
setsid + double-fork daemon is still a member. Dispose kills by membership, then the cgroup is
removed. Names carry the supervisor's pid, so cgroups left behind by a supervisor that was
SIGKILLed are found and swept at the next start (`sweep_stale`).

A child has one directory per hierarchy it is in: `unified` (the v2 hierarchy: the `cgroup2`
and `hybrid` tiers) and/or `memory`, `pids`, `freezer` (v1: the `cgroup1` tier; `hybrid` takes
`memory` and `pids` from v1 for its limits). What each does depends on which it has:

- kill: with a v2 directory, `cgroup.kill` — the kernel kills every member and anything forked
  meanwhile, in one write; where it is missing (kernels before 5.14) the cgroup is frozen
  first (`cgroup.freeze`: a frozen member can neither fork nor exit, so its pid cannot be
  reused), every member is SIGKILLed (fatal signals reach frozen tasks on v2), and it is
  thawed. On v1 only: the same dance with `freezer.state`.
- empty: a v2 directory announces it (`cgroup.events` says `populated 0`; the kernel flags
  the file, `wait_empty` sleeps on that) where v1 membership has to be read again and again.
- limits and what they saw: `memory.max`/`pids.max` and `memory.events`/`pids.events` in a v2
  directory on the `cgroup2` tier, the v1 files in the `memory`/`pids` directories otherwise.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.lowlevel

from tether.parent.process.host import PREFIX, TIERS, Host, host, pid_alive


def cgroupfs_mount_points() -> list[str]:
    """Where a cgroup filesystem (v1 or v2) is mounted in this process's mount namespace; the
    mount points are unescaped as /proc/self/mountinfo escapes them (`\\040` is a space)."""
    points: list[str] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields, _, rest = line.partition(" - ")
                parts = fields.split()
                if len(parts) > 4 and rest.split(" ", 1)[0] in ("cgroup", "cgroup2"):
                    points.append(_unescape_mount(parts[4]))
    except OSError:
        pass
    return points


def _unescape_mount(path: str) -> str:
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


@dataclass
class ChildCgroup:
    """The cgroups of one child (one directory per v1 controller, or one on v2)."""

    host: Host
    dirs: dict[str, Path]
    _hold: _HoldFiles | None = field(default=None, init=False, repr=False, compare=False)
    """The v2 freezer's files, open once this cgroup has been held still (`freeze`)."""
    _v1_frozen: bool = field(default=False, init=False, repr=False, compare=False)
    """The v1 freezer was asked to freeze, and not to thaw since."""
    _files: dict[tuple[str, str], int] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The files a dispose reads (the emptiness, what the limits saw), open from the cgroup's
    creation until `remove`: a dispose after a crash reads them on its result's path, and an
    open there (a lookup in cgroupfs, on a CPU that was idle) cost more than the read."""

    @classmethod
    def create(cls, host: Host, name: str, *, memory: int | None, pids: int | None) -> ChildCgroup:
        dirs: dict[str, Path] = {}
        try:
            for controller, parent in host.parents.items():
                d = parent / f"{PREFIX}{name}"
                d.mkdir()
                dirs[controller] = d
            cg = cls(host, dirs)
            cg.limit(memory=memory, pids=pids)
            for controller, filename in cg._read_by_dispose():
                with contextlib.suppress(OSError):
                    cg._file(controller, filename)
        except OSError:
            cls(host, dirs).remove()
            raise
        return cg

    def limit(self, *, memory: int | None, pids: int | None) -> None:
        """Write the limits (`create` does; a standby's cgroup is made without them and gets
        its child's later); raises `OSError`."""
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
            found |= _procs(d)
        return found

    # --- what happened ------------------------------------------------------------------------

    def _read_by_dispose(self) -> list[tuple[str, str]]:
        """(controller, file) of what `populated`, `oom_kills` and `pids_max_hits` read."""
        if self.host.tier == "cgroup2":
            kept = [("unified", "memory.events"), ("unified", "pids.events")]
        else:
            kept = [("memory", "memory.oom_control"), ("pids", "pids.events")]
        wanted = [("unified", "cgroup.events"), *kept]
        return [(c, f) for c, f in wanted if c in self.dirs]

    def _file(self, controller: str, filename: str) -> int:
        """The open descriptor of one of the cgroup's files (opened once); raises `OSError`."""
        fd = self._files.get((controller, filename))
        if fd is None:
            fd = os.open(self.dirs[controller] / filename, os.O_RDONLY | os.O_CLOEXEC)
            self._files[controller, filename] = fd
        return fd

    def _kv(self, controller: str, filename: str) -> dict[str, int]:
        if controller not in self.dirs:
            return {}
        out: dict[str, int] = {}
        with contextlib.suppress(OSError):
            data = os.pread(self._file(controller, filename), 4096, 0)
            for line in data.decode("ascii", "replace").splitlines():
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

    # --- emptiness (v2) -----------------------------------------------------------------------

    @property
    def announces_empty(self) -> bool:
        """Whether this cgroup says when it is empty (it has a v2 directory)."""
        return "unified" in self.dirs

    def populated(self) -> bool | None:
        """Whether any live process is in the v2 cgroup (zombies do not count); `None` without
        a v2 directory, or when it cannot be read."""
        if "unified" not in self.dirs:
            return None
        events = self._kv("unified", "cgroup.events")
        return bool(events["populated"]) if "populated" in events else None

    async def wait_empty(self) -> None:
        """Return once the v2 cgroup is empty (or its state cannot be read: the caller's own
        checks take over). Bound it with a deadline of your own.

        The kernel flags `cgroup.events` when it changes, as an exceptional condition (POLLPRI)
        that asyncio's selector, which waits for readability, cannot see; so the file goes into
        an epoll set of its own, registered for POLLPRI, and the loop waits for *that* to
        become readable. No thread, no polling, and an fd of any number (no select())."""
        unified = self.dirs.get("unified")
        if unified is None:
            raise ValueError("only a v2 cgroup announces that it is empty")
        await self._wait_events(unified, b"populated 0")

    # --- holding still (a continuable child between activations) -----------------------------

    async def freeze(self, settle: float = 1.0) -> bool:
        """Freeze every member (v2 `cgroup.freeze`, else the v1 freezer) and wait until the
        kernel says they are all frozen; whether it did within `settle` seconds (`False`: this
        cgroup has no freezer, or it could not be written or did not settle)."""
        unified = self.dirs.get("unified")
        if unified is not None:
            if not self.begin_freeze():
                return False
            hold = self._hold_files(unified)
            if hold.settled(b"frozen 1"):
                return True  # begun early enough to have settled already (no timer to set)
            with anyio.move_on_after(settle):
                await hold.wait_for(b"frozen 1")
                return True
            return False
        freezer = self.dirs.get("freezer")
        if freezer is None:
            return False
        try:
            self._v1_frozen = True
            (freezer / "freezer.state").write_text("FROZEN")
        except OSError:
            return False
        deadline = time.monotonic() + settle
        delay = 0.0005
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if (freezer / "freezer.state").read_text().strip() == "FROZEN":
                    return True
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.02)
        return False

    def begin_freeze(self) -> bool:
        """Ask a v2 cgroup's members to freeze, without waiting for them to (`freeze` waits);
        whether it was asked (`False`: no v2 directory, or its file could not be written).
        Asked twice before a `thaw`, the second asking writes nothing."""
        unified = self.dirs.get("unified")
        if unified is None:
            return False
        try:
            hold = self._hold_files(unified)
            if not hold.frozen:
                os.write(hold.freeze, b"1")
                hold.frozen = True
        except OSError:
            return False
        return True

    def thaw(self) -> None:
        """Undo `freeze` or `begin_freeze`; nothing to write (and nothing written) when neither
        was asked since the last thaw (every dispose asks, most children were never held)."""
        with contextlib.suppress(OSError):
            hold = self._hold
            if hold is not None and hold.frozen:
                hold.frozen = False
                os.write(hold.freeze, b"0")
            elif self._v1_frozen:
                self._v1_frozen = False
                (self.dirs["freezer"] / "freezer.state").write_text("THAWED")

    def _hold_files(self, unified: Path) -> _HoldFiles:
        if self._hold is None:
            self._hold = _HoldFiles(unified, self._file("unified", "cgroup.events"))
        return self._hold

    async def _wait_events(self, unified: Path, line: bytes) -> None:
        """Return once `cgroup.events` holds `line` (or cannot be read)."""
        try:
            events = self._file("unified", "cgroup.events")
        except OSError:
            return
        ep = select.epoll(flags=select.EPOLL_CLOEXEC)
        try:
            ep.register(events, select.EPOLLPRI)
            await _until(events, ep, line)
        except OSError:
            return
        finally:
            ep.close()

    # --- teardown -----------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL every member, including any forked while we were at it."""
        unified = self.dirs.get("unified")
        if unified is None:
            self._freeze_and_kill_v1()
            return
        try:
            (unified / "cgroup.kill").write_text("1")
        except OSError:
            self.freeze_and_kill()
        # The v1 directories beside a v2 one (`hybrid`) are not frozen, so their members are
        # not killed by pid here (a pid read there may be reused by the time it is signalled):
        # anyone in them but not in the v2 cgroup is left to the sweep, which signals verified
        # process handles (`tree.signal_procs`).

    def freeze_and_kill(self) -> None:
        """Kill the members of the v2 cgroup the way kernels without `cgroup.kill` allow: freeze
        it (no member can fork or exit, so no pid is reused under us), SIGKILL each member
        (fatal signals reach frozen tasks on v2), thaw."""
        unified = self.dirs["unified"]
        with contextlib.suppress(OSError):
            (unified / "cgroup.freeze").write_text("1")
        _kill_each(_procs(unified))
        with contextlib.suppress(OSError):
            (unified / "cgroup.freeze").write_text("0")
        if self._hold is not None:
            self._hold.frozen = False

    def _freeze_and_kill_v1(self) -> None:
        freezer = self.dirs.get("freezer")
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("FROZEN")
        _kill_each(self.members())
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("THAWED")

    def remove(self, timeout: float = 1.0) -> bool:
        """Remove the directories once empty; returns whether all are gone."""
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()
        files, self._files = self._files, {}
        for fd in files.values():
            os.close(fd)
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


SETTLE_TURNS = 8
"""Turns of the event loop after which a state not yet reached is waited for (`_until`)."""
SETTLE_POLL = 0.001
"""The longest a state awaited goes unread: its announcement can come late (`_until`)."""


async def _until(events: int, epoll: select.epoll, line: bytes) -> None:
    """Return once the `cgroup.events` open as `events` (and registered in `epoll` for
    `POLLPRI`) holds `line`, or cannot be read.

    The file is read again rather than only waited on: the kernel sets a state (`frozen 1`,
    `populated 0`) the moment it is reached, but announces the change from a work queue, which
    a busy host runs late — 5 to 15 ms in a tenth of the freezes on a loaded 2-core host,
    against ≈ 20 µs for the state itself. So the state is read after each of a few turns of
    the event loop (the processes need a CPU to freeze or die on meanwhile), then at least
    every `SETTLE_POLL` seconds, or sooner when the announcement comes."""
    try:
        turns = 0
        while line not in os.pread(events, 4096, 0):
            if turns < SETTLE_TURNS:
                turns += 1
                await anyio.lowlevel.checkpoint()
                continue
            with anyio.move_on_after(SETTLE_POLL):
                await anyio.wait_readable(epoll.fileno())
            epoll.poll(0)
    except OSError:
        return


class _HoldFiles:
    """A v2 cgroup's `cgroup.freeze`, and an epoll set on its `cgroup.events` (the cgroup's own
    descriptor), kept while its child lives: a continuable child is frozen after each
    activation and thawed for the next one, and opening them each time (a path walk in
    cgroupfs, a text wrapper, an epoll set) cost more than the writes themselves. Closed by
    `ChildCgroup.remove`."""

    def __init__(self, unified: Path, events: int) -> None:
        self.freeze = os.open(unified / "cgroup.freeze", os.O_WRONLY | os.O_CLOEXEC)
        self.events = events
        self.epoll = select.epoll(flags=select.EPOLL_CLOEXEC)
        self.epoll.register(self.events, select.EPOLLPRI)
        self.frozen = False
        """`1` was written, and no `0` since."""

    def settled(self, line: bytes) -> bool:
        """Whether `cgroup.events` holds `line` now (`False` when it cannot be read)."""
        try:
            return line in os.pread(self.events, 4096, 0)
        except OSError:
            return False

    async def wait_for(self, line: bytes) -> None:
        """Return once `cgroup.events` holds `line` (or cannot be read)."""
        await _until(self.events, self.epoll, line)

    def close(self) -> None:
        self.epoll.close()
        os.close(self.freeze)


def _procs(d: Path) -> set[int]:
    with contextlib.suppress(OSError, ValueError):
        return {int(x) for x in (d / "cgroup.procs").read_text().split()}
    return set()


def _kill_each(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)  # members are frozen: none can exit and be reused


def sweep_stale(host: Host) -> list[Path]:
    """Remove cgroups left by supervisors that are no longer alive (killing any members)."""
    removed: list[Path] = []
    for parent in host.parents.values():
        with contextlib.suppress(OSError):
            for d in parent.iterdir():
                if not d.name.startswith(PREFIX) or not d.is_dir():
                    continue
                owner = d.name[len(PREFIX) :].split("-", 1)[0]
                if not owner.isdigit() or pid_alive(int(owner)):
                    continue
                cg = ChildCgroup(host, {k: d for k, p in host.parents.items() if p == parent})
                cg.kill()
                if cg.remove(timeout=0.5):
                    removed.append(d)
    return removed


_swept = False


def sweep_stale_once() -> None:
    """Sweep every tier's stale cgroups, once per process (the first supervisor to start)."""
    global _swept
    if _swept:
        return
    _swept = True
    for tier in TIERS:
        with contextlib.suppress(ValueError):
            got = host(tier)
            if got.parents:
                sweep_stale(got)
