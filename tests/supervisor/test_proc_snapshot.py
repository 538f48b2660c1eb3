"""One pass over /proc finds a tree's processes by session, process group and tree marker
(`tree.snapshot`), and the sweeps of children disposed at once share such passes
(`tree.fresh_snapshot`): every caller gets a pass begun after it asked."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import anyio
import psutil
import pytest

from tether.parent.process import _keeper as keeper_module
from tether.parent.process import tree
from tether.parent.process.markers import TREE_ENV
from tether.parent.process.tree import fresh_snapshot, snapshot, tree_procs

pytestmark = pytest.mark.anyio


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


SLEEPER = [sys.executable, "-I", "-c", "import time; time.sleep(60)"]


def _wait_for_its_environment(pid: int, seconds: float = 10.0) -> None:
    """Until the process shows its environment block. `Popen` returns once the exec has passed
    its point of no return, before the new stack that holds the block is laid out: a process
    read then shows none (27 of 300 spawns on a loaded host), and a snapshot would miss its
    marker. Only `test_a_process_that_shows_no_environment_at_first_is_read_again_after_the_pass`
    is about that moment; the rest need a process that has started."""
    deadline = time.monotonic() + seconds
    while not keeper_module.environ(pid):
        assert time.monotonic() < deadline, f"process {pid} showed no environment in {seconds}s"
        time.sleep(0.001)


@pytest.fixture
def marked() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A process in a session of its own whose environment carries a tree marker."""
    marker = f"{os.getpid()}-snap-{os.urandom(3).hex()}-1"
    env = {"PATH": "/usr/bin:/bin", TREE_ENV: marker, "AFTER": "x"}
    proc = subprocess.Popen(SLEEPER, env=env, start_new_session=True)
    try:
        _wait_for_its_environment(proc.pid)
        yield proc, marker
    finally:
        proc.kill()
        proc.wait()


def test_one_pass_finds_a_process_by_its_session_group_and_marker(
    marked: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, marker = marked
    snap = snapshot()
    assert proc.pid in snap.in_session_or_group(proc.pid)
    assert snap.marked[marker] == {proc.pid}
    assert os.getpid() not in snap.groups  # never the supervisor itself


def test_a_snapshot_reads_no_environment_outside_every_session(
    marked: tuple[subprocess.Popen[bytes], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kernel threads (and sessions led outside this pid namespace) have session id 0; no tree
    # of ours can be there, so their environments are not read.
    outside = {pid for pid in psutil.pids() if _sid(pid) == tree.OUTSIDE_EVERY_SESSION}
    if not outside:
        pytest.skip("no process outside every session is visible here (no kernel threads)")
    read: list[int] = []
    real_read = keeper_module._read_all

    def spy(path: str) -> bytes:
        if path.endswith("/environ"):
            read.append(int(path.split("/")[2]))
        return real_read(path)

    monkeypatch.setattr(keeper_module, "_read_all", spy)  # `environ` reads through it
    proc, marker = marked
    snap = snapshot()
    assert snap.marked[marker] == {proc.pid}  # the marker scan still finds ours
    assert proc.pid in read
    assert not outside & set(read), "read the environment of a process outside every session"
    assert outside & set(snap.groups)  # still seen, for the session and group scan


def test_a_process_that_shows_no_environment_at_first_is_read_again_after_the_pass(
    marked: tuple[subprocess.Popen[bytes], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process caught in an exec shows an empty block for a moment (the new stack is laid
    # out after the exec's point of no return): 20 of 3,000 fresh execs read so under load.
    # That moment is made to last through the pass here.
    proc, marker = marked
    real = tree.environ
    reads: list[int] = []

    def mid_exec_once(pid: int) -> bytes:
        if pid == proc.pid:
            reads.append(pid)
            if len(reads) == 1:
                return b""
        return real(pid)

    monkeypatch.setattr(tree, "environ", mid_exec_once)
    snap = snapshot()
    assert snap.marked.get(marker) == {proc.pid}
    assert len(reads) == 2


def test_a_marker_matches_whole_never_as_the_prefix_of_another(
    marked: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, marker = marked
    snap = snapshot()
    assert proc.pid not in snap.marked.get(marker[:-1], set())  # "...-1" is not "...-"
    assert proc.pid not in snap.marked.get(marker + "0", set())  # nor "...-10"


def test_the_tree_of_a_process_that_left_its_parent_is_found_through_a_snapshot(
    marked: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, marker = marked
    # As a sweep sees it: the root is gone (a pid that is no process), its leftovers are not.
    found = tree_procs(2**22 + 1, marker, root_exited=True, snap=snapshot())
    assert [p.pid for p in found] == [proc.pid]


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[tree.ProcSnapshot]:
    """Every pass over /proc made from here on, in order."""
    made: list[tree.ProcSnapshot] = []
    real = tree.snapshot

    def counted() -> tree.ProcSnapshot:
        made.append(real())
        return made[-1]

    monkeypatch.setattr(tree, "snapshot", counted)
    return made


async def test_sweeps_that_ask_in_the_same_turn_share_one_pass_and_later_ones_get_a_new_one(
    passes: list[tree.ProcSnapshot],
) -> None:
    got: list[tree.ProcSnapshot] = []

    async def sweep() -> None:
        got.append(await fresh_snapshot())

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(sweep)
    assert len(passes) == 1 and all(snap is passes[0] for snap in got)
    later = await fresh_snapshot()
    assert len(passes) == 2 and later is passes[1]


async def test_a_sweep_cancelled_before_its_pass_leaves_the_others_a_pass_of_their_own(
    passes: list[tree.ProcSnapshot],
) -> None:
    got: list[tree.ProcSnapshot] = []

    async def first() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await fresh_snapshot()  # cancelled at its checkpoint, before any pass

    async def joiner() -> None:
        got.append(await fresh_snapshot())

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        tg.start_soon(joiner)
    assert len(got) == 1 and got[0] in passes
    assert getattr(tree._shared, "pending", None) is None  # nothing left for the next caller
