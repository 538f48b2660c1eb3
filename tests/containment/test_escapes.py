"""Children that try to outlive their dispose leave nothing behind, on every containment tier
that can see them (the tier is in each test's id; a tier this host lacks is skipped with the
reason, and so is an escape a tier cannot see, as docs/containment.md says).

Each escapee records its pid in the workspace before the child lets the run end, so a test can
check that it existed and is gone; the autouse reaper also fails a test that leaves a marked
process or a descendant behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tether.parent.process.cgroups import ChildCgroup, sweep_stale
from tether.parent.process.host import Host, host
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

LONE_THREAD = Path(__file__).parent.parent / "children" / "lone_thread.py"
FAST = ChildConfig(
    dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0), handshake_timeout=5.0
)


def on(tier: str) -> ChildConfig:
    return dataclasses.replace(FAST, containment=tier)


def py(code: str) -> list[str]:
    return [sys.executable, "-I", "-c", code]


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def alive(pid: int, token: str = "") -> bool:
    """Whether `pid` is a live process (and, with `token`, one whose command line has it)."""
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return not token or token in " ".join(p.cmdline())
    except psutil.NoSuchProcess:
        return False


def kill_leftovers(token: str) -> list[int]:
    """SIGKILL processes whose command line carries `token`; returns their pids (the reaper
    cannot see a daemon that scrubbed its environment, so the test cleans up after a failure)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if token in " ".join(p.info["cmdline"] or []):
            found.append(p.pid)
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    return found


def waits_for(path: Path, count: int = 1) -> str:
    """Child code: wait (at most 10 s) until `path` lists `count` pids."""
    return (
        "import time as _t\n"
        "_end = _t.monotonic() + 10\n"
        f"while _t.monotonic() < _end:\n"
        "    try:\n"
        f"        if len(open({str(path)!r}).read().split()) >= {count}:\n"
        "            break\n"
        "    except OSError:\n"
        "        pass\n"
        "    _t.sleep(0.005)\n"
    )


def record(path: Path, indent: int) -> str:
    """Child code, indented `indent` spaces: append this process's pid to `path`."""
    return " " * indent + f"open({str(path)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"


@pytest.mark.parametrize("scrubbed", [False, True], ids=["env-kept", "env-scrubbed"])
async def test_a_setsid_double_fork_daemon_is_gone_after_dispose(
    tmp_path: Path, tier: str, scrubbed: bool
) -> None:
    if tier == "process-group" and scrubbed:
        pytest.skip(
            "the process-group tier cannot see a daemon that left the session and scrubbed its "
            "environment (docs/containment.md); only a cgroup sees it"
        )
    pids = tmp_path / "daemon.pid"
    token = f"{3000 + os.getpid() % 1000}.{tmp_path.name[-6:].replace('_', '')}1"
    env = "{}" if scrubbed else "os.environ"
    code = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        + record(pids, 8)
        + f"        os.execve('/bin/sleep', ['sleep', {token!r}], {env})\n"
        "    os._exit(0)\n" + waits_for(pids) + "raise SystemExit(4)\n"
    )
    try:
        async with Supervisor(on(tier)) as sup:
            result = await sup.run("go", workspace=tmp_path, command=py(code))
        assert result.failure is not None and result.failure.kind == "exit_nonzero", result
        assert result.containment == tier
        [daemon] = pids_in(pids)
        assert not alive(daemon, token)
    finally:
        assert kill_leftovers(token) == []


@pytest.mark.parametrize("setsid", [False, True], ids=["in-session", "setsid"])
async def test_a_process_whose_main_thread_exited_alone_is_gone_after_dispose(
    tmp_path: Path, tier: str, setsid: bool, thread_runs: Callable[[int], bool]
) -> None:
    # Its leader thread is a zombie while another thread runs on: a sweep that judged it by
    # its leader's state (or a kernel `cgroup.kill`, which signals that thread alone) left it
    # running, and its own environment block reads empty (the marker is read via a thread).
    pids = tmp_path / "lone.pid"
    # As `-c`: the sandbox grants no read of the tests' directory.
    lone_code = LONE_THREAD.read_text()
    argv = [sys.executable, "-I", "-c", lone_code, str(pids), *(["--setsid"] if setsid else [])]
    code = (
        f"import subprocess\nsubprocess.Popen({argv!r})\n"
        + waits_for(pids)
        + ("raise SystemExit(4)\n")
    )
    async with Supervisor(on(tier)) as sup:
        result = await sup.run("go", workspace=tmp_path, command=py(code))
    assert result.failure is not None and result.failure.kind == "exit_nonzero", result
    assert result.containment == tier
    assert "could not be killed" not in result.message, result.message
    [lone] = pids_in(pids)
    assert not thread_runs(lone), "a thread of the process outlived the dispose"


async def test_a_fork_loop_is_gone_after_dispose(tmp_path: Path, tier: str) -> None:
    # Hoppers fork and exit over and over, so their pid changes all the time; the child itself
    # forks as fast as it can. All of them ignore SIGTERM, so the kill rung is reached.
    pids = tmp_path / "hoppers.pid"
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n" + record(pids, 8) + "        while True:\n"
        "            try:\n"
        "                if os.fork():\n"
        "                    os._exit(0)\n"
        "            except OSError:\n"
        "                pass\n"
        "            time.sleep(0.002)\n" + waits_for(pids, 3) + "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
    )
    async with Supervisor(on(tier)) as sup:
        started = time.monotonic()
        result = await sup.run("go", workspace=tmp_path, command=py(code), limits=Limits(wall="1s"))
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert result.failure.rung == "sigkill"
    assert result.containment == tier
    assert len(pids_in(pids)) == 3
    assert time.monotonic() - started < 10


async def test_a_stopped_child_and_its_stopped_grandchild_are_gone_after_dispose(
    tmp_path: Path, tier: str
) -> None:
    pids = tmp_path / "stopped.pid"
    code = (
        "import os, signal, time\n"
        "if os.fork() == 0:\n" + record(pids, 4) + "    os.kill(os.getpid(), signal.SIGSTOP)\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n" + waits_for(pids) + "os.kill(os.getpid(), signal.SIGSTOP)\n"
    )
    async with Supervisor(on(tier)) as sup:
        handle = await sup.start(
            "go", workspace=tmp_path, command=py(code), limits=Limits(wall="1s")
        )
        result = await handle.result()
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert result.containment == tier
    [grandchild] = pids_in(pids)
    assert handle.pid is not None and not alive(handle.pid)
    assert not alive(grandchild)


@contextlib.contextmanager
def private_parents(tier: str) -> Iterator[Host]:
    """The tier's host with each parent moved one level down into a directory of this test's
    own: every supervisor's first start sweeps the real parents (`sweep_stale_once`), so in a
    parallel run another worker's sweep could take a stale cgroup this test plants there."""
    real = host(tier)
    mine = {
        k: p / f"sweep-test-{os.getpid()}-{time.monotonic_ns()}" for k, p in real.parents.items()
    }
    try:
        for d in mine.values():
            d.mkdir()
        yield dataclasses.replace(real, parents=mine)
    finally:
        for d in mine.values():
            with contextlib.suppress(FileNotFoundError):
                d.rmdir()


def test_a_cgroup_left_by_a_killed_supervisor_is_swept_with_its_members(tier: str) -> None:
    if tier == "process-group":
        pytest.skip("the process-group tier has no cgroups to leave behind")
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=5)  # its pid now names no live supervisor
    with private_parents(tier) as cgroups:
        live = ChildCgroup.create(cgroups, f"{os.getpid()}-x", memory=None, pids=None)
        cg = ChildCgroup.create(cgroups, f"{dead.pid}-x", memory=None, pids=None)
        sleeper = subprocess.Popen(["sleep", "60"])
        try:
            for procs in cg.procs_files:
                Path(procs).write_text(str(sleeper.pid))
            assert sleeper.pid in cg.members()
            removed = sweep_stale(cgroups)
            assert sorted(removed) == sorted(cg.dirs.values())
            assert all(not d.exists() for d in cg.dirs.values())
            assert all(d.is_dir() for d in live.dirs.values()), "a live owner's cgroup was swept"
            assert sleeper.wait(timeout=5) == -signal.SIGKILL
        finally:
            sleeper.kill()
            sleeper.wait(timeout=5)
            for c in (cg, live):
                c.kill()
                assert c.remove()
