"""Requests to the zygote are awaited, one on its socket at a time: a zygote that stalls holds up
only the spawns and reaps waiting for it, never the supervisor's other children; a stall that
ends in time costs nothing; one that does not is given up with its reason; spawns that overlap
each get a child of their own, in a cgroup of their own."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator

import anyio
import psutil
import pytest
from act_reports import ACT, HERE, cgroups_named, gone_or_zombie, start_and_wait_for_report

from tether.parent.process import zygote as zygote_module
from tether.parent.process.env import build_child_env
from tether.parent.process.host import host
from tether.parent.process.limits import DisposePolicy
from tether.parent.process.proc import SpawnError
from tether.parent.process.zygote import Zygote
from tether.parent.supervisor import ChildConfig, RunHandle, Supervisor

pytestmark = pytest.mark.anyio

FAST = DisposePolicy(shutdown=0.3, eof=0.3, term=0.3, kill=1.0)
ZYGOTE = ChildConfig(spawner="zygote", dispose=FAST)
COLD = ChildConfig(spawner="exec", dispose=FAST)
DEADLINE = 15.0
REPLY = 2.0
"""The zygote's reply timeout in these tests (`REPLY_SECONDS`, 5 s by default)."""


@pytest.fixture(autouse=True)
def quick_reply_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote_module, "REPLY_SECONDS", REPLY)


class Ticker:
    """Counts the event loop's turns through a 10 ms sleep, and the longest gap between two:
    what a blocking call on the loop's thread would stretch."""

    def __init__(self) -> None:
        self.longest = 0.0

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(0.01)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now


StopZygote = Callable[[Supervisor], Awaitable[int]]


@pytest.fixture
def stop_zygote() -> Iterator[StopZygote]:
    """`await stop_zygote(sup)`: one run through `sup` (its zygote up and used), then SIGSTOP
    its zygote; returns the zygote's pid. Each stopped zygote is sent SIGCONT on the way out,
    whatever happened."""
    stopped: list[int] = []

    async def stop(sup: Supervisor) -> int:
        first = await sup.run("finish", agent=ACT, workspace=HERE)
        assert first.success, first
        zygote = sup.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGSTOP)
        stopped.append(zygote)
        return zygote

    yield stop
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


async def test_a_stalled_zygote_holds_up_only_its_spawn_and_is_given_up_with_the_reason(
    stop_zygote: StopZygote,
) -> None:
    async with Supervisor(ZYGOTE) as sup, anyio.create_task_group() as tg:
        ticker = Ticker()
        tg.start_soon(ticker.run)
        zygote = await stop_zygote(sup)
        waiting = await sup.start("finish", agent=ACT, workspace=HERE)
        # While that spawn waits for the stopped zygote, a child started by exec runs from
        # spawn to result on the same event loop.
        with anyio.fail_after(REPLY - 0.2):
            cold = await sup.run("finish", agent=ACT, workspace=HERE, config=COLD)
        assert cold.success, cold
        assert not waiting.done, "the stalled spawn ended before its reply timeout"

        with anyio.fail_after(DEADLINE):
            result = await waiting.result()
        tg.cancel_scope.cancel()
    assert result.failure is not None, result
    assert f"the zygote did not answer within {REPLY:g}s" in result.message, result
    assert ticker.longest < REPLY / 2, f"the event loop stalled for {ticker.longest:.2f}s"
    assert gone_or_zombie(zygote), "the zygote that did not answer outlived the supervisor"


async def test_a_zygote_that_stalls_before_telling_a_childs_end_is_given_up_once(
    stop_zygote: StopZygote,
) -> None:
    # The child is up when the zygote stops; it ends, and its verdict never comes: the dispose
    # gives the zygote up after one reply timeout (no second wait for a `reap` request).
    async with Supervisor(ZYGOTE) as sup:
        await stop_zygote(sup)
        os.kill(sup.zygote_pid or 0, signal.SIGCONT)  # the fixture's first run, then:
        handle, report = await start_and_wait_for_report(sup, "hold", deadline=DEADLINE)
        zygote = sup.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGSTOP)
        started = time.monotonic()
        with anyio.fail_after(DEADLINE):
            result = await handle.cancel()
        took = time.monotonic() - started
        assert result.failure is not None, result
        assert REPLY <= took < 2 * REPLY, f"the dispose took {took:.2f}s"
        with anyio.fail_after(DEADLINE):  # SIGKILLed: it dies as soon as the kernel gets to it
            while not (gone_or_zombie(zygote) and gone_or_zombie(report["pid"])):
                await anyio.sleep(0.01)


async def test_the_next_run_after_a_zygote_was_given_up_gets_a_new_zygote(
    stop_zygote: StopZygote,
) -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote = await stop_zygote(sup)
        with anyio.fail_after(DEADLINE):
            given_up = await sup.run("finish", agent=ACT, workspace=HERE)
        assert not given_up.success
        with anyio.fail_after(DEADLINE):
            again = await sup.run("finish", agent=ACT, workspace=HERE)
        assert again.success, again
        assert sup.zygote_pid not in (None, zygote)


async def test_a_zygote_that_stalls_for_less_than_its_reply_timeout_costs_no_run(
    stop_zygote: StopZygote,
) -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote = await stop_zygote(sup)
        handles = [await sup.start("finish", agent=ACT, workspace=HERE) for _ in range(3)]
        await anyio.sleep(REPLY / 4)
        assert not any(h.done for h in handles)
        os.kill(zygote, signal.SIGCONT)
        with anyio.fail_after(DEADLINE):
            results = [await h.result() for h in handles]
        assert all(r.success for r in results), results
        assert sup.zygote_pid == zygote, "a zygote that answered in time was replaced"


async def test_a_run_cancelled_while_its_spawn_waits_for_the_zygote_ends_at_once_and_leaves_nothing(
    stop_zygote: StopZygote,
) -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote = await stop_zygote(sup)
        ahead = await sup.start("finish", agent=ACT, workspace=HERE)  # holds the socket
        await anyio.sleep(0.1)
        behind = await sup.start("finish", agent=ACT, workspace=HERE)  # waits for its turn
        await anyio.sleep(0.1)
        behind.abort()
        with anyio.fail_after(REPLY / 2):
            cancelled = await behind.result()
        assert cancelled.failure is not None and cancelled.failure.kind == "cancelled"
        assert not ahead.done, "the cancel reached the run ahead"
        os.kill(zygote, signal.SIGCONT)
        with anyio.fail_after(DEADLINE):
            done = await ahead.result()
        assert done.success, done
        assert not _tether_cgroups_of(sup), "a cgroup outlived its run"
        # The zygote heard only the request that was sent: it answers the next one in order.
        with anyio.fail_after(DEADLINE):
            after = await sup.run("finish", agent=ACT, workspace=HERE)
        assert after.success, after
        assert sup.zygote_pid == zygote


async def test_spawns_that_overlap_each_get_their_own_child_alone_in_its_own_cgroup() -> None:
    count = 8
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        assert await zygote.parked() is not None or zygote.standby_after is None
        handles: list[RunHandle] = []
        reports: list[dict[str, object]] = []

        async def one() -> None:
            handle, report = await start_and_wait_for_report(sup, "hold", deadline=DEADLINE)
            handles.append(handle)
            reports.append(report)

        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(one)
        pids = {int(str(r["pid"])) for r in reports}
        assert len(pids) == count and pids == {h.pid for h in handles}
        assert zygote.forks["standby"] + zygote.forks["fresh"] == count
        if host().tier != "process-group":
            cgroups = []
            for pid in pids:
                child = sup._live[pid]
                assert child.cgroup is not None
                assert child.cgroup.members() == {pid}, "a child shares its cgroup"
                cgroups.append(tuple(child.cgroup.procs_files))
            assert len(set(cgroups)) == count
        for handle in handles:
            handle.abort()
        with anyio.fail_after(DEADLINE):
            for handle in handles:
                result = await handle.result()
                assert result.failure is not None and result.failure.kind == "cancelled"


def _tether_cgroups_of(sup: Supervisor) -> list[str]:
    """The cgroups of this supervisor's runs that still exist (its zygote's standbys' aside)."""
    standbys = set(sup._zygote.standby_cgroups if sup._zygote else [])
    return [
        str(d)
        for d in cgroups_named(f"tether-{os.getpid()}-")
        if "zygote" not in d.name and d not in standbys
    ]


async def test_processes_a_child_made_the_zygotes_own_are_reaped_by_the_zygote() -> None:
    # Without the sandbox (which refuses CLONE_PARENT), a child can make processes that are
    # the zygote's children; the zygote waits only for what it forked, so it reaps these at
    # its next request instead of keeping their zombies for its whole life.
    async with Supervisor(ChildConfig(spawner="zygote", isolation="process", dispose=FAST)) as sup:
        handle, report = await start_and_wait_for_report(sup, "orphans 20", deadline=DEADLINE)
        result = await handle.result()
        assert result.success, result
        zygote = sup.zygote_pid
        assert zygote is not None
        orphans = {int(str(p)) for p in report["orphans"]}  # type: ignore[attr-defined]
        assert len(orphans) == 20
        with anyio.fail_after(DEADLINE):
            while orphans & {p.pid for p in psutil.Process(zygote).children()}:
                await anyio.sleep(0.02)  # reaped as they die
        assert (await sup.run("finish", agent=ACT, workspace=HERE)).success

        def zombies() -> list[int]:
            kids = psutil.Process(zygote).children()
            return [p.pid for p in kids if p.status() == psutil.STATUS_ZOMBIE]

        # That run's child is reaped once the supervisor lets it go, a moment after its result.
        with anyio.move_on_after(DEADLINE):
            while zombies():
                await anyio.sleep(0.01)
        assert zombies() == [], "the zygote kept zombies"


async def test_processes_a_child_made_the_zygotes_own_are_reaped_the_moment_they_die(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Not at the next request: a zombie the zygote held would be charged to the child's cgroup
    # (its process limit) for as long as the child's run goes on. No request is made here.
    asked: list[object] = []
    exchange = Zygote._exchange

    async def counted(
        self: Zygote, message: dict[str, object], *args: object, **kw: object
    ) -> object:
        asked.append(message.get("op"))
        return await exchange(self, message, *args, **kw)  # type: ignore[arg-type]

    async with Supervisor(ChildConfig(spawner="zygote", isolation="process", dispose=FAST)) as sup:
        handle, report = await start_and_wait_for_report(sup, "strays 20", deadline=DEADLINE)
        zygote = sup.zygote_pid
        assert zygote is not None
        monkeypatch.setattr(Zygote, "_exchange", counted)
        orphans = {int(str(p)) for p in report["orphans"]}  # type: ignore[attr-defined]
        assert len(orphans) == 20
        with anyio.fail_after(DEADLINE):
            while orphans & {p.pid for p in psutil.Process(zygote).children()}:
                await anyio.sleep(0.02)
        assert asked == [], "the zygote was asked something meanwhile"
        assert not handle.done
        handle.abort()
        with anyio.fail_after(DEADLINE):
            await handle.result()


async def test_closing_a_zygote_ends_a_request_waiting_for_its_answer_at_once() -> None:
    zygote = await Zygote.start(build_child_env(os.environ), standby_after=None)
    try:
        os.kill(zygote.pid, signal.SIGSTOP)
        failed: list[str] = []

        async def ask() -> None:
            try:
                await zygote.standby()
            except SpawnError as exc:
                failed.append(str(exc))

        # Well within the reply timeout: the request does not wait it out.
        with anyio.fail_after(REPLY / 2):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await anyio.sleep(0.1)  # the request is sent; no answer can come
                await zygote.aclose(grace=0.2)
        assert failed and "did not answer" not in failed[0], failed
        assert not zygote.usable
        with pytest.raises(SpawnError, match="closed"):
            await zygote.standby()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(zygote.pid, signal.SIGCONT)
        await zygote.aclose()
