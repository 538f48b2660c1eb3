"""Who holds a lease (pid, start time, boot, pid namespace), whether it is alive, and the pure
rule that decides a takeover."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.agents.sessions.lease import Clock, LeaseRow, heartbeat_age, judge
from tether.parent.agents.sessions.owner import ProcessIdentity, probe, start_ticks, this_process

TICKS = os.sysconf("SC_CLK_TCK")


def test_a_start_time_is_read_right_even_when_the_command_name_has_parens_and_spaces(
    tmp_path: Path,
) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    odd = tmp_path / "a) b (c"
    shutil.copy(sleep, odd)
    proc = subprocess.Popen([str(odd), "30"])
    try:
        p = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while p.name() != odd.name and time.monotonic() < deadline:
            time.sleep(0.01)  # until the exec has happened
        assert p.name() == odd.name
        ticks = start_ticks(proc.pid)
        assert ticks is not None
        assert abs(psutil.boot_time() + ticks / TICKS - p.create_time()) < 1.0
        me = this_process()
        assert probe(ProcessIdentity(proc.pid, ticks, me.boot, me.pidns)) == "alive"
    finally:
        proc.kill()
        proc.wait()


def test_a_gone_or_zombie_or_reused_pid_is_a_dead_owner() -> None:
    me = this_process()
    proc = subprocess.Popen(["sleep", "30"])
    ticks = start_ticks(proc.pid)
    assert ticks is not None
    owner = ProcessIdentity(proc.pid, ticks, me.boot, me.pidns)
    assert probe(owner) == "alive"
    assert probe(ProcessIdentity(proc.pid, ticks + 1, me.boot, me.pidns)) == "dead"  # reused
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert probe(owner) == "dead"  # a zombie, not yet reaped
    proc.wait()
    assert probe(owner) == "dead"  # gone


def test_an_owner_in_another_pid_namespace_or_boot_cannot_be_checked_from_here() -> None:
    me = this_process()
    assert probe(ProcessIdentity(me.pid, me.start, me.boot, me.pidns)) == "alive"
    assert probe(ProcessIdentity(me.pid, me.start, me.boot, "pid:[1]")) == "unknown"
    assert probe(ProcessIdentity(me.pid, me.start, "another-boot", me.pidns)) == "unknown"


HERE = ProcessIdentity(pid=10, start=100, boot="boot-a", pidns="ns-a")


def _lease(boot: str, heartbeat_wall: float, heartbeat_mono: float) -> LeaseRow:
    return LeaseRow(
        agent_id="ag_" + "0" * 20,
        token="t",
        owner=ProcessIdentity(pid=20, start=200, boot=boot, pidns="ns-a"),
        acquired_at=0.0,
        heartbeat_wall=heartbeat_wall,
        heartbeat_mono=heartbeat_mono,
    )


_times = st.floats(0, 1e6, allow_nan=False)


@given(beat=_times, now=_times, stale=st.floats(0.01, 1e4), wall=_times)
def test_a_dead_owner_is_taken_over_whatever_its_heartbeat_says(
    beat: float, now: float, stale: float, wall: float
) -> None:
    lease = _lease("boot-a", wall, beat)
    clock = Clock(wall=wall, mono=now)
    assert judge(lease, now=clock, here=HERE, liveness="dead", stale_after=stale) == "owner_dead"


@given(
    beat=_times,
    age=st.floats(-1e3, 1e4, allow_nan=False),
    stale=st.floats(0.01, 1e3),
    liveness=st.sampled_from(["alive", "unknown"]),
)
def test_a_live_owner_is_taken_over_exactly_when_its_heartbeat_is_older_than_the_bound(
    beat: float, age: float, stale: float, liveness: str
) -> None:
    lease = _lease("boot-a", heartbeat_wall=5.0, heartbeat_mono=beat)
    clock = Clock(wall=1e9, mono=beat + age)  # the wall clock is ignored within one boot
    verdict = judge(lease, now=clock, here=HERE, liveness=liveness, stale_after=stale)  # type: ignore[arg-type]
    measured = heartbeat_age(lease, clock, HERE)
    assert measured >= 0
    assert verdict == ("stale" if measured > stale else "held")
    if age <= 0:
        assert verdict == "held"  # a clock that seems to run backwards never makes it stale


@given(wall_beat=_times, wall_age=st.floats(0, 1e4), stale=st.floats(0.01, 1e3))
def test_across_boots_the_heartbeat_is_aged_on_the_wall_clock(
    wall_beat: float, wall_age: float, stale: float
) -> None:
    lease = _lease("boot-b", heartbeat_wall=wall_beat, heartbeat_mono=1e12)
    clock = Clock(wall=wall_beat + wall_age, mono=0.0)
    verdict = judge(lease, now=clock, here=HERE, liveness="unknown", stale_after=stale)
    measured = heartbeat_age(lease, clock, HERE)
    assert abs(measured - wall_age) < 1e-6 * max(1.0, wall_beat)
    assert verdict == ("stale" if measured > stale else "held")


@given(
    age=st.floats(0, 1e4),
    stale=st.floats(0.01, 1e3),
    live=st.sets(st.sampled_from(["t", "u", "v"])),
)
def test_a_lease_of_the_asker_itself_is_an_orphan_exactly_when_none_of_its_activations_holds_it(
    age: float, stale: float, live: set[str]
) -> None:
    mine = LeaseRow(
        agent_id="ag_" + "0" * 20,
        token="t",
        owner=HERE,
        acquired_at=0.0,
        heartbeat_wall=0.0,
        heartbeat_mono=0.0,
    )
    clock = Clock(wall=age, mono=age)
    verdict = judge(mine, now=clock, here=HERE, liveness="alive", stale_after=stale, live_here=live)
    if "t" not in live:
        assert verdict == "orphaned"  # its release failed: the asker holds the slot now
    else:
        assert verdict == ("stale" if age > stale else "held")
    # A reader, who does not know the live tokens, never finds an orphan.
    reader = judge(mine, now=clock, here=HERE, liveness="alive", stale_after=stale)
    assert reader == ("stale" if age > stale else "held")
    # Another process's lease is never this asker's orphan.
    theirs = _lease("boot-a", heartbeat_wall=0.0, heartbeat_mono=0.0)
    assert (
        judge(theirs, now=clock, here=HERE, liveness="alive", stale_after=stale, live_here=live)
        != "orphaned"
    )
