"""A raw child (`spawn_child(..., wire="raw")`): the caller speaks whatever protocol on its pipes,
the supervisor keeps the rest — stderr ring, exit watch, and a ladder without a `shutdown`
rung."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import anyio
import pytest

from tether.parent.process.config import ChildConfig
from tether.parent.process.host import host
from tether.parent.process.launchers import LaunchContext, Launcher
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.spawn import spawn_child
from tether.parent.process.supervised import SupervisedChild, SupervisedProcess

pytestmark = pytest.mark.anyio

QUICK = DisposePolicy(shutdown=5.0, eof=0.5, term=0.5, kill=2.0)


async def raw(code: str) -> SupervisedProcess:
    cfg = ChildConfig(command=(sys.executable, "-I", "-c", code), dispose=QUICK)
    return await spawn_child(cfg, Limits(), host(), "raw", wire="raw")


async def test_the_caller_owns_the_pipes_and_the_ladder_starts_at_closing_stdin() -> None:
    child = await raw("import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)")
    assert not isinstance(child, SupervisedChild)
    async with child:
        await child.proc.stdin.send(b"hello\n")
        with anyio.fail_after(10):
            got = b""
            while not got.endswith(b"\n"):
                got += await child.proc.stdout.receive()
    assert got == b"HELLO\n"
    assert child.disposed is not None and child.disposed.rung == "exit"
    assert child.observed.exit_code == 0


async def test_a_raw_child_that_ignores_eof_and_sigterm_is_killed() -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
        "time.sleep(60)\n"
    )
    child = await raw(code)
    async with child:
        with anyio.fail_after(10):
            await child.proc.stdout.receive()
    assert child.disposed is not None and child.disposed.rung == "sigkill"
    assert child.disposed.seconds < QUICK.shutdown  # no shutdown rung was waited


async def test_a_raw_childs_output_ends_when_it_exits_though_its_child_holds_the_pipe() -> None:
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen(['sleep', '60'])\n"
        "print('bye', flush=True)\n"
        "sys.exit(3)\n"
    )
    child = await raw(code)
    async with child:
        got = b""
        with anyio.fail_after(10):
            try:
                while True:
                    got += await child.proc.stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                pass
    assert got == b"bye\n"
    assert child.observed.exit_code == 3 and child.disposed is not None
    assert child.disposed.survivors == []


@dataclasses.dataclass(frozen=True)
class _BrokenLauncher(Launcher):
    name: str = "broken"

    def argv(self, ctx: LaunchContext) -> list[str]:
        raise ValueError("this launcher cannot build a command line")


def _our_cgroups() -> set[Path]:
    return {
        d
        for parent in host().parents.values()
        for d in parent.glob(f"tether-{os.getpid()}-*")
        if d.is_dir()
    }


async def test_a_launcher_that_fails_before_the_spawn_leaves_no_cgroup_behind() -> None:
    # The child's cgroup is made right before the spawner runs, after everything that can fail
    # without a process (a zygote's standby may already wait in it).
    before = _our_cgroups()
    cfg = ChildConfig(command=(sys.executable, "-I", "-c", "pass"), dispose=QUICK)
    with pytest.raises(ValueError, match="cannot build a command line"):
        await spawn_child(cfg, Limits(), host(), "broken", launcher=_BrokenLauncher(), wire="raw")
    assert _our_cgroups() == before
