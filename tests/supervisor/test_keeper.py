"""The keeper: a process per Supervisor, started with its first child process, that takes
children's trees down if the supervisor's process dies; on a normal close it leaves, killing
nothing. (Its purpose, a SIGKILLed parent, is tested in test_parent_death.py.)"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import psutil
import pytest

from tether.parent.process import keeper as keeper_module
from tether.parent.process.keeper import Keeper
from tether.parent.process.limits import DisposePolicy
from tether.parent.process.markers import marker_prefix, new_tree_marker
from tether.parent.run.events import Event, RunStarted
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

CHILDREN = Path(__file__).parent.parent / "children"
CONFIG = ChildConfig(dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0))


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_every_tree_marker_starts_with_the_prefix_the_keeper_looks_for() -> None:
    assert new_tree_marker().startswith(marker_prefix())


async def test_the_keeper_starts_with_the_first_child_process_and_is_gone_after(
    tmp_path: Path,
) -> None:
    async with Supervisor(CONFIG) as sup:
        assert sup._keeper is None
        command = [sys.executable, "-I", str(CHILDREN / "answer_and_exit.py")]
        with anyio.fail_after(20):
            result = await sup.run("x", workspace=tmp_path, command=command)
        assert result.success, result
        assert sup._keeper is not None
        pid = sup._keeper.pid
        assert _running(pid)
        assert psutil.Process(pid).ppid() == psutil.Process().pid
    assert not _running(pid)


def _wait_by(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`polling`: as on a kernel without `pidfd_open`, where the close polls for the exit."""
    if how == "polling":
        monkeypatch.setattr(keeper_module, "open_pidfd", lambda pid: None)


@pytest.mark.parametrize("how", ["pidfd", "polling"])
async def test_a_keeper_told_goodbye_is_reaped_once_it_exits(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wait_by(how, monkeypatch)
    keeper = Keeper.start()
    assert keeper is not None
    with anyio.fail_after(10):
        await keeper.aclose()
    assert keeper.proc.returncode == 0  # it left on `bye`, and was reaped (no zombie)


@pytest.mark.parametrize("how", ["pidfd", "polling"])
async def test_a_keeper_that_does_not_leave_after_goodbye_is_killed_at_its_grace(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wait_by(how, monkeypatch)
    keeper = Keeper.start()
    assert keeper is not None
    os.kill(keeper.pid, signal.SIGSTOP)  # it cannot read `bye`, let alone exit
    try:
        with anyio.fail_after(10):
            started = time.monotonic()
            await keeper.aclose(grace=0.3)
            took = time.monotonic() - started
    finally:
        if keeper.proc.returncode is None:  # not reaped: the pid is still the keeper's
            keeper.proc.kill()
            keeper.proc.wait(timeout=10)
    assert keeper.proc.returncode == -signal.SIGKILL  # killed and reaped
    assert 0.3 <= took < 5.0


@pytest.mark.parametrize("how", ["config", "provider"])
async def test_a_supervisor_whose_children_run_in_memory_starts_no_process(
    tmp_path: Path, how: str
) -> None:
    from tether.parent.models.scripted import ScriptedModel

    model = ScriptedModel.from_json(
        '[{"text": "", "toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]}]'
    )
    config = ChildConfig(transport="memory") if how == "config" else CONFIG
    provider = "inprocess" if how == "provider" else None
    async with Supervisor(config) as sup:
        with anyio.fail_after(20):
            result = await sup.run("x", workspace=tmp_path, model=model, provider=provider)
        assert result.success, result
        assert result.pid is None and result.isolation is not None
        assert result.isolation.level == "none"
        assert sup._keeper is None
        assert psutil.Process().children(recursive=True) == []


async def test_closing_one_supervisor_leaves_another_supervisors_child_running(
    tmp_path: Path,
) -> None:
    # All supervisors of a process share the tree-marker prefix; a keeper told goodbye must
    # not sweep it.
    started = anyio.Event()
    pids: list[int] = []

    def on_event(ev: Event) -> None:
        if isinstance(ev, RunStarted):
            pids.append(ev.pid)
        if getattr(ev, "kind", None) == "started":
            started.set()

    async with Supervisor(CONFIG) as outer:
        handle = await outer.start(
            "wait",
            workspace=tmp_path,
            command=[sys.executable, "-I", str(CHILDREN / "cancellable.py"), "ignore"],
            on_event=on_event,
        )
        with anyio.fail_after(20):
            await started.wait()
        async with Supervisor(CONFIG):
            pass
        await anyio.sleep(0.2)  # a sweep, had there been one, would have killed it by now
        assert _running(pids[0])
        assert not handle.done
        handle.abort()
        result = await handle.result()
    assert result.failure is not None and result.failure.kind == "cancelled"


def test_the_keeper_kills_a_registered_cgroups_members_that_nothing_else_links_to() -> None:
    import os
    import subprocess
    import time

    from tether.parent.process.cgroups import ChildCgroup
    from tether.parent.process.host import host
    from tether.parent.process.keeper import KEEPER

    tier = host()
    if tier.tier == "process-group":
        pytest.skip(f"no cgroup tier on this host: {tier.why}")
    cgroup = ChildCgroup.create(tier, f"{os.getpid()}-keeper-test", memory=None, pids=None)
    # Its own session, an empty environment: only its cgroup says whose it is.
    daemon = subprocess.Popen(["/bin/sleep", "60"], env={}, start_new_session=True)
    try:
        for procs in cgroup.procs_files:
            Path(procs).write_text(str(daemon.pid))
        keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", str(KEEPER), "TETHER_TREE=no-such-marker-"],
            stdin=subprocess.PIPE,
        )
        assert keeper.stdin is not None
        keeper.stdin.write(f"+999999 {' '.join(cgroup.procs_files)}\n".encode())
        keeper.stdin.close()  # end of input without `bye`: the supervisor died
        keeper.wait(timeout=10)
        deadline = time.monotonic() + 5
        while daemon.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert daemon.poll() is not None, "the keeper left the cgroup's member running"
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        cgroup.remove()


def test_the_keeper_removes_a_registered_cgroup_that_stays_busy_after_its_sweep() -> None:
    # A killed member can keep its cgroup busy a little after it looks gone (a zombie leader
    # whose other threads are still exiting); a sub-cgroup is the way to hold it busy on demand.
    import os
    import subprocess
    import time

    from tether.parent.process.cgroups import ChildCgroup
    from tether.parent.process.host import host
    from tether.parent.process.keeper import KEEPER

    tier = host()
    if tier.tier == "process-group":
        pytest.skip(f"no cgroup tier on this host: {tier.why}")
    cgroup = ChildCgroup.create(tier, f"{os.getpid()}-keeper-busy", memory=None, pids=None)
    holds = [d / "hold" for d in cgroup.dirs.values()]
    keeper: subprocess.Popen[bytes] | None = None
    try:
        for d in holds:
            d.mkdir()
        keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", str(KEEPER), "TETHER_TREE=no-such-marker-"],
            stdin=subprocess.PIPE,
        )
        assert keeper.stdin is not None
        keeper.stdin.write(f"+999999 {' '.join(cgroup.procs_files)}\n".encode())
        keeper.stdin.close()  # the supervisor died: sweep (nothing to kill), then remove
        time.sleep(0.3)
        assert all(d.exists() for d in cgroup.dirs.values())
        for d in holds:
            d.rmdir()
        keeper.wait(timeout=10)
        left = [d for d in cgroup.dirs.values() if d.exists()]
        assert not left, f"the keeper gave up on a cgroup that emptied: {left}"
    finally:
        if keeper is not None and keeper.poll() is None:
            keeper.kill()
            keeper.wait()
        for d in holds:
            if d.exists():
                d.rmdir()
        cgroup.remove()


def test_the_keeper_kills_a_marked_process_whose_main_thread_exited_alone(
    tmp_path: Path, thread_runs: Callable[[int], bool]
) -> None:
    # Its leader is a zombie while another thread runs, and the leader's own environment
    # cannot be read: the keeper must neither take it for dead nor miss its marker.
    import os
    import subprocess
    import time

    from tether.parent.process.keeper import KEEPER

    pidfile = tmp_path / "lone.pid"
    lone = CHILDREN / "lone_thread.py"
    env = {"TETHER_TREE": "keeper-lone-test-1"}
    starter = subprocess.Popen([sys.executable, "-I", str(lone), str(pidfile), "--setsid"], env=env)
    try:
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline, "the lone-thread process did not start"
            time.sleep(0.01)
        pid = int(pidfile.read_text())
        while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "its main thread did not exit"
            time.sleep(0.01)
        assert thread_runs(pid)
        keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", str(KEEPER), "TETHER_TREE=keeper-lone-test-"],
            stdin=subprocess.PIPE,
        )
        assert keeper.stdin is not None
        keeper.stdin.close()  # end of input without `bye`: the supervisor died
        keeper.wait(timeout=10)
        deadline = time.monotonic() + 5
        while thread_runs(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not thread_runs(pid), "the keeper left the process running"
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError, OSError):
            os.kill(int(pidfile.read_text()), 9)  # the test failed: take it down
        starter.wait(timeout=10)  # it is reaped once its last thread has ended
