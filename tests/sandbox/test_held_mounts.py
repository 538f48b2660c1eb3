"""A sandboxed child's mount namespace (its view of the file system) is held by the supervisor
from its handshake until its tree is judged, then let go: the child's exit, a crash's
included, does not wait for the kernel to tear that view down (≈ 0.5 ms here, measured in
`scripts/bench`: "the same child as tether starts it"), and nothing of it stays open after
the dispose."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from sandbox_targets import FAST, needs_sandbox

from tether.parent.process import supervised
from tether.parent.process.config import DEFAULT_COMMAND, ChildConfig
from tether.parent.process.env import build_child_env
from tether.parent.process.host import host
from tether.parent.process.limits import Limits
from tether.parent.process.spawn import spawn_child
from tether.parent.process.supervised import SupervisedChild
from tether.parent.process.wired import handshake
from tether.parent.process.zygote import Zygote, ZygoteSpawner

pytestmark = pytest.mark.anyio
DEADLINE = 30
CONFIG = ChildConfig(dispose=FAST, handshake_timeout=20.0)


def held_namespaces() -> set[str]:
    """The mount namespaces this process holds a descriptor of."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
        if target.startswith("mnt:["):
            held.add(target)
    return held


@asynccontextmanager
async def child_of(
    tmp_path: Path, spawner: str, level: str = "sandbox"
) -> AsyncIterator[SupervisedChild]:
    """Tether's own child, started as `Supervisor` starts it (`level`, `spawner`), ready."""
    zygote = None
    if spawner == "zygote":
        zygote = await Zygote.start(build_child_env(os.environ), standby_after=None)
    try:
        with anyio.fail_after(DEADLINE):
            child = await spawn_child(
                CONFIG,
                Limits(),
                host(),
                "mounts",
                spawner=(
                    ZygoteSpawner(lambda: zygote, skip=len(DEFAULT_COMMAND)) if zygote else None
                ),
                workspace=str(tmp_path) if level == "sandbox" else None,
                level=level,
            )
            async with child:
                assert await handshake(child, CONFIG), child.observed
                yield child
    finally:
        if zygote is not None:
            await zygote.aclose()


@needs_sandbox
@pytest.mark.parametrize("spawner", ["exec", "zygote"])
async def test_a_sandboxed_childs_view_outlives_its_crash_until_its_tree_is_judged(
    tmp_path: Path, spawner: str
) -> None:
    before = held_namespaces()
    async with child_of(tmp_path, spawner) as child:
        view = os.readlink(f"/proc/{child.pid}/ns/mnt")
        assert view != os.readlink("/proc/self/ns/mnt")  # a namespace of its own
        assert held_namespaces() == before | {view}
        child.proc.send_signal(signal.SIGSEGV)
        with anyio.fail_after(DEADLINE):
            assert await child.proc.wait_for(DEADLINE)
        assert view in held_namespaces()  # the child is gone; its view is still held here
        with anyio.fail_after(DEADLINE):
            report = await child.dispose()
        assert report.survivors == []
        assert child.observed.signal == signal.SIGSEGV
        assert held_namespaces() == before  # let go once judged


@needs_sandbox
async def test_a_polite_dispose_lets_the_view_go_and_a_process_level_child_has_none_to_hold(
    tmp_path: Path,
) -> None:
    before = held_namespaces()
    async with child_of(tmp_path, "exec") as child:
        assert len(held_namespaces() - before) == 1
        with anyio.fail_after(DEADLINE):
            report = await child.dispose()
        assert report.rung == "shutdown"
    assert held_namespaces() == before
    async with child_of(tmp_path, "exec", level="process") as child:
        assert not child.private_mounts
        assert held_namespaces() == before


@needs_sandbox
async def test_a_view_this_process_may_not_open_is_not_held_and_the_child_runs_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []

    def refused(pid: int) -> int | None:
        asked.append(pid)
        return None  # as for a child this process may not inspect: EACCES

    monkeypatch.setattr(supervised, "own_mount_namespace", refused)
    before = held_namespaces()
    async with child_of(tmp_path, "exec") as child:
        assert child.private_mounts and asked == [child.pid]
        assert held_namespaces() == before
        with anyio.fail_after(DEADLINE):
            await child.session.ping()  # it still answers
            report = await child.dispose()
        assert report.rung == "shutdown" and report.survivors == []
    assert held_namespaces() == before


@needs_sandbox
async def test_a_dispose_that_fails_after_the_verdict_still_lets_the_view_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = held_namespaces()
    async with child_of(tmp_path, "exec") as child:
        assert len(held_namespaces() - before) == 1
        real = child.proc.close_pipes
        failed: list[bool] = []

        def fails_once() -> None:
            if not failed:
                failed.append(True)
                raise OSError("the pipes could not be closed")
            real()

        async def keep() -> None:  # the failure comes while the view is still held
            return None

        monkeypatch.setattr(child, "_let_mounts_go", keep)
        monkeypatch.setattr(child.proc, "close_pipes", fails_once)
        with anyio.fail_after(DEADLINE), pytest.raises(OSError, match="could not be closed"):
            await child.dispose()
        assert failed
        assert held_namespaces() == before  # closed on the way out, not left open
        monkeypatch.undo()  # the context's own dispose finishes the job
