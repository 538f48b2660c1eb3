"""A child's tree: its marker, and finding and killing everything it started, including what
tried to leave it.

The tree marker is an environment variable (`TETHER_TREE=<supervisor pid>-<random>-<n>`) every
child starts with and every descendant inherits unless it scrubs its environment. Its prefix is
the minting supervisor's pid, which is how the keeper (`_keeper.py`, given the prefix) finds a
SIGKILLed supervisor's trees. This module is the one place markers are minted and matched.

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

import itertools
import os
import signal
from collections.abc import Iterable

import psutil

TREE_ENV = "TETHER_TREE"
"""The variable every child carries, so teardown can find processes that left the tree."""

_tree_ids = itertools.count(1)


def marker_prefix() -> str:
    """The prefix of every tree marker this process mints."""
    return f"{os.getpid()}-"


def new_tree_marker() -> str:
    """A marker unique to one child; its prefix is this supervisor's pid."""
    return f"{marker_prefix()}{os.urandom(3).hex()}-{next(_tree_ids)}"


def _marked(marker: str) -> set[int]:
    needle = f"{TREE_ENV}={marker}\0".encode()
    found: set[int] = set()
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env or env.endswith(needle[:-1]):
            found.add(pid)
    return found


def _same_session_or_group(leader: int) -> set[int]:
    found: set[int] = set()
    me = os.getpid()
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            if os.getsid(pid) == leader or os.getpgid(pid) == leader:
                found.add(pid)
        except OSError:
            continue
    return found


def tree_procs(
    root: int,
    marker: str | None,
    *,
    thorough: bool = True,
    members: Iterable[int] = (),
    root_exited: bool = False,
) -> list[psutil.Process]:
    """The live (non-zombie) processes of `root`'s tree, root included while it lives.

    `thorough` adds the session/group and environment-marker scans over all of /proc. The
    returned psutil objects remember each process's start time, so signalling them later can
    never hit a recycled pid.

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
        pids |= _same_session_or_group(root)
        if marker:
            pids |= _marked(marker)
    alive: list[psutil.Process] = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
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
