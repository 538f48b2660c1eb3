"""The `pidns` launcher: a child in a PID namespace of its own, classified as if it were not.

Real children under a real `Supervisor`: the namespace must not change how a death reads
(exit codes and crash signals pass through the shim unchanged), the ladder's rungs must still
reach the command, and nothing the command started may outlive it, also when the launcher
process itself is SIGKILLed from outside (what the kernel does for us when a Ray node host
dies).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent import ChildConfig, Supervisor
from tether.parent.process.launchers import Pidns, resolve_launcher
from tether.parent.process.limits import DisposePolicy

pytestmark = pytest.mark.anyio

CHILDREN = Path(__file__).parent.parent / "children"
CONFIG = ChildConfig(
    launcher="pidns", dispose=DisposePolicy(shutdown=0.3, eof=0.5, term=1.0, kill=1.0)
)


def child(name: str, *args: str) -> list[str]:
    return [sys.executable, "-I", str(CHILDREN / name), *args]


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def test_the_launcher_is_registered_and_maps_a_user_namespace_only_without_root() -> None:
    launcher = resolve_launcher("pidns")
    assert isinstance(launcher, Pidns)
    from tether.parent.process.launchers import LaunchContext
    from tether.parent.process.limits import Limits

    ctx = LaunchContext(
        command=["cmd", "arg"], env={}, explicit_env={}, workspace="/", limits=Limits()
    )
    argv = launcher.argv(ctx)
    assert argv[-3:] == ["--", "cmd", "arg"]
    assert ("--user" in argv) == (os.geteuid() != 0)
    assert "--user" in Pidns(user=True).argv(ctx)


@pytest.mark.parametrize(("how", "signal_name"), [("abort", "SIGABRT"), ("SIGSEGV", "SIGSEGV")])
async def test_a_crash_inside_the_namespace_reads_as_the_same_crash(
    tmp_path: Path, how: str, signal_name: str
) -> None:
    async with Supervisor(CONFIG) as sup:
        result = await sup.run("x", command=child("signal_self.py", how), workspace=tmp_path)
    assert result.failure is not None
    assert (result.failure.kind, result.failure.signal) == ("crashed", signal_name)


async def test_an_exit_status_passes_through_the_namespace(tmp_path: Path) -> None:
    async with Supervisor(CONFIG) as sup:
        result = await sup.run("x", command=child("exit_mid_run.py"), workspace=tmp_path)
    assert result.failure is not None and result.failure.kind == "exit_nonzero"
    assert result.failure.exit_code == 1


async def test_the_sigterm_rung_reaches_the_command_inside_the_namespace(tmp_path: Path) -> None:
    # `deaf` ignores EOF but dies of SIGTERM: as pid 1 of its namespace it would not.
    async with Supervisor(CONFIG) as sup:
        handle = await sup.start("x", command=child("deaf.py"), workspace=tmp_path)
        await anyio.sleep(0.5)
        result = await handle.cancel()
    assert result.failure is not None and result.failure.rung == "sigterm"
    assert "sigterm" in result.failure.stderr_tail


async def test_a_setsid_daemon_dies_when_the_launcher_is_sigkilled_from_outside(
    tmp_path: Path, host_pid: Callable[[Path], int]
) -> None:
    pidfile = tmp_path / "daemon"
    async with Supervisor(CONFIG) as sup:
        handle = await sup.start(
            "x", command=child("daemon_then_wait.py", str(pidfile)), workspace=tmp_path
        )
        with anyio.fail_after(20):
            while not pidfile.exists() or not pidfile.read_text():
                await anyio.sleep(0.02)
        daemon = host_pid(pidfile)
        assert handle.pid is not None
        assert psutil.Process(daemon).status() != psutil.STATUS_ZOMBIE
        os.kill(handle.pid, signal.SIGKILL)  # no ladder: only the kernel can clean up
        assert _gone_within(daemon, 2.0), "the daemon outlived its namespace"
        result = await handle.result()
    assert result.failure is not None and result.failure.kind == "killed"


async def test_the_command_sees_only_its_own_namespace_in_proc(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    async with Supervisor(CONFIG) as sup:
        result = await sup.run("x", command=child("env_dump.py", str(dump)), workspace=tmp_path)
    assert result.success, result.message
    seen = json.loads(dump.read_text())
    # init is pid 1, the command pid 2; the host's processes (the supervisor's among them)
    # are not there to read.
    assert seen["pid"] == 2
    assert seen["proc_pids"] == [1, 2]
