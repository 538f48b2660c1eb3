"""The v2 cgroup mechanics every tier with a `unified` directory uses (`hybrid` here, `cgroup2`
where the host has its controllers): `cgroup.kill`, freeze-then-kill, `cgroup.events` for
emptiness, the keeper's kill and removal, and the choice of tier. Real cgroups, real processes;
skipped with the host's reason where no v2 hierarchy can be written.

What needs the v2 controllers (`memory.max`, `pids.max`, `memory.events`) runs on the
`cgroup2` tier only, and is skipped with the host's reason elsewhere (the limit tests in
tests/limits/ also run on every tier through the `tier` fixture).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent.process.cgroups import ChildCgroup
from tether.parent.process.host import TIERS, Host, available, choose, host, probe
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.supervisor import ChildConfig, Supervisor

CHILDREN = Path(__file__).parent.parent / "children"
FORK_LOOP = (
    "import os, time\n"
    "while True:\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(30)\n"
    "            os._exit(0)\n"
    "    except OSError:\n"
    "        pass\n"
    "    time.sleep(0.01)\n"
)


def _v2_host() -> Host:
    """A tier whose children get a v2 cgroup here (`hybrid`, or `cgroup2`); skips otherwise."""
    for tier in ("hybrid", "cgroup2"):
        got = probe(tier)
        if available(got):
            return host(tier)
    pytest.skip(f"no writable cgroup v2 hierarchy here: {probe('hybrid').why}")


@pytest.fixture
def v2cg() -> Iterator[ChildCgroup]:
    """A fresh v2 cgroup (plus the tier's v1 directories), killed and removed afterwards."""
    cg = ChildCgroup.create(
        _v2_host(), f"{os.getpid()}-t-{os.urandom(3).hex()}", memory=None, pids=None
    )
    try:
        yield cg
    finally:
        cg.kill()
        deadline = time.monotonic() + 5
        while cg.populated() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cg.remove(), "the test's cgroup could not be removed"


def _join(cg: ChildCgroup, argv: list[str]) -> subprocess.Popen[bytes]:
    """Start `argv` stopped inside `cg` (it joins before its first instruction runs)."""
    procs = " ".join(f"echo $$ > {p};" for p in cg.procs_files)
    return subprocess.Popen(["/bin/sh", "-c", f'{procs} exec "$0" "$@"', *argv])


def _wait(until: Callable[[], bool], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not until():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_auto_prefers_hybrid_to_cgroup1_and_cgroup2_to_both() -> None:
    v2 = Host("cgroup2", {"unified": Path("/u")})
    hybrid = Host("hybrid", {"unified": Path("/u"), "memory": Path("/m")})
    v1 = Host("cgroup1", {"memory": Path("/m"), "freezer": Path("/f")})
    gone = Host("cgroup2", why="no controllers")
    pg = Host("process-group")
    assert choose({"cgroup2": v2, "hybrid": hybrid, "cgroup1": v1, "process-group": pg}) == v2
    assert choose({"cgroup2": gone, "hybrid": hybrid, "cgroup1": v1, "process-group": pg}) == hybrid
    no_hybrid = Host("hybrid", why="no v2 mount")
    assert choose({"cgroup2": gone, "hybrid": no_hybrid, "cgroup1": v1}) == v1
    fallback = choose({"cgroup2": gone, "hybrid": no_hybrid, "cgroup1": Host("cgroup1", why="x")})
    assert fallback.tier == "process-group"
    assert "hybrid: no v2 mount" in fallback.why
    assert TIERS.index("hybrid") < TIERS.index("cgroup1")


def test_a_hybrid_child_cgroup_takes_its_limits_from_v1_where_v1_has_them() -> None:
    got = _v2_host()
    if got.tier != "hybrid":
        pytest.skip("this host offers the full cgroup2 tier")
    assert "unified" in got.parents
    for controller in ("memory", "pids"):
        assert got.enforces(controller) == (controller in got.parents)
    assert got.v2_files & {"cgroup.kill", "cgroup.freeze"} and "cgroup.events" in got.v2_files


def test_cgroup_kill_takes_down_a_fork_loop_whole(v2cg: ChildCgroup) -> None:
    if "cgroup.kill" not in v2cg.host.v2_files and v2cg.host.tier == "hybrid":
        pytest.skip("this kernel has no cgroup.kill (before 5.14)")
    loop = _join(v2cg, [sys.executable, "-I", "-c", FORK_LOOP])
    try:
        assert _wait(lambda: len(v2cg.members()) >= 5), "the fork loop never got going"
        v2cg.kill()
        assert _wait(lambda: v2cg.populated() is False, 5), v2cg.members()
        assert loop.wait(timeout=5) == -signal.SIGKILL
    finally:
        loop.kill()
        loop.wait()


def test_freezing_then_killing_each_member_takes_down_a_fork_loop(v2cg: ChildCgroup) -> None:
    # The path for kernels without cgroup.kill, run here for real.
    if "cgroup.freeze" not in v2cg.host.v2_files and v2cg.host.tier == "hybrid":
        pytest.skip("this kernel has no cgroup.freeze (before 5.2)")
    loop = _join(v2cg, [sys.executable, "-I", "-c", FORK_LOOP])
    try:
        assert _wait(lambda: len(v2cg.members()) >= 5), "the fork loop never got going"
        deadline = time.monotonic() + 5
        while v2cg.populated() and time.monotonic() < deadline:
            v2cg.freeze_and_kill()
            time.sleep(0.01)
        assert v2cg.populated() is False, v2cg.members()
        assert loop.wait(timeout=5) == -signal.SIGKILL
        unified = v2cg.dirs["unified"]
        assert (unified / "cgroup.freeze").read_text().strip() == "0", "left frozen"
    finally:
        loop.kill()
        loop.wait()


def test_waiting_for_emptiness_wakes_when_the_last_member_exits(v2cg: ChildCgroup) -> None:
    sleeper = _join(v2cg, ["/bin/sleep", "0.4"])
    try:
        assert _wait(lambda: v2cg.populated() is True)

        async def wait() -> float:
            started = time.monotonic()
            with anyio.fail_after(10):
                await v2cg.wait_empty()
            return time.monotonic() - started

        took = anyio.run(wait)
        # It slept through the member's life, and woke at its exit (the exit is what ends
        # the wait: it is not a timer).
        assert v2cg.populated() is False
        assert 0.2 < took < 5
        # Zombies do not count: the sleeper is not reaped yet, and the cgroup is empty.
        assert sleeper.poll() == 0 or psutil.Process(sleeper.pid).status() == "zombie"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_waiting_for_an_empty_cgroup_returns_at_once(v2cg: ChildCgroup) -> None:
    async def wait() -> None:
        with anyio.fail_after(2):
            await v2cg.wait_empty()

    anyio.run(wait)


def test_waiting_for_emptiness_works_with_descriptors_past_1023(v2cg: ChildCgroup) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        sleeper = _join(v2cg, ["/bin/sleep", "0.2"])

        async def wait() -> None:
            with anyio.fail_after(10):
                await v2cg.wait_empty()

        anyio.run(wait)
        sleeper.wait(timeout=5)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.anyio
async def test_a_hybrid_run_is_torn_down_through_its_v2_cgroup(
    tmp_path: Path, thread_runs: Callable[[int], bool]
) -> None:
    got = _v2_host()
    pids = tmp_path / "pids"
    # A child that leaves a daemon outside its session with a scrubbed environment, then
    # ignores SIGTERM: only the cgroup still links the daemon to it.
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pids)!r}, 'w').write(str(os.getpid()))\n"
        "        os.execve('/bin/sleep', ['sleep', '60'], {})\n"
        "    os._exit(0)\n"
        "time.sleep(60)\n"
    )
    config = ChildConfig(
        containment=got.tier, dispose=DisposePolicy(shutdown=0.2, eof=0.2, term=0.3, kill=2.0)
    )
    async with Supervisor(config) as sup:
        handle = await sup.start(
            "go",
            workspace=tmp_path,
            command=[sys.executable, "-I", "-c", code],
            limits=Limits(wall="1.5s"),
        )
        with anyio.fail_after(20):
            while not pids.exists() or not pids.read_text():
                await anyio.sleep(0.01)
        child = sup._live.get(handle.pid or -1)
        assert child is not None and child.cgroup is not None
        dirs = list(child.cgroup.dirs.values())
        unified = dirs[0].name
        own = Path(f"/proc/{pids.read_text()}/cgroup").read_text().splitlines()
        assert f"0::/{unified}" in own or any(ln.startswith("0::") and unified in ln for ln in own)
        result = await handle.result()
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert result.containment == got.tier
    assert result.failure.rung == "sigkill"
    daemon = int(pids.read_text())
    assert not thread_runs(daemon)
    assert all(not d.exists() for d in dirs), "the child's cgroups were not removed"


def test_the_keeper_kills_and_removes_a_sigkilled_supervisors_cgroups(
    read_line: Callable[[subprocess.Popen[bytes], float], bytes],
) -> None:
    got = host()
    if not got.parents:
        pytest.skip(f"no cgroup tier on this host: {got.why}")
    supervisor = subprocess.Popen(
        [sys.executable, "-I", str(CHILDREN / "parent_host.py")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        line = read_line(supervisor, 20)
        assert line, "the supervisor never reported its child"
        reported = json.loads(line)
        mine = f"tether-{supervisor.pid}-"
        dirs = [d for p in got.parents.values() for d in p.iterdir() if d.name.startswith(mine)]
        assert len(dirs) == len(got.parents), dirs  # one per hierarchy, the child's
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=10)
        assert _wait(lambda: not any(d.exists() for d in dirs), 10), "cgroups left behind"
        for pid in [reported["child"], *reported["grandchildren"]]:
            assert _wait(lambda pid=pid: not _running(pid), 5), pid
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        assert supervisor.stdout is not None
        supervisor.stdout.close()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- the controllers only the cgroup2 tier has ------------------------------------------------


def _cgroup2() -> Host:
    got = probe("cgroup2")
    if not available(got):
        pytest.skip(f"the cgroup2 tier is not available here: {got.why}")
    return host("cgroup2")


def test_a_cgroup2_child_cgroup_carries_memory_max_and_pids_max() -> None:
    cg = ChildCgroup.create(_cgroup2(), f"{os.getpid()}-c2", memory=64 << 20, pids=16)
    try:
        d = cg.dirs["unified"]
        assert (d / "memory.max").read_text().strip() == str(64 << 20)
        assert (d / "pids.max").read_text().strip() == "16"
    finally:
        cg.remove()


@pytest.mark.anyio
async def test_a_cgroup2_oom_is_read_from_memory_events(tmp_path: Path) -> None:
    _cgroup2()
    hog = "x = []\nwhile True:\n    x.append(bytearray(8 << 20))\n"
    async with Supervisor(ChildConfig(containment="cgroup2")) as sup:
        result = await sup.run(
            "go",
            workspace=tmp_path,
            command=[sys.executable, "-I", "-c", hog],
            limits=Limits(memory="64M", wall="20s"),
        )
    assert result.failure is not None and result.failure.kind == "oom", result
    assert "MemoryError" not in result.failure.stderr_tail  # killed by the cgroup, not rlimit


def test_doctor_names_the_hybrid_tier_and_how_it_tears_a_tree_down() -> None:
    from tether.parent.cli import doctor

    got = doctor.report()
    assert "hybrid" in got["cgroups"] and got["tiers"]["hybrid"] == available(probe("hybrid"))
    if host().tier != "hybrid":
        pytest.skip(f"auto picks {host().tier} here")
    assert got["auto"]["tier"] == "hybrid"
    assert "v2 cgroup" in got["auto"]["teardown"]
    assert "auto picks hybrid" in doctor.render(got)
    assert "teardown: cgroup." in doctor.render(got)
