"""The warm pool: ready children, each spawned and contained exactly as a cold one, used once."""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent import Continuation
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.cgroup_join import cgroup2_mount
from tether.parent.process.limits import Limits
from tether.parent.run.handle import RunHandle
from tether.parent.supervisor import ChildConfig, PoolSpec, Supervisor
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio

COMPLETE = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
    "arguments": {"summary": "done", "paths": []}}]}]}"""
NEVER_ENDS = '{"turns": [{"text": "thinking", "delay": 30}]}'

SECRET = "TETHER_POOL_TEST_SECRET_TOKEN"
PROCESS = ChildConfig(isolation="process")
"""These tests run each run in a fresh workspace, and a sandboxed child is confined to one
workspace from its start, so a sandboxed pool serves only runs in its own workspace
(`test_sandboxed_pool.py`): here the pool and its runs use process isolation."""
POOL_LIMITS = Limits(open_files=77, file_size="3M", cpu=120)


def _model() -> ScriptedModel:
    return ScriptedModel.from_json(COMPLETE)


async def _ready(sup: Supervisor, count: int | None = None) -> list[int]:
    assert sup.pool is not None
    with anyio.fail_after(20):
        await sup.pool.wait_ready(count)
    return sup.pool.ready_pids


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def _limit(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            return " ".join(line[len(name) :].split()[:2])
    raise AssertionError(f"no {name!r} in /proc/{pid}/limits")


def _waitable(pid: int) -> bool:
    """Whether the child `pid` has exited, without reaping it: its pidfd turns readable (the
    supervisor's own child, or its zygote's)."""
    fd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    finally:
        os.close(fd)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_a_pooled_child_has_the_scrubbed_environment_of_a_cold_spawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SECRET, "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    cfg = ChildConfig(env={"EXPLICIT_ONE": "yes"}, isolation="process")
    async with Supervisor(cfg, pool=PoolSpec(1, limits=POOL_LIMITS)) as sup:
        (pid,) = await _ready(sup)
        env = _environ(pid)
    assert SECRET not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["EXPLICIT_ONE"] == "yes"
    assert env["TETHER_TREE"].startswith(f"{os.getpid()}-")
    assert set(env) <= {"PATH", "HOME", "LANG", "TZ", "TERM", "TMPDIR", "USER", "LOGNAME"} | {
        "SHELL",
        "EXPLICIT_ONE",
        "TETHER_TREE",
    } | {k for k in env if k.startswith("LC_")}


@pytest.mark.parametrize("spawner", ["exec", "zygote"])
async def test_a_pooled_child_runs_under_the_pools_rlimits_in_a_session_of_its_own(
    spawner: str,
) -> None:
    config = ChildConfig(isolation="process", spawner=spawner)
    async with Supervisor(config, pool=PoolSpec(1, limits=POOL_LIMITS)) as sup:
        (pid,) = await _ready(sup)
        assert _limit(pid, "Max open files") == "77 77"
        assert _limit(pid, "Max file size") == f"{3 << 20} {3 << 20}"
        assert _limit(pid, "Max cpu time") == "120 121"
        assert _limit(pid, "Max core file size") == "0 0"
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid
        assert psutil.Process(pid).ppid() == (os.getpid() if spawner == "exec" else sup.zygote_pid)
        assert sup._keeper is not None and pid in sup._live


async def test_a_pooled_child_is_in_a_cgroup_of_its_own_on_a_cgroup_tier() -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(2)) as sup:
        if sup.host.tier == "process-group":
            pytest.skip("this host offers no cgroup tier")
        pids = await _ready(sup)
        cgroups = [Path(f"/proc/{pid}/cgroup").read_text() for pid in pids]
        mine = Path("/proc/self/cgroup").read_text()
    for text in cgroups:
        assert "tether-" in text, text
        assert text != mine
    assert cgroups[0] != cgroups[1]


async def test_a_matching_run_takes_a_ready_child_and_the_pool_refills_with_a_fresh_one(
    tmp_path: Path,
) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        (warm,) = await _ready(sup)
        handle = await sup.start("go", workspace=tmp_path, model=_model())
        result = await handle.result()
        assert result.success, result
        assert handle.pid == warm
        assert _gone(warm)
        (fresh,) = await _ready(sup)
        assert fresh != warm
        second = await sup.start("go", workspace=tmp_path, model=_model())
        assert (await second.result()).success
        assert second.pid == fresh


async def test_a_child_is_never_handed_to_a_second_run(tmp_path: Path) -> None:
    pids = []
    async with Supervisor(PROCESS, pool=PoolSpec(2)) as sup:
        await _ready(sup)
        for _ in range(4):
            handle = await sup.start("go", workspace=tmp_path, model=_model())
            assert (await handle.result()).success
            pids.append(handle.pid)
    assert len(set(pids)) == 4


async def test_a_run_with_other_settings_spawns_cold(tmp_path: Path) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        (warm,) = await _ready(sup)
        handle = await sup.start(
            "go", workspace=tmp_path, model=_model(), limits=Limits(open_files=64)
        )
        assert (await handle.result()).success
        assert handle.pid != warm
        assert sup.pool is not None and sup.pool.ready_pids == [warm]


async def test_wall_and_idle_limits_are_the_runs_and_do_not_stop_a_pooled_match(
    tmp_path: Path,
) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        (warm,) = await _ready(sup)
        handle = await sup.start(
            "go", workspace=tmp_path, model=_model(), limits=Limits(wall="20s", idle="10s")
        )
        assert (await handle.result()).success
        assert handle.pid == warm


async def test_the_wall_deadline_of_a_pooled_run_starts_when_the_run_takes_the_child(
    tmp_path: Path,
) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        (warm,) = await _ready(sup)
        await anyio.sleep(1.2)  # longer than the wall below: a clock started at spawn has run out
        handle = await sup.start(
            "go", workspace=tmp_path, model=_model(), limits=Limits(wall="1s", idle="4s")
        )
        result = await handle.result()
        assert result.success, result
        assert handle.pid == warm
        (fresh,) = await _ready(sup)
        started = time.monotonic()
        slow = await sup.start(
            "go",
            workspace=tmp_path,
            model=ScriptedModel.from_json(NEVER_ENDS),
            limits=Limits(wall="0.8s"),
        )
        timed_out = await slow.result()
        took = time.monotonic() - started
    assert slow.pid == fresh
    assert not timed_out.success and timed_out.failure is not None
    assert timed_out.failure.kind == "timeout"
    assert 0.7 < took < 5


async def test_a_pooled_child_that_dies_while_idle_is_replaced_and_never_handed_out(
    tmp_path: Path,
) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        (warm,) = await _ready(sup)
        os.kill(warm, signal.SIGKILL)
        with anyio.fail_after(20):
            while True:
                assert sup.pool is not None
                pids = sup.pool.ready_pids
                if pids and pids != [warm]:
                    break
                await anyio.sleep(0.01)
        handle = await sup.start("go", workspace=tmp_path, model=_model())
        assert (await handle.result()).success
        assert handle.pid not in (warm, None)
        assert handle.pid == pids[0]


async def test_a_child_that_died_just_before_the_run_is_skipped_and_the_run_spawns_cold(
    tmp_path: Path,
) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        (warm,) = await _ready(sup)
        os.kill(warm, signal.SIGKILL)
        deadline = time.monotonic() + 5
        # Until its exit can be waited for (all its threads gone, not only the leader a zombie);
        # blocking on purpose: the pool's own tasks must not get to see the death first.
        while not _waitable(warm) and time.monotonic() < deadline:
            time.sleep(0.002)  # noqa: ASYNC251
        assert sup.pool is not None and sup.pool.ready_pids == [warm]
        handle = await sup.start("go", workspace=tmp_path, model=_model())
        result = await handle.result()
        assert result.success, result
        assert handle.pid != warm


async def test_closing_the_supervisor_disposes_every_pooled_child() -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(3)) as sup:
        pids = await _ready(sup)
        assert len(pids) == 3
    for pid in pids:
        assert _gone(pid)
    assert not sup._live


async def test_closing_while_children_are_still_starting_leaves_nothing() -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(2)) as sup:
        await anyio.sleep(0.02)
    assert not sup._live


async def test_a_pool_whose_children_cannot_start_backs_off_and_runs_still_spawn_cold(
    tmp_path: Path,
) -> None:
    broken = ChildConfig(command=("/nonexistent/tether-child",), isolation="process")
    async with Supervisor(PROCESS, pool=PoolSpec(1, config=broken)) as sup:
        await anyio.sleep(0.3)
        assert sup.pool is not None and sup.pool.ready_pids == []
        assert sup.pool.last_error and "no such file" in sup.pool.last_error
        handle = await sup.start("go", workspace=tmp_path, model=_model())
        assert (await handle.result()).success


async def test_a_pool_with_a_launcher_other_than_local_is_refused() -> None:
    with pytest.raises(ValueError, match="local"):
        Supervisor(PROCESS, pool=PoolSpec(1, config=ChildConfig(launcher="bwrap")))


def _held_still(pid: int) -> bool:
    """Whether `pid` is held still the way the tier holds a continuable child between
    activations: its v2 cgroup frozen, its v1 freezer cgroup frozen, or the process stopped."""
    if "T (stopped)" in Path(f"/proc/{pid}/status").read_text():
        return True
    mount = cgroup2_mount()
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and mount is not None:
            events = Path(mount[0], path.lstrip("/"), "cgroup.events").read_text().split()
            if events[events.index("frozen") + 1] == "1":
                return True
        if controllers == "freezer":
            state = Path("/sys/fs/cgroup/freezer", path.lstrip("/"), "freezer.state")
            if state.exists() and state.read_text().strip() == "FROZEN":
                return True
    return False


TWO_ACTIVATIONS = """{"turns": [
    {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "first"}}]},
    {"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "second"}}]}]}"""


async def _continuable_from_pool(
    sup: Supervisor, workspace: Path
) -> tuple[RunHandle, int, RunResult]:
    """A continuable run of `TWO_ACTIVATIONS` started once the pool's one child is ready: its
    handle, that child's pid, and the first activation's result."""
    (warm,) = await _ready(sup)
    model = ScriptedModel.from_json(TWO_ACTIVATIONS)
    handle = await sup.start("go", workspace=workspace, model=model, continuation=Continuation(60))
    return handle, warm, await handle.result()


async def test_a_continuable_run_keeps_its_pooled_child_held_still_between_follow_ups(
    tmp_path: Path,
) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        handle, warm, first = await _continuable_from_pool(sup, tmp_path)
        assert first.success and first.summary == "first"
        assert handle.pid == warm  # taken from the pool, not spawned
        assert _held_still(warm)  # between activations its tree is held still
        (fresh,) = await _ready(sup)  # the pool refills while the run keeps its child
        assert fresh != warm
        with anyio.fail_after(20):
            second = await handle.message("again")
        assert second is not None and second.summary == "second"
        assert handle.pid == warm and not _gone(warm)
        handle.close()
        with anyio.fail_after(20):
            await handle.wait()
        assert _gone(warm)  # let go: the pool's task disposed of it
        assert sup.pool is not None and sup.pool.ready_pids == [fresh]
    assert _gone(fresh)


async def test_a_pooled_continuable_child_killed_while_it_idles_ends_its_run_and_the_pool_refills(
    tmp_path: Path,
) -> None:
    async with Supervisor(PROCESS, pool=PoolSpec(1)) as sup:
        handle, warm, first = await _continuable_from_pool(sup, tmp_path)
        assert first.success and handle.pid == warm
        os.kill(warm, signal.SIGKILL)  # reaches a frozen task too
        with anyio.fail_after(20):
            await handle.wait()  # the run's task saw its child go and let it go
        assert await handle.message("again") is None  # too late: no child to take it
        assert _gone(warm)
        (fresh,) = await _ready(sup)
        assert fresh != warm
    assert _gone(fresh)
