"""A child's tree: its marker, and finding and killing everything it started, including what
tried to leave it.

The tree marker is an environment variable (`TETHER_TREE=<supervisor pid>-<random>-<n>`) every
child starts with and every descendant inherits unless it scrubs its environment. Its prefix is
the minting supervisor's pid, which is how the keeper (`_keeper.py`, given the prefix) finds a
SIGKILLed supervisor's trees. Markers are minted in `markers` and matched here.

A child's tree is the union of:
- its descendants by parentage (psutil walk), which follows processes that called setsid or
  setpgid as long as their parent chain is intact;
- every process in its session or process group (both equal the child's pid), which catches
  orphans reparented to init that kept the session;
- every process whose environment carries the child's tree marker, which catches a setsid +
  double-fork daemon that left both (unless it also scrubbed its environment: the cgroup tier
  is the only complete answer to that, see docs/containment.md).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable

import anyio
import anyio.lowlevel
import psutil

from tether.parent.process._keeper import environ, running
from tether.parent.process.markers import TREE_ENV


class ProcSnapshot:
    """Every process's session, process group and tree markers, read in one pass over /proc.

    A marker counts wherever `TETHER_TREE=<marker>` ends at a NUL or at the end of a process's
    environment block, as the kernel shows it in /proc/PID/environ."""

    __slots__ = ("groups", "marked")

    def __init__(self) -> None:
        self.groups: dict[int, tuple[int, int]] = {}
        """pid → (session id, process group id)."""
        self.marked: dict[str, set[int]] = {}
        """tree marker → the pids whose environment carries it."""

    def in_session_or_group(self, leader: int) -> set[int]:
        return {pid for pid, (sid, pgid) in self.groups.items() if leader in (sid, pgid)}


_NEEDLE = f"{TREE_ENV}=".encode()

OUTSIDE_EVERY_SESSION = 0
"""The session id a process has here when it leads no session we can see: a kernel thread (most
of /proc on a small host), init, or a process whose session began outside this pid namespace.
No process of a tree we started can have it: every child leads a session of its own, and a
process can only keep its session or begin one (led by itself, so visible to us). So the marker
scan does not read those processes' environments (each read costs an open of /proc and a check
of the reader's right to it: on a host of 70 processes, two thirds of a snapshot)."""


def snapshot() -> ProcSnapshot:
    """Read every process's session, group and markers now (this process's own excepted).

    A process that shows no environment at all is read once more after the pass: one caught
    in an exec shows none for a moment (its new stack, which holds the block, is laid out
    after the exec's point of no return), and a daemon that left its session is found by its
    marker alone on a host without cgroups."""
    snap = ProcSnapshot()
    me = os.getpid()
    blank: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            sid = os.getsid(pid)
            snap.groups[pid] = (sid, os.getpgid(pid))
        except OSError:
            pass
        else:
            if sid == OUTSIDE_EVERY_SESSION:
                continue  # a kernel thread or a session not ours: no tree of ours is there
        try:
            env = environ(pid)
        except OSError:
            continue
        if env:
            _note_markers(snap, pid, env)
        else:
            blank.append(pid)
    for pid in blank:
        try:
            _note_markers(snap, pid, environ(pid))
        except OSError:
            continue
    return snap


def _note_markers(snap: ProcSnapshot, pid: int, env: bytes) -> None:
    at = env.find(_NEEDLE)
    while at >= 0:
        start = at + len(_NEEDLE)
        end = env.find(b"\0", start)
        value = env[start:] if end < 0 else env[start:end]
        snap.marked.setdefault(value.decode("utf-8", "replace"), set()).add(pid)
        at = env.find(_NEEDLE, start)


class _Pending:
    __slots__ = ("done", "snap")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.snap: ProcSnapshot | None = None


_shared = threading.local()


async def fresh_snapshot() -> ProcSnapshot:
    """A snapshot of /proc begun after this call. Callers that ask in the same turn of the
    event loop share one pass: a fleet of children disposed at once (each sweep must read /proc
    after its own child is gone) pays a few passes, not one per child — each is linear in the
    host's processes, so one per child is quadratic in the fleet."""
    pending: _Pending | None = getattr(_shared, "pending", None)
    if pending is not None:
        await pending.done.wait()
        return pending.snap if pending.snap is not None else snapshot()
    pending = _shared.pending = _Pending()
    try:
        await anyio.lowlevel.checkpoint()  # whoever else asks in this turn joins
        # Synchronous: nobody can join once it has begun.
        pending.snap = snapshot()
    finally:
        _shared.pending = None
        pending.done.set()
    return pending.snap


def tree_procs(
    root: int,
    marker: str | None,
    *,
    thorough: bool = True,
    members: Iterable[int] = (),
    root_exited: bool = False,
    snap: ProcSnapshot | None = None,
) -> list[psutil.Process]:
    """The live processes of `root`'s tree (a zombie leader whose other threads run counts as
    live), root included while it lives.

    `thorough` adds the session/group and environment-marker scans over all of /proc (from
    `snap` when given: one taken after the caller's reason to look, see `fresh_snapshot`).
    The returned psutil objects remember each process's start time, so signalling them later
    can never hit a recycled pid.

    `root_exited` says the caller has seen the whole root process exit (`waitid`, not just a
    zombie leader thread): the kernel reparented all its children when it did, so the walk by
    parentage, itself a read of every /proc/*/stat, cannot find anything and is skipped. Its
    former descendants are found by the other scans, as always once their parent is gone.
    """
    pids: set[int] = set()
    if not root_exited:
        try:
            proc = psutil.Process(root)
            pids.add(root)
            pids.update(p.pid for p in proc.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    pids.update(members)  # the child's cgroup, when it has one: complete membership
    if thorough:
        snap = snap or snapshot()
        pids |= snap.in_session_or_group(root)
        if marker:
            pids |= snap.marked.get(marker, set())
    alive: list[psutil.Process] = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        if running(pid):  # not the leader's state alone: see `running`
            alive.append(proc)
    return alive


def signal_procs(procs: list[psutil.Process], sig: int) -> None:
    """Send `sig` to each process still running as the one that was found; SIGTERM is followed
    by SIGCONT so a stopped process can act on it."""
    for proc in procs:
        try:
            proc.send_signal(sig)
            if sig == signal.SIGTERM:
                proc.send_signal(signal.SIGCONT)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
