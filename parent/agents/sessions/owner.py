"""Who holds a lease, and whether that process is still the one that took it.

A pid alone names a process only until it exits: the kernel hands the number out again. So an
owner is recorded as (pid, start time, boot id, pid namespace):

- the start time is field 22 of `/proc/PID/stat` (clock ticks after boot), exact and fixed for
  the life of the process, so a recycled pid shows a different one;
- the boot id (`/proc/sys/kernel/random/boot_id`) changes at every boot, when every pid and
  start time starts over;
- the pid namespace (`/proc/self/ns/pid`) says whether the pid means the same process to us at
  all: a supervisor in another container sharing the state directory has its own numbering.

`probe` answers `alive`, `dead` or `unknown`; `unknown` (another boot or pid namespace) means
the pid cannot be checked from here and only the heartbeat can tell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

Liveness = Literal["alive", "dead", "unknown"]

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start: int
    """Start time in clock ticks after boot (`/proc/PID/stat` field 22)."""
    boot: str
    pidns: str


def start_ticks(pid: int) -> int | None:
    """The start time of `pid`, or `None` if no such process is running (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces and ')':
    # the fields after it start after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    state = fields[0]
    if state in (b"Z", b"X", b"x"):
        return None
    return int(fields[19])


def _read_boot_id() -> str:
    with open(_BOOT_ID, encoding="ascii") as f:
        return f.read().strip()


def _read_pidns() -> str:
    return os.readlink("/proc/self/ns/pid")


_cached: ProcessIdentity | None = None


def this_process() -> ProcessIdentity:
    """The identity of the calling process (recomputed after a fork)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached.pid != pid:
        start = start_ticks(pid)
        assert start is not None, "a running process always has /proc/self/stat"
        _cached = ProcessIdentity(pid=pid, start=start, boot=_read_boot_id(), pidns=_read_pidns())
    return _cached


def probe(owner: ProcessIdentity, here: ProcessIdentity | None = None) -> Liveness:
    """Whether the process `owner` names is still running, as far as `here` can see."""
    here = here or this_process()
    if owner.boot != here.boot or owner.pidns != here.pidns:
        return "unknown"
    started = start_ticks(owner.pid)
    if started is None or started != owner.start:
        return "dead"
    return "alive"
