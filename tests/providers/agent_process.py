"""Spawn a foreign agent for a test, the way the supervisor's spawn seam will: its own session,
stderr drained into a bounded buffer, and a ladder that always takes its whole tree down
(close stdin → SIGTERM to the group and every descendant → SIGKILL). `isolated` also puts it in
a private network namespace whose only way out is the model gateway."""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
import pytest
from anyio.abc import Process

from tether.parent.gateway import Gateway, Grant

CHILDREN = Path(__file__).parent.parent / "children"
ACP_AGENT = [sys.executable, str(CHILDREN / "acp_agent.py")]
STDERR_CAP = 64 * 1024


@dataclass
class Spawned:
    process: Process
    stderr: bytearray = field(default_factory=bytearray)
    rung: str = "none"
    """How far the ladder had to go: `exit` (stdin closed), `sigterm`, `sigkill`."""

    @property
    def pid(self) -> int:
        return self.process.pid


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal_all(procs: Sequence[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


async def _gone(procs: Sequence[psutil.Process], seconds: float) -> bool:
    with anyio.move_on_after(seconds):
        while any(_alive(p) for p in procs):
            await anyio.sleep(0.02)
        return True
    return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@asynccontextmanager
async def spawned(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    exit_grace: float = 2.0,
    pass_fds: Sequence[int] = (),
) -> AsyncIterator[Spawned]:
    process = await anyio.open_process(
        list(argv),
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
        pass_fds=pass_fds,
    )
    s = Spawned(process)

    async def drain() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            s.stderr += chunk
            del s.stderr[: max(0, len(s.stderr) - STDERR_CAP)]

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            try:
                yield s
            finally:
                with anyio.CancelScope(shield=True):
                    await _ladder(s, exit_grace)
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


async def _ladder(s: Spawned, exit_grace: float) -> None:
    procs = tree(s.pid)
    assert s.process.stdin is not None
    await s.process.stdin.aclose()
    s.rung = "exit"
    if await _gone(procs, exit_grace):
        return
    procs = list({p.pid: p for p in [*procs, *tree(s.pid)]}.values())
    s.rung = "sigterm"
    _signal_all(procs, signal.SIGTERM)
    _signal_all(procs, signal.SIGCONT)
    if await _gone(procs, 2.0):
        return
    s.rung = "sigkill"
    _signal_all(procs, signal.SIGKILL)
    await _gone(procs, 5.0)


IN_NETNS = CHILDREN / "in_netns.py"


@asynccontextmanager
async def isolated(
    gateway: Gateway,
    grant: Grant,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    url_env: Sequence[str] = ("ANTHROPIC_BASE_URL",),
    cwd: str | os.PathLike[str] | None = None,
    exit_grace: float = 2.0,
) -> AsyncIterator[Spawned]:
    """`spawned`, but in a private network namespace whose only way out is a gateway socket
    made inside it and bound to `grant` (see tests/children/in_netns.py). Skips the test where
    the namespace cannot be made (not root)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    launcher = [sys.executable, str(IN_NETNS), str(theirs.fileno())]
    for name in url_env:
        launcher += ["--url-env", name]
    try:
        process_argv = [*launcher, "--", *argv]
        async with spawned(
            process_argv, env=env, cwd=cwd, exit_grace=exit_grace, pass_fds=(theirs.fileno(),)
        ) as agent:
            theirs.close()
            got = await anyio.to_thread.run_sync(_receive_socket, ours, abandon_on_cancel=True)
            if got is None:
                await agent.process.wait()
                pytest.skip(f"no private network namespace here: {agent.stderr.decode().strip()}")
            await gateway.listen_on(got, only=grant)
            yield agent
    finally:
        ours.close()
        theirs.close()


def _receive_socket(channel: socket.socket) -> socket.socket | None:
    channel.settimeout(30)
    try:
        _, fds, _, _ = socket.recv_fds(channel, 64, 1)
    except (TimeoutError, OSError):
        return None
    if not fds:
        return None
    return socket.socket(fileno=fds[0])
