"""The standby's cgroup: the zygote's standby joins a cgroup the supervisor made for it before
any request (the join waits for the kernel's migration lock, an RCU grace period on a stock
host), and the next child gets that cgroup with its own limits written into it, to itself:
never shared with a standby, never left behind."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from act_reports import ACT, HERE, cgroups_named, gone_or_zombie, start_and_wait_for_report

from tether.parent.process import zygote_command
from tether.parent.process.cgroups import ChildCgroup
from tether.parent.process.host import host
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.zygote import Zygote, standby_pids
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        host().tier == "process-group", reason="this host gives tether no cgroups to create"
    ),
]

FAST = DisposePolicy(shutdown=0.3, eof=0.3, term=0.3, kill=1.0)
ZYGOTE = ChildConfig(spawner="zygote", dispose=FAST)
DEADLINE = 10.0
LIMITS = Limits(memory="768M", processes=77)


def _standby_cgroup(zygote: Zygote) -> ChildCgroup:
    held = zygote._standby_cgroup
    assert held is not None, "the supervisor made no cgroup for the zygote's standby"
    return held[1]


def _pids_max(cgroup: ChildCgroup) -> str | None:
    """The cgroup's process limit as written there (`None`: no pids controller)."""
    for d in cgroup.dirs.values():
        if (d / "pids.max").exists():
            return (d / "pids.max").read_text().strip()
    return None


def _memory_max(cgroup: ChildCgroup) -> int | None:
    for d in cgroup.dirs.values():
        for name in ("memory.max", "memory.limit_in_bytes"):
            if (d / name).exists():
                return int((d / name).read_text())
    return None


async def _members_become(cgroup: ChildCgroup, want: set[int]) -> set[int]:
    with anyio.move_on_after(DEADLINE):
        while cgroup.members() != want:
            await anyio.sleep(0.01)
    return cgroup.members()


def _freeze_the_first_standby_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Freeze the first cgroup the supervisor makes for a standby as it is made, before the
    zygote hears of it: the standby that joins it stops there, before its rehearsal, so it
    cannot have parked (an ordering, where catching a standby in its milliseconds before it
    parks is a race a loaded host loses: every catch it misses is a standby killed, and the
    zygote forks none after `MAX_LOST` in a row)."""
    child_cgroup = Zygote.child_cgroup
    frozen: list[ChildCgroup] = []

    async def freezing(self: Zygote, *args: Any, **kwargs: Any) -> ChildCgroup:
        if not frozen:
            # This spawn is then handed the standby forked before it, and the standby after
            # it joins the cgroup made here (an old standby would keep others from forking).
            assert await self.parked(within=DEADLINE) is not None
        cgroup = await child_cgroup(self, *args, **kwargs)
        if not frozen and self._next_cgroup is not None:
            frozen.append(self._next_cgroup[1])
            assert await frozen[0].freeze(), "the standby cgroup could not be frozen"
        return cgroup

    monkeypatch.setattr(Zygote, "child_cgroup", freezing)


async def _frozen_as_it_joined(zygote: Zygote, ahead: ChildCgroup) -> int:
    """The standby that joined the frozen cgroup `ahead`, once it is frozen there: stopped
    right after its join, before it looked for a request or rehearsed."""
    with anyio.fail_after(DEADLINE):
        while not (members := ahead.members()):
            await anyio.sleep(0.005)
        (pid,) = members
        assert pid in standby_pids(zygote.pid)
        assert await ahead.freeze(settle=DEADLINE), "the standby did not freeze as it joined"
    return pid


def _while_the_zygote_waits(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> None:
    """Do `act` 50 ms after the next spawn request is sent: the zygote has read it by then,
    handed it to its standby, and waits for the standby (`TAKE_WITHIN`, half a second) to take
    it."""
    exchange = Zygote._exchange

    async def acting(self: Zygote, message: Any, *args: Any, **kw: Any) -> Any:
        if message.get("op") != "spawn":
            return await exchange(self, message, *args, **kw)
        async with anyio.create_task_group() as tg:

            async def later() -> None:
                await anyio.sleep(0.05)
                act()

            tg.start_soon(later)
            return await exchange(self, message, *args, **kw)

    monkeypatch.setattr(Zygote, "_exchange", acting)


async def _forked_in_place_of(
    lost: int, sup: Supervisor, zygote: Zygote, ahead: ChildCgroup, before: dict[str, int]
) -> None:
    """Start a run and check that the standby `lost`, in the claimed cgroup `ahead`, was taken
    down, reaped and counted lost, and the child forked into `ahead`, alone there."""
    handle, report = await start_and_wait_for_report(
        sup, "hold", deadline=DEADLINE, config=ZYGOTE, limits=LIMITS
    )
    pid = report["pid"]
    assert pid != lost
    assert not psutil.pid_exists(lost), "the zygote took the standby down and reaped it"
    assert (await zygote.standby())["lost"] == 1
    assert zygote.forks == {**before, "fresh": before["fresh"] + 1}
    child = handle._child
    assert child is not None and child.cgroup is not None
    assert child.cgroup.dirs == ahead.dirs
    assert child.cgroup.members() == {pid}, "the child has its cgroup to itself"
    await handle.cancel()


async def _stop_standby_before_it_parks(zygote: Zygote, ahead: ChildCgroup) -> int:
    """SIGSTOP the standby that joined the frozen cgroup `ahead`, and thaw `ahead`: the standby
    stays stopped where it was, never having parked."""
    pid = await _frozen_as_it_joined(zygote, ahead)
    with anyio.fail_after(DEADLINE):
        os.kill(pid, signal.SIGSTOP)
        ahead.thaw()
        while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
            await anyio.sleep(0.005)
    return pid


async def _one_run(sup: Supervisor) -> Zygote:
    """One run (after the first, the supervisor has made its zygote a standby cgroup)."""
    with anyio.fail_after(DEADLINE):
        result = await sup.run("finish", agent=ACT, workspace=HERE)
    assert result.success, result
    zygote = sup._zygote
    assert zygote is not None
    return zygote


async def _parked_in_its_cgroup(sup: Supervisor) -> tuple[Zygote, int, ChildCgroup]:
    """After a first run: the zygote, its parked standby, and the cgroup it waits in (which
    holds exactly the standby)."""
    zygote = await _one_run(sup)
    for _ in range(2):
        standby = await zygote.parked(within=DEADLINE)
        assert standby is not None
        ahead = _standby_cgroup(zygote)
        if standby in ahead.members():  # a standby joins its cgroup before it parks
            assert await _members_become(ahead, {standby}) == {standby}
            return zygote, standby, ahead
        # The standby forked before the first run had not parked when that run asked for a
        # child (a loaded host): it is still the standby, in no cgroup, so none joined `ahead`.
        # The next run is handed it, and the standby after it joins the cgroup made for it.
        await _one_run(sup)
    raise AssertionError("no standby parked in the cgroup made for it")


async def test_a_child_handed_to_the_standby_keeps_the_cgroup_it_joined_ahead_with_its_limits() -> (
    None
):
    async with Supervisor(ZYGOTE) as sup:
        zygote, standby, ahead = await _parked_in_its_cgroup(sup)
        assert _pids_max(ahead) in (None, "max"), "a standby cgroup has no limits of its own"
        before = dict(zygote.forks)

        handle, report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, config=ZYGOTE, limits=LIMITS
        )
        assert report["pid"] == standby
        assert zygote.forks["standby"] == before["standby"] + 1
        child = handle._child
        assert child is not None and child.cgroup is not None
        assert child.cgroup.dirs == ahead.dirs, "the child stays where its standby was"
        assert child.cgroup.members() == {standby}
        if handle.host.enforces("memory"):
            assert _memory_max(child.cgroup) == 768 << 20
        if handle.host.enforces("pids"):
            assert _pids_max(child.cgroup) == "77"

        # The next standby gets a cgroup of its own, and the child's holds only the child.
        following = await zygote.parked(within=DEADLINE)
        assert following is not None and following != standby
        nxt = _standby_cgroup(zygote)
        assert set(nxt.dirs.values()).isdisjoint(ahead.dirs.values())
        assert await _members_become(nxt, {following}) == {following}
        assert child.cgroup.members() == {standby}
        result = await handle.cancel()
        assert result.status == "aborted"
    for d in [*ahead.dirs.values(), *nxt.dirs.values()]:
        assert not d.exists(), f"{d} outlived the supervisor"


async def _one_run_the_next_standby_cgroup_frozen(
    sup: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> tuple[Zygote, ChildCgroup]:
    """One run, and the cgroup made with it for the next standby, frozen as it was made (the
    standby that joins it stops there: `_freeze_the_first_standby_cgroup`)."""
    if not {"unified", "freezer"} & host().parents.keys():
        pytest.skip("this host's cgroups have no freezer to stop a standby before it parks")
    _freeze_the_first_standby_cgroup(monkeypatch)
    zygote = await _one_run(sup)
    return zygote, _standby_cgroup(zygote)


async def test_a_standby_still_on_its_way_in_the_claimed_cgroup_is_handed_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Runs back to back come faster than a standby parks (its join, then its rehearsal): the
    # request is handed to it all the same, and it takes it once its join is done.
    async with Supervisor(ZYGOTE) as sup:
        zygote, ahead = await _one_run_the_next_standby_cgroup_frozen(sup, monkeypatch)
        on_its_way = await _frozen_as_it_joined(zygote, ahead)
        assert not (await zygote.standby())["parked"]
        before = dict(zygote.forks)
        _while_the_zygote_waits(monkeypatch, ahead.thaw)
        handle, report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, config=ZYGOTE, limits=LIMITS
        )
        assert report["pid"] == on_its_way, "the child is the standby, not a fresh fork"
        assert zygote.forks == {**before, "standby": before["standby"] + 1}
        child = handle._child
        assert child is not None and child.cgroup is not None
        assert child.cgroup.dirs == ahead.dirs
        assert child.cgroup.members() == {on_its_way}
        if handle.host.enforces("pids"):
            assert _pids_max(child.cgroup) == "77"
        result = await handle.cancel()
        assert result.status == "aborted"


async def test_a_standby_that_dies_holding_the_request_is_reaped_and_the_child_forked_in_its_cgroup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote, ahead = await _one_run_the_next_standby_cgroup_frozen(sup, monkeypatch)
        doomed = await _frozen_as_it_joined(zygote, ahead)
        before = dict(zygote.forks)

        def kill() -> None:
            with contextlib.suppress(ProcessLookupError):  # taken down already: a slow host
                os.kill(doomed, signal.SIGKILL)
            ahead.thaw()  # a task frozen by a v1 freezer dies only once thawed

        _while_the_zygote_waits(monkeypatch, kill)
        await _forked_in_place_of(doomed, sup, zygote, ahead, before)


async def test_a_standby_that_does_not_take_the_request_in_time_is_taken_down_and_the_child_forked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote, ahead = await _one_run_the_next_standby_cgroup_frozen(sup, monkeypatch)
        stopped = await _stop_standby_before_it_parks(zygote, ahead)
        assert not (await zygote.standby())["parked"]
        await _forked_in_place_of(stopped, sup, zygote, ahead, dict(zygote.forks))


async def test_a_child_the_zygote_cannot_take_is_started_by_exec_in_the_claimed_cgroup_alone() -> (
    None
):
    big = {f"TETHER_TEST_BIG_{i}": "x" * 4000 for i in range(20)}  # more than the zygote's area
    huge = ChildConfig(dispose=FAST, env=big)  # spawner "auto": exec when the zygote cannot
    async with Supervisor(ZYGOTE) as sup:
        _, standby, ahead = await _parked_in_its_cgroup(sup)

        handle, report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, config=huge
        )
        assert handle.spawner == "exec" and handle.spawner_fallback is not None
        assert "environment" in handle.spawner_fallback
        pid = report["pid"]
        assert not psutil.pid_exists(standby), "the claimed cgroup's standby was let go"
        child = handle._child
        assert child is not None and child.cgroup is not None
        assert child.cgroup.dirs == ahead.dirs
        assert child.cgroup.members() == {pid}
        await handle.cancel()


async def test_a_zygote_that_dies_between_the_claim_and_the_request_leaves_exec_the_cgroup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cgroup is claimed (the child's limits written into it) before the spawn request is
    # sent; a zygote that dies in between takes its standby along (its death signal), and the
    # child is started by exec in that cgroup, alone, with its limits.
    auto = ChildConfig(dispose=FAST)  # spawner "auto": exec when the zygote cannot
    spawn = Zygote.spawn

    async def die_first(self: Zygote, spec: Any) -> Any:
        os.kill(self.pid, signal.SIGKILL)
        with anyio.fail_after(DEADLINE):
            await self.proc.wait()
        return await spawn(self, spec)

    async with Supervisor(ZYGOTE) as sup:
        zygote, standby, ahead = await _parked_in_its_cgroup(sup)
        monkeypatch.setattr(Zygote, "spawn", die_first)

        handle, report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, config=auto, limits=LIMITS
        )
        assert handle.spawner == "exec" and handle.spawner_fallback is not None
        assert "zygote" in handle.spawner_fallback
        assert gone_or_zombie(standby), "the standby outlived its zygote"
        pid = report["pid"]
        child = handle._child
        assert child is not None and child.cgroup is not None
        assert child.cgroup.dirs == ahead.dirs, "the claimed cgroup is the child's"
        assert await _members_become(child.cgroup, {pid}) == {pid}
        if handle.host.enforces("pids"):
            assert _pids_max(child.cgroup) == "77"
        result = await handle.cancel()
        assert result.status == "aborted"

        monkeypatch.setattr(Zygote, "spawn", spawn)
        with anyio.fail_after(DEADLINE):
            after = await sup.run("finish", agent=ACT, workspace=HERE, config=auto)
        assert after.success, after  # the runs after it start as usual
    assert gone_or_zombie(zygote.pid)
    assert cgroups_named(f"tether-{os.getpid()}-") == [], "a cgroup outlived the supervisor"


async def test_closing_the_supervisor_removes_the_standby_cgroup_with_its_standby() -> None:
    async with Supervisor(ZYGOTE) as sup:
        _, standby, ahead = await _parked_in_its_cgroup(sup)
    assert gone_or_zombie(standby), "the standby lives on"
    for d in ahead.dirs.values():
        assert not Path(d).exists(), f"{d} outlived the supervisor"


async def test_a_memory_limit_below_what_the_standby_holds_ends_the_run_as_oom(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On cgroup v1 the kernel refuses the limit (EBUSY): the standby is let go with its cgroup
    # and the child gets a new one; on v2 it reclaims, then kills what does not fit.
    # A second's delay before the next standby: on a loaded host the zygote could otherwise
    # park one between the release and the spawn, and a standby that joins the child's cgroup
    # at the request brings the pages its rehearsal copied charged where it was (≈ 5 MiB
    # under no limit), so the child it becomes fits in 2 MiB.
    monkeypatch.setattr(zygote_command, "STANDBY_AFTER", 1.0)
    async with Supervisor(ZYGOTE) as sup:
        if not sup.host.enforces("memory"):
            pytest.skip("this host's cgroups carry no memory limit")
        _, standby, ahead = await _parked_in_its_cgroup(sup)
        with anyio.fail_after(DEADLINE):
            result = await sup.run("finish", agent=ACT, workspace=HERE, limits=Limits(memory="2M"))
        assert not result.success and result.failure is not None, result
        assert result.failure.kind == "oom", result.failure
        assert gone_or_zombie(standby), "the standby outlived the claim of its cgroup"
        if "memory" in ahead.dirs:  # v1: refused, so the cgroup was let go
            assert not any(d.exists() for d in ahead.dirs.values())
        with anyio.fail_after(DEADLINE):
            after = await sup.run("finish", agent=ACT, workspace=HERE)
        assert after.success, after


async def test_a_zygote_that_forks_no_standby_gets_no_cgroup_made_for_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(zygote_command, "STANDBY_AFTER", None)
    async with Supervisor(ZYGOTE) as sup:
        zygote = await _one_run(sup)
        with anyio.fail_after(DEADLINE):
            again = await sup.run("finish", agent=ACT, workspace=HERE)
        assert again.success, again
        assert zygote.standby_cgroups == []
        assert cgroups_named(f"tether-{os.getpid()}-zygote-") == []
        assert zygote.forks == {"standby": 0, "fresh": 2}
