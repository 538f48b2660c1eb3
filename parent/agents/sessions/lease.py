"""The activation lease, judged: may a would-be owner take an agent's lease from its holder?

Pure: the facts (the stored lease, the clocks, what `/proc` says about the holder) come in as
values, so every case is testable without processes. The order of the checks is the rule:

1. the holder is dead (its pid is gone, a zombie, or now names a process with another start
   time): take over at once, whatever its heartbeat says; so is a lease of the asking process
   itself that none of its activations holds (`orphaned`: its release failed, on a full disk
   say), since in one process the activation is taken only by whoever holds the agent's slot;
2. its heartbeat is older than `stale_after`: take over; the holder is alive but wedged (or
   cannot be checked from here, in another pid namespace or boot) — it finds out at its next
   write, which the new token fences off;
3. otherwise the lease is held.

Heartbeat age is measured on CLOCK_MONOTONIC (system-wide on Linux, blind to wall-clock steps
and to suspend) when the lease was written in this boot, and on the wall clock otherwise.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from tether.parent.agents.sessions.owner import Liveness, ProcessIdentity

Verdict = Literal["held", "owner_dead", "stale", "orphaned"]


@dataclass(frozen=True)
class Clock:
    wall: float
    """`time.time()`: shown to people, compared only across boots."""
    mono: float
    """`time.monotonic()`: compared within one boot."""


@dataclass(frozen=True)
class LeaseRow:
    """A lease as stored."""

    agent_id: str
    token: str
    owner: ProcessIdentity
    acquired_at: float
    heartbeat_wall: float
    heartbeat_mono: float


def heartbeat_age(lease: LeaseRow, now: Clock, here: ProcessIdentity) -> float:
    """Seconds since the holder's last heartbeat (never negative)."""
    if lease.owner.boot == here.boot:
        age = now.mono - lease.heartbeat_mono
    else:
        age = now.wall - lease.heartbeat_wall
    return max(0.0, age)


def judge(
    lease: LeaseRow,
    *,
    now: Clock,
    here: ProcessIdentity,
    liveness: Liveness,
    stale_after: float,
    live_here: Collection[str] | None = None,
) -> Verdict:
    """`live_here`: the tokens of the asking process's live activations (see rule 1); `None`
    when the asker does not know them (a reader), which never finds an orphan."""
    if live_here is not None and lease.owner == here and lease.token not in live_here:
        return "orphaned"
    if liveness == "dead":
        return "owner_dead"
    if heartbeat_age(lease, now, here) > stale_after:
        return "stale"
    return "held"
