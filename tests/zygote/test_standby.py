"""The zygote's standby: a child forked ahead of any request, which holds nothing of the
zygote's, is handed the next spawn whole, and never outlives or leaks from the zygote.

(Every guarantee of a zygote child is also proven for a child handed to the standby: see the
`how_children_start` fixture of `test_zygote.py` and the attack test of `tests/sandbox`.)
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import psutil
import pytest
from act_reports import ACT, HERE, gone_or_zombie

from tether.parent.process import zygote_command
from tether.parent.process.zygote import Zygote
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio

ZYGOTE = ChildConfig(spawner="zygote")
DEADLINE = 10.0


async def _parked(zygote: Zygote) -> int:
    pid = await zygote.parked(within=DEADLINE)
    assert pid is not None, "the standby never parked"
    return pid


async def _runs_at_once(sup: Supervisor, n: int) -> list[RunResult]:
    """`n` runs of the reporting agent started together; their results, all of them."""
    results: list[RunResult] = []

    async def one() -> None:
        results.append(await sup.run("finish", agent=ACT, workspace=HERE))

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
    assert len(results) == n
    return results


async def _reaped(pid: int) -> bool:
    """Whether `pid` is gone entirely (not even a zombie) within the deadline."""
    with anyio.move_on_after(DEADLINE):
        while psutil.pid_exists(pid):
            await anyio.sleep(0.02)
        return True
    return False


async def test_a_parked_standby_holds_nothing_of_the_zygote_but_dev_null_and_its_own_socket() -> (
    None
):
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        pid = await _parked(zygote)
        proc = psutil.Process(pid)
        assert proc.ppid() == zygote.pid
        fds = {int(n): os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")}
        assert {fds[n] for n in (0, 1, 2)} == {"/dev/null"}
        rest = [target for n, target in fds.items() if n > 2]
        assert len(rest) == 1 and rest[0].startswith("socket:"), fds
        assert proc.num_threads() == 1, "the standby is single-threaded while it waits"
        assert os.getpgid(pid) == os.getpgid(zygote.pid), "no session of its own before a request"


async def test_a_parked_standby_still_shows_the_zygotes_environment_tree_marker_included() -> None:
    # Before it parks, a standby writes the block /proc/PID/environ reads over with itself (it
    # copies the page there, not at the request): the bytes must not change, or the sweeps
    # would see a process without its tree marker.
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        standby = await _parked(zygote)
        seen = Path(f"/proc/{standby}/environ").read_bytes()
        assert seen == Path(f"/proc/{zygote.pid}/environ").read_bytes()
        assert b"TETHER_TREE=" in seen


async def test_a_spawn_after_a_pause_is_handed_to_the_standby_and_runs_to_its_result() -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        standby = await _parked(zygote)
        with anyio.fail_after(DEADLINE):
            result = await sup.run("finish", agent=ACT, workspace=HERE)
        assert result.success, result
        assert result.summary == f"pid {standby}"
        assert zygote.forks == {"standby": 1, "fresh": 0}
        # Once the zygote is idle again it parks a new standby.
        assert await _parked(zygote) != standby


async def test_spawns_that_come_at_once_all_succeed_each_in_a_child_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first is handed the parked standby; the others are forked on request, or handed a
    # standby forked between two of them (2 ms after a request while spawns come back to back:
    # a loaded machine can leave such a gap between two of the four requests).
    monkeypatch.setattr(zygote_command, "STANDBY_AFTER", 1.0)
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        assert zygote.standby_after == 1.0
        await _parked(zygote)
        results = await _runs_at_once(sup, 4)
        assert all(r.success for r in results), results
        assert zygote.forks["standby"] >= 1 and sum(zygote.forks.values()) == 4
        assert len({r.summary for r in results}) == 4, "four different children"


async def _standby_pid(zygote: Zygote, within: float) -> int | None:
    """The zygote's standby (parked or not) once it has one, asked every 50 ms (each ask puts
    the standby's fork off by the delay again, so never faster than that)."""
    with anyio.move_on_after(within):
        while (pid := (await zygote.standby())["pid"]) is None:
            await anyio.sleep(0.05)
        return int(pid)
    return None


async def test_after_spawns_back_to_back_the_standby_is_forked_within_milliseconds_not_the_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Runs one after another come faster than the idle delay: waiting it out, the zygote would
    # never have a standby for them. A spawn alone still waits the delay out.
    monkeypatch.setattr(zygote_command, "STANDBY_AFTER", 60.0)
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        with anyio.fail_after(DEADLINE):
            alone = await sup.run("finish", agent=ACT, workspace=HERE)
        assert alone.success, alone
        assert await _standby_pid(zygote, within=0.5) is None, "one spawn: the delay holds"

        # The last two wait for the first's turn with the zygote: the zygote reads the third
        # request right after it answered the second, however loaded the host.
        results = await _runs_at_once(sup, 3)
        assert all(r.success for r in results), results
        standby = await _standby_pid(zygote, within=DEADLINE)
        assert standby is not None, "no standby forked after spawns back to back"
        assert sum(zygote.forks.values()) == 4
        with anyio.fail_after(DEADLINE):
            handed = await sup.run("finish", agent=ACT, workspace=HERE)
        assert handed.success and handed.summary == f"pid {standby}", handed


async def test_a_standby_killed_while_parked_is_reaped_and_the_next_spawn_is_forked() -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        standby = await _parked(zygote)
        os.kill(standby, signal.SIGKILL)
        assert await _reaped(standby), "the zygote reaps a standby that died while parked"
        assert (await zygote.standby())["lost"] == 1
        with anyio.fail_after(DEADLINE):
            result = await sup.run("finish", agent=ACT, workspace=HERE)
        assert result.success, result
        assert result.summary != f"pid {standby}"
        assert sum(zygote.forks.values()) == 1


async def test_after_three_standbys_died_the_zygote_forks_no_more_and_still_forks_children() -> (
    None
):
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        lost: list[int] = []
        while len(lost) < 3:
            pid = await _parked(zygote)
            os.kill(pid, signal.SIGKILL)
            assert await _reaped(pid)
            lost.append(pid)
        await anyio.sleep(10 * (zygote.standby_after or 0.0) + 0.2)
        got = await zygote.standby()
        assert got == {"pid": None, "parked": False, "lost": 3}, got
        with anyio.fail_after(DEADLINE):
            result = await sup.run("finish", agent=ACT, workspace=HERE)
        assert result.success, result
        assert zygote.forks == {"standby": 0, "fresh": 1}


async def test_closing_the_supervisor_takes_a_parked_standby_down_with_the_zygote() -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        standby = await _parked(zygote)
    deadline = time.monotonic() + DEADLINE
    while not gone_or_zombie(standby):
        assert time.monotonic() < deadline, "the standby outlived its zygote"
        await anyio.sleep(0.02)


async def test_a_standby_dies_with_its_zygote_when_the_zygote_is_killed_outright() -> None:
    async with Supervisor(ZYGOTE) as sup:
        zygote = await sup._zygote_ready()
        # Caught as soon as it is forked (most often while it still rehearses).
        deadline = time.monotonic() + DEADLINE
        standby = None
        while standby is None:
            assert time.monotonic() < deadline, "no standby was forked"
            await anyio.sleep(0.001)
            kids = psutil.Process(zygote.pid).children()
            standby = kids[0].pid if kids else None
        os.kill(zygote.pid, signal.SIGKILL)
        while not gone_or_zombie(standby):
            assert time.monotonic() < deadline, "the standby outlived its zygote"
            await anyio.sleep(0.005)
