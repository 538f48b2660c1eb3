"""`ChildConfig(spawner="zygote")`: children forked from a pre-imported runtime get every
guarantee a cold spawn gives (environment, limits, cgroup, session, signals, exit status,
teardown), and nothing outlives the supervisor. Every test runs twice: with every child forked
on request, and with every child handed to the zygote's parked standby."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from act_reports import (
    ACT,
    HERE,
    cgroups_named,
    cmdline,
    start_and_wait_for_report,
    status_field,
)

from tether.parent.models.scripted import ScriptedModel
from tether.parent.process import supervised as supervised_module
from tether.parent.process import zygote_command
from tether.parent.process._keeper import REMOVE_SECONDS
from tether.parent.process.env import build_child_env
from tether.parent.process.host import PREFIX, host
from tether.parent.process.isolation import private_env, probe_host
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.markers import TREE_ENV
from tether.parent.process.proc import SpawnError
from tether.parent.process.zygote import Zygote, ZygoteProcess
from tether.parent.run.events import RunStarted
from tether.parent.supervisor import ChildConfig, PoolSpec, Supervisor

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True, params=["forked on request", "handed to the standby"])
def how_children_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Pin how each zygote child of the test starts: forked when the request comes (no
    standby), or handed to a standby that was parked before the request (each spawn waits
    for it and checks that it was used)."""
    if request.param == "forked on request":
        monkeypatch.setattr(zygote_command, "STANDBY_AFTER", None)
        return str(request.param)
    spawn = Zygote.spawn

    async def spawn_by_standby(self: Zygote, spec: Any) -> ZygoteProcess:
        # Asked no faster than the delay each ask puts off the standby's fork by.
        assert self.standby_after is not None
        with anyio.fail_after(DEADLINE):
            while not (await self.standby())["parked"]:
                await anyio.sleep(3 * self.standby_after)
        before = self.forks["standby"]
        proc = await spawn(self, spec)
        assert self.forks["standby"] == before + 1, "the child was not handed to the standby"
        return proc

    monkeypatch.setattr(Zygote, "spawn", spawn_by_standby)
    return str(request.param)


FAST = DisposePolicy(shutdown=0.3, eof=0.3, term=0.3, kill=1.0)
ZYGOTE = ChildConfig(spawner="zygote", dispose=FAST)
COLD = ChildConfig(spawner="exec", dispose=FAST)
"""A cold spawn, pinned: the default (`auto`) forks tether's own child from the zygote."""
DEADLINE = 10.0
COMPLETE = """{"turns": [{"text": "Done.", "toolCalls": [{"name": "complete",
  "arguments": {"summary": "found it", "paths": ["notes.txt"]}}]}]}"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _environ(pid: int) -> dict[str, str]:
    """What /proc/PID/environ shows. A process that has just exec'd can show an empty block for
    a moment: `Popen` returns once the exec is past its point of no return (the close-on-exec
    pipe closes), while the kernel has yet to lay out the new stack the block lives in. So an
    empty block is read again until one is there."""
    deadline = time.monotonic() + DEADLINE
    while not (raw := Path(f"/proc/{pid}/environ").read_bytes()):
        assert _alive(pid), f"{pid} exited before its environment could be read"
        assert time.monotonic() < deadline, f"{pid} shows no environment"
        time.sleep(0.001)
    return dict(
        os.fsdecode(item).split("=", 1) for item in raw.split(b"\0") if item and b"=" in item
    )


async def test_a_scripted_run_through_the_zygote_completes_in_a_child_the_zygote_forked(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("TODO\n")
    async with Supervisor(ZYGOTE) as sup:
        pids: list[int] = []
        sup.subscribe(lambda ev: pids.append(ev.pid) if hasattr(ev, "pid") else None)
        with anyio.fail_after(DEADLINE):
            result = await sup.run(
                "find the notes", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE)
            )
        assert result.success, result
        assert result.summary == "found it"
        assert [a.path for a in result.artifacts] == [str(tmp_path / "notes.txt")]
        zygote = sup.zygote_pid
        assert zygote is not None
        assert status_field(zygote, "Threads") == "1", "the zygote stays single-threaded"
        assert pids and pids[0] != zygote
    assert not _alive(zygote), "closing the supervisor ends its zygote"


async def test_a_zygote_child_has_exactly_the_scrubbed_environment_its_limits_session_and_cgroup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZYGOTE_CANARY_API_KEY", "canary-secret")
    monkeypatch.setenv("ZYGOTE_CANARY_PLAIN", "canary-plain")
    limits = Limits(memory="768M", open_files=123, file_size="5M", wall="20s")
    async with Supervisor(ZYGOTE) as sup:
        handle, report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, limits=limits
        )
        pid = report["pid"]
        assert handle.pid == pid
        zygote = sup.zygote_pid
        assert zygote is not None and psutil.Process(pid).ppid() == zygote

        expected = build_child_env(os.environ)
        if handle.isolation.level == "sandbox" and probe_host().root:
            expected.update(private_env("/tmp"))  # HOME, TMPDIR, XDG_* in the private /tmp
        seen = _environ(pid)
        marker = seen.pop(TREE_ENV)
        assert marker.startswith(f"{os.getpid()}-")
        assert seen == expected, "what /proc/PID/environ shows is the scrubbed environment"
        assert {k: v for k, v in report["environ"].items() if k != TREE_ENV} == expected
        for who in (pid, zygote):
            raw = Path(f"/proc/{who}/environ").read_bytes()
            assert b"canary-secret" not in raw and b"canary-plain" not in raw

        proc_limits = Path(f"/proc/{pid}/limits").read_text()
        assert _limit(proc_limits, "Max core file size") == ("0", "0")
        assert _limit(proc_limits, "Max open files") == ("123", "123")
        assert _limit(proc_limits, "Max file size") == (str(5 << 20), str(5 << 20))
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid

        child = handle._child
        assert child is not None
        if handle.host.tier == "process-group":
            assert child.cgroup is None
        else:
            assert child.cgroup is not None
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
            for d in child.cgroup.dirs.values():
                assert f"/{d.name}\n" in cgroups, (d, cgroups)
            assert child.cgroup.members() == {pid}, "the child has its cgroup to itself"
        result = await handle.cancel()
    assert result.status == "aborted"
    assert result.failure is not None and result.failure.kind == "cancelled"


GLIBC_SIGNALS = (32, 33)
"""The real-time signals glibc keeps for itself (thread cancellation, set*id across threads):
it installs their handlers with a process's first thread, which a cold child's warm-up starts
and a zygote's child (its machinery already loaded) does not; no Python code can see or set
them."""


def _without_glibcs_own(mask: str) -> int:
    """A /proc signal mask (hex, bit N-1 for signal N) without glibc's own signals."""
    return int(mask, 16) & ~sum(1 << (sig - 1) for sig in GLIBC_SIGNALS)


def _limit(text: str, name: str) -> tuple[str, str]:
    for line in text.splitlines():
        if line.startswith(name):
            soft, hard = line[len(name) :].split()[:2]
            return soft, hard
    raise AssertionError(f"no {name!r} in {text}")


async def test_a_zygote_child_starts_with_the_signal_dispositions_and_mask_of_a_cold_child() -> (
    None
):
    async with Supervisor(COLD) as sup:
        cold, cold_report = await start_and_wait_for_report(sup, "hold", deadline=DEADLINE)
        forked, forked_report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, config=ZYGOTE
        )
        for field in ("SigIgn", "SigCgt", "SigBlk"):
            assert _without_glibcs_own(
                status_field(forked_report["pid"], field)
            ) == _without_glibcs_own(status_field(cold_report["pid"], field)), field
        cold.abort()
        forked.abort()


@pytest.mark.parametrize(
    ("prompt", "kind", "exit_code", "sig"),
    [
        ("segv", "crashed", None, "SIGSEGV"),
        ("exit 7", "exit_nonzero", 7, None),
    ],
)
async def test_a_zygote_childs_exit_status_comes_through_the_zygote(
    prompt: str, kind: str, exit_code: int | None, sig: str | None
) -> None:
    async with Supervisor(ZYGOTE) as sup:
        with anyio.fail_after(DEADLINE):
            result = await sup.run(prompt, agent=ACT, workspace=HERE)
    assert result.failure is not None, result
    assert result.failure.kind == kind, result
    assert result.failure.exit_code == exit_code
    assert result.failure.signal == sig


async def test_a_stubborn_zygote_child_is_killed_at_the_sigkill_rung() -> None:
    async with Supervisor(ZYGOTE) as sup:
        handle, report = await start_and_wait_for_report(
            sup, "stubborn", deadline=DEADLINE, limits=Limits(wall=1)
        )
        with anyio.fail_after(DEADLINE):
            result = await handle.result()
    assert result.failure is not None and result.failure.kind == "timeout", result
    assert result.failure.rung == "sigkill"
    assert not _alive(report["pid"])


async def test_a_grandchild_that_left_the_session_is_swept_with_its_zygote_child() -> None:
    async with Supervisor(ZYGOTE) as sup:
        handle, report = await start_and_wait_for_report(sup, "grandchild", deadline=DEADLINE)
        assert _alive(report["grandchild"])
        assert _environ(report["grandchild"])[TREE_ENV] == _environ(report["pid"])[TREE_ENV]
        handle.abort()
        with anyio.fail_after(DEADLINE):
            result = await handle.result()
        assert result.failure is not None and result.failure.kind == "cancelled"
        assert not _alive(report["grandchild"]) and not _alive(report["pid"])


async def test_the_zygote_dying_mid_run_fails_the_run_and_the_next_run_gets_a_new_zygote() -> None:
    async with Supervisor(ZYGOTE) as sup:
        handle, report = await start_and_wait_for_report(sup, "grandchild", deadline=DEADLINE)
        zygote = sup.zygote_pid
        assert zygote is not None
        os.kill(zygote, signal.SIGKILL)
        with anyio.fail_after(DEADLINE):
            result = await handle.result()
        assert result.failure is not None and result.failure.kind == "killed", result
        assert "zygote" in result.message
        assert not _alive(report["pid"]) and not _alive(report["grandchild"])

        with anyio.fail_after(DEADLINE):
            again = await sup.run("finish", agent=ACT, workspace=HERE)
        assert again.success, again
        assert sup.zygote_pid not in (None, zygote)


async def test_a_warm_pool_can_keep_zygote_children(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("TODO\n")
    async with Supervisor(ZYGOTE, pool=PoolSpec(1, workspace=tmp_path)) as sup:
        pool = sup.pool
        assert pool is not None
        with anyio.fail_after(DEADLINE):
            await pool.wait_ready()
        (ready,) = pool.ready_pids
        assert psutil.Process(ready).ppid() == sup.zygote_pid
        with anyio.fail_after(DEADLINE):
            result = await sup.run(
                "notes", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE)
            )
        assert result.success, result
        assert pool.handed_out == 1


@pytest.mark.parametrize(
    ("config", "complaint"),
    [
        (ChildConfig(spawner="zygote", command=[sys.executable, "-c", "pass"]), "default"),
        (ChildConfig(spawner="vfork"), "expected 'auto', 'exec' or 'zygote'"),
        (ChildConfig(spawner="zygote", launcher="bwrap"), "local"),
    ],
)
async def test_a_zygote_config_it_cannot_serve_is_refused_at_start(
    config: ChildConfig, complaint: str
) -> None:
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match=complaint):
            await sup.start("x", workspace=HERE, config=config)
        assert sup.zygote_pid is None


def test_a_sigkilled_supervisor_takes_its_zygote_children_and_grandchildren_down_within_2s(
    tmp_path: Path, read_line: Callable[[subprocess.Popen[bytes], float], bytes]
) -> None:
    errors = tmp_path / "host-stderr.txt"
    with errors.open("wb") as err:
        parent = subprocess.Popen(
            [sys.executable, "-I", str(HERE / "zygote_host.py")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    tracked: list[psutil.Process] = []
    try:
        line = read_line(parent, DEADLINE)
        assert line, f"the host never reported: {errors.read_text()}"
        pids = json.loads(line)
        tracked = psutil.Process(parent.pid).children(recursive=True)
        known = {p.pid for p in tracked}
        assert {pids["zygote"], pids["child"]} <= known
        tracked.append(psutil.Process(pids["grandchild"]))
        assert all(_alive(p.pid) for p in tracked)

        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=DEADLINE)
        killed_at = time.monotonic()
        left = [p for p in tracked if _alive(p.pid)]
        while left and time.monotonic() - killed_at < 2.0:
            time.sleep(0.02)
            left = [p for p in tracked if _alive(p.pid)]
        assert not left, "outlived the supervisor: " + "; ".join(
            f"{p.pid} {p.cmdline()!r}" for p in left if _alive(p.pid)
        )
        # Its cgroups too, the one made for the zygote's next standby included (the keeper's):
        # removed after the keeper's last sweep, a busy one retried for up to REMOVE_SECONDS.
        named = f"{PREFIX}{parent.pid}-"
        left_dirs = cgroups_named(named)
        while left_dirs and time.monotonic() - killed_at < 2.0 + REMOVE_SECONDS:
            time.sleep(0.02)
            left_dirs = cgroups_named(named)
        assert not left_dirs, left_dirs
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=DEADLINE)
        if parent.stdout is not None:
            parent.stdout.close()
        for p in tracked:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


# --- the default spawner ---------------------------------------------------------------------


async def test_tether_s_own_child_is_forked_by_the_zygote_by_default_and_the_run_says_so(
    tmp_path: Path,
) -> None:
    started: list[RunStarted] = []
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        sup.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        with anyio.fail_after(DEADLINE):
            handle = await sup.start(
                "notes", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE)
            )
            assert (await handle.result()).success
        zygote = sup.zygote_pid
    assert zygote is not None
    assert [(s.spawner, s.fallback) for s in started] == [("zygote", None)]
    assert handle.spawner == "zygote"


async def test_a_command_child_is_started_by_exec_under_the_default_spawner(
    tmp_path: Path,
) -> None:
    started: list[RunStarted] = []
    command = [sys.executable, "-I", str(HERE.parent / "children" / "answer_and_exit.py")]
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        sup.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        with anyio.fail_after(DEADLINE):
            await sup.run("x", workspace=tmp_path, command=command)
        assert sup.zygote_pid is None, "no zygote is started for a command child"
    assert [(s.spawner, s.fallback) for s in started] == [("exec", None)]


async def test_when_the_zygote_cannot_start_the_default_spawner_falls_back_to_exec_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(cls: type[Zygote], env: dict[str, str], *_: object, **__: object) -> Zygote:
        raise SpawnError("no zygote here")

    # Refused at its launch, whether the plan launches it ahead or the spawn does.
    monkeypatch.setattr(Zygote, "launch", classmethod(broken))
    started: list[RunStarted] = []
    async with Supervisor(ChildConfig(dispose=FAST)) as sup:
        sup.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        with anyio.fail_after(DEADLINE):
            for _ in range(2):
                result = await sup.run(
                    "notes", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE)
                )
                assert result.success, result
    assert [s.spawner for s in started] == ["exec", "exec"]
    assert all(s.fallback and "no zygote here" in s.fallback for s in started), started


async def test_a_child_whose_environment_does_not_fit_the_zygote_is_started_by_exec(
    tmp_path: Path,
) -> None:
    started: list[RunStarted] = []
    big = {f"TETHER_TEST_BIG_{i}": "x" * 4000 for i in range(20)}  # more than the zygote's area
    huge = ChildConfig(dispose=FAST, env=big)
    async with Supervisor(huge) as sup:
        sup.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        with anyio.fail_after(DEADLINE):
            result = await sup.run(
                "notes", workspace=tmp_path, model=ScriptedModel.from_json(COMPLETE)
            )
    assert result.success, result
    assert [s.spawner for s in started] == ["exec"]
    assert started[0].fallback is not None and "environment" in started[0].fallback


def test_the_zygote_rehearses_a_whole_scripted_run_and_leaves_no_thread_fd_or_directory(
    tmp_path: Path,
) -> None:
    # In a fresh interpreter: the rehearsal joins every other thread, as the zygote needs. Its
    # temporary workspace goes to a TMPDIR of the test's own.
    probe = (
        "import os, threading\n"
        "from tether.child import zygote\n"
        "before = set(os.listdir('/proc/self/fd'))\n"
        "ok = zygote._rehearse()\n"
        "after = set(os.listdir('/proc/self/fd'))\n"
        "print(ok, threading.active_count(), sorted(after - before))\n"
    )
    got = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.split(maxsplit=1) == ["True", "1 []\n"], got.stdout + got.stderr
    assert list(tmp_path.iterdir()) == [], "the rehearsal's workspace was removed"


def _namespace(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


async def test_a_child_under_the_pidns_launcher_is_forked_by_a_zygote_in_a_namespace_of_its_own(
    tmp_path: Path,
) -> None:
    """The `pidns` launcher's guarantee kept by the zygote: its children are forked in its own
    PID namespace (seen by the supervisor under their host pids); one the zygote cannot serve
    (its environment does not fit) is exec'd under the launcher, in a namespace all the same."""
    seen: list[tuple[str, str | None, str, str]] = []

    def on_event(ev: object) -> None:
        if isinstance(ev, RunStarted):
            child = psutil.Process(ev.pid)
            parent = child.parent()
            assert parent is not None
            # A zygote's child: its parent, the zygote; an exec'd one: the launcher's shim.
            lineage = " ".join([*cmdline(parent.pid), "|", *cmdline(child.pid)])
            seen.append((ev.spawner, ev.fallback, _namespace(ev.pid), lineage))

    big = {f"TETHER_TEST_BIG_{i}": "x" * 4000 for i in range(20)}  # more than the zygote's area
    async with Supervisor(ChildConfig(dispose=FAST, launcher="pidns")) as sup:
        sup.subscribe(on_event)
        with anyio.fail_after(DEADLINE):
            for config in (None, None, ChildConfig(dispose=FAST, launcher="pidns", env=big)):
                result = await sup.run(
                    "notes",
                    workspace=tmp_path,
                    model=ScriptedModel.from_json(COMPLETE),
                    config=config,
                )
                assert result.success and result.launcher == "pidns", result
    ours = _namespace("self")
    (first, second, exec_d) = seen
    for spawner, fallback, namespace, parent in (first, second):
        assert (spawner, fallback) == ("zygote", None)
        assert namespace != ours and "tether.child.zygote" in parent
    assert first[2] == second[2], "one zygote, one namespace, for both children"
    spawner, fallback, _, lineage = exec_d
    assert spawner == "exec" and fallback is not None and "environment" in fallback
    assert "_pidns.py" in lineage.split("|")[1] and "tether.child.zygote" not in lineage


class _Passes:
    """Counts the passes over /proc the supervisor's sweeps take, and notes at each whether
    `watched` (a pid) was still a zombie then (held by the zygote for the sweep)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.watched: int | None = None
        self.zombie_then: list[bool] = []
        real = supervised_module.fresh_snapshot

        async def counted() -> Any:
            self.count += 1
            if self.watched is not None:
                try:
                    zombie = psutil.Process(self.watched).status() == psutil.STATUS_ZOMBIE
                except psutil.NoSuchProcess:
                    zombie = False
                self.zombie_then.append(zombie)
            return await real()

        monkeypatch.setattr(supervised_module, "fresh_snapshot", counted)


async def _reaped_by(zygote: int, pid: int | None) -> None:
    """Wait until the zygote has reaped `pid` (it does once the supervisor lets the child go)."""
    assert pid is not None
    with anyio.fail_after(DEADLINE):
        while pid in {p.pid for p in psutil.Process(zygote).children()}:
            await anyio.sleep(0.005)


PROCESS_ZYGOTE = ChildConfig(spawner="zygote", isolation="process", dispose=FAST)
"""Without the sandbox: a child that could leave its cgroup, whose sweep scans /proc."""


async def test_a_zygote_child_that_started_nothing_is_judged_and_reaped_without_a_pass_over_proc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes = _Passes(monkeypatch)
    async with Supervisor(PROCESS_ZYGOTE) as sup:
        with anyio.fail_after(DEADLINE):
            result = await sup.run("finish", agent=ACT, workspace=HERE)
        assert result.success, result
        zygote = sup.zygote_pid
        assert zygote is not None
        await _reaped_by(zygote, result.pid)
    assert passes.count == 0


async def test_a_zygote_child_whose_grandchild_left_its_cgroup_and_outlived_it_gets_the_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The grandchild (in a session of its own) leaves the child's cgroup, then the child dies:
    # its cgroup is empty, but the zygote, whose child the orphan now is, says it is not alone.
    passes = _Passes(monkeypatch)
    async with Supervisor(PROCESS_ZYGOTE) as sup:
        handle, report = await start_and_wait_for_report(sup, "grandchild", deadline=DEADLINE)
        grandchild = report["grandchild"]
        for parent in host().parents.values():
            (parent / "cgroup.procs").write_text(str(grandchild))
        passes.watched = report["pid"]
        os.kill(report["pid"], signal.SIGKILL)
        with anyio.fail_after(DEADLINE):
            result = await handle.result()
        assert result.failure is not None and result.failure.kind == "killed", result
        assert not _alive(grandchild) and not _alive(report["pid"])
        zygote = sup.zygote_pid
        assert zygote is not None
        await _reaped_by(zygote, result.pid)
    assert passes.count >= 1
    # Its pid (its session's and group's) was held through the sweep, not reused meanwhile.
    assert passes.zombie_then and all(passes.zombie_then), passes.zombie_then


async def test_a_verdict_without_a_status_falls_back_to_asking_the_zygote_to_reap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The zygote sends a verdict with no status when it could not read one (its `waitid` or
    # pidfd failed): the supervisor then asks it to reap the child, and the status still
    # comes through whole.
    heard = ZygoteProcess._hear_verdict
    asked: list[int] = []

    async def without_status(self: ZygoteProcess) -> dict[str, Any]:
        said = dict(await heard(self))
        said.pop("returncode", None)
        self._verdict = said
        return said

    reap = Zygote.reap

    async def spied(self: Zygote, pid: int) -> Any:
        asked.append(pid)
        return await reap(self, pid)

    monkeypatch.setattr(ZygoteProcess, "_hear_verdict", without_status)
    monkeypatch.setattr(Zygote, "reap", spied)
    async with Supervisor(PROCESS_ZYGOTE) as sup:
        with anyio.fail_after(DEADLINE):
            result = await sup.run("exit 7", agent=ACT, workspace=HERE)
        assert result.failure is not None and result.failure.kind == "exit_nonzero", result
        assert result.failure.exit_code == 7
        assert len(asked) == 1
        zygote = sup.zygote_pid
        assert zygote is not None
        await _reaped_by(zygote, result.pid)
