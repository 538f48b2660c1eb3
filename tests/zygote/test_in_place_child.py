"""The trampoline becomes tether's own child in place (`contain/trampoline.py`) instead of
exec'ing a second interpreter: the child it becomes must be indistinguishable from the exec'd
one (`python -I -m tether.child.__main__`, which the trampoline does exec), and anything else
is still exec'd."""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from act_reports import ACT, cmdline, start_and_wait_for_report, status_field

from tether.contain import argv as config_word
from tether.contain.inplace import (
    TRAMPOLINE,
    import_path_writable,
    runs_in_place,
    trampoline_argv,
    writable_by_child,
)
from tether.contain.plan import Plan
from tether.contain.sequence import EXEC_FAILED
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import DEFAULT_COMMAND
from tether.parent.process.env import build_child_env
from tether.parent.process.isolation import trampoline_in_place
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.process.proc import ChildProcess
from tether.parent.process.start import SpawnSpec
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

FAST = DisposePolicy(shutdown=0.3, eof=0.3, term=0.3, kill=1.0)
IN_PLACE = ChildConfig(spawner="exec", dispose=FAST)
EXEC_D = ChildConfig(
    spawner="exec",
    dispose=FAST,
    command=(sys.executable, "-I", "-m", "tether.child.__main__"),
)
"""The same runtime by a command the trampoline does not recognise: exec'd as before."""
DEADLINE = 15.0


def test_the_default_command_runs_in_place_and_its_trampoline_starts_with_its_flags() -> None:
    # The parent and the trampoline must agree on the command, or every cold spawn silently
    # pays the second interpreter again.
    assert runs_in_place(DEFAULT_COMMAND)
    assert runs_in_place([*DEFAULT_COMMAND, "--agent", "x:y"])
    argv = trampoline_argv("t.py", "W", DEFAULT_COMMAND, in_place=True)
    assert argv == [sys.executable, "-I", "t.py", "W", "--", *DEFAULT_COMMAND]
    unsafe = trampoline_argv("t.py", "W", DEFAULT_COMMAND, in_place=False)
    assert unsafe[:3] == [sys.executable, "-I", "-S"]
    for other in (
        EXEC_D.command,
        ("python3", "-I", "-m", "tether.child"),  # another interpreter, maybe
        (sys.executable, "-m", "tether.child"),  # other flags
        (sys.executable, "-I", "-S", "-m", "tether.child"),
        ("/bin/true",),
    ):
        assert not runs_in_place(other), other
        argv = trampoline_argv("t.py", "W", other, in_place=True)
        assert argv[:3] == [sys.executable, "-I", "-S"]


def _sandbox(workspace: str, **more: Any) -> dict[str, Any]:
    return Plan(level="sandbox", abi=6, workspace=workspace, **more).to_json()


def test_what_a_sandboxed_child_may_write_is_its_workspace_temp_dirs_and_home() -> None:
    assert writable_by_child(None) == []
    assert writable_by_child(Plan(workspace="/w").to_json()) == [], "not sandboxed"
    plan = _sandbox("/w", writes=["/t1", "/t2"], home="/t1/home")
    assert sorted(writable_by_child(plan)) == ["/t1", "/t1/home", "/t2", "/w"]
    read_only = _sandbox("/w", writes=["/t1"], workspace_read_only=True)
    assert writable_by_child(read_only) == ["/t1"]
    # Private mounts: /tmp and the rest are the child's own tmpfs; only the workspace is real.
    private = _sandbox("/w", writes=["/tmp", "/var/tmp"], home="/tmp/home", private_mounts=True)
    assert writable_by_child(private) == ["/w"]


def test_an_import_path_inside_a_path_the_child_writes_is_writable(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    venv = ws / ".venv" / "lib" / "site-packages"
    venv.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(ws)
    assert import_path_writable(_sandbox(str(ws)), [str(venv)])
    assert import_path_writable(_sandbox(str(link)), [str(venv)]), "compared resolved too"
    assert import_path_writable(_sandbox("/"), [str(venv)])
    assert not import_path_writable(_sandbox(str(tmp_path / "w")), [str(tmp_path / "ws2")])
    assert not import_path_writable(_sandbox(str(ws), workspace_read_only=True), [str(venv)])
    assert not import_path_writable(Plan(workspace=str(ws)).to_json(), [str(venv)])
    # A root sandbox mounts the code inside its workspace read-only again, and its /tmp is
    # private: neither is a way to the host's import path.
    protected = _sandbox(str(ws), private_mounts=True, protect=[str(ws / ".venv")])
    assert not import_path_writable(protected, [str(venv)])
    assert import_path_writable(protected, [str(ws / "src")])
    private_tmp = _sandbox(str(tmp_path / "w"), writes=[str(tmp_path)], private_mounts=True)
    assert not import_path_writable(private_tmp, [str(venv)])
    assert import_path_writable(_sandbox(str(tmp_path / "w"), writes=[str(tmp_path)]), [str(venv)])


def test_a_sandboxed_child_that_could_write_its_own_import_path_is_execd_not_run_in_place(
    tmp_path: Path,
) -> None:
    # With the interpreter's prefix inside the workspace, site's `.pth` processing before the
    # sandbox would run what the previous child wrote there: that child must be exec'd.
    prefix = os.path.dirname(sys.prefix)
    assert not trampoline_in_place(DEFAULT_COMMAND, _sandbox(prefix))
    assert not trampoline_in_place(DEFAULT_COMMAND, _sandbox("/tmp", writes=[prefix]))
    assert trampoline_in_place(DEFAULT_COMMAND, _sandbox(str(tmp_path)))
    assert trampoline_in_place(DEFAULT_COMMAND, None)


def test_a_trampoline_started_with_other_flags_than_the_childs_execs_it(tmp_path: Path) -> None:
    # Run by hand as `python -I -S trampoline.py`: the child must not inherit `-S`.
    probe = "import sys; print(sys.flags.no_site, flush=True)"
    got = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(TRAMPOLINE),
            "{}",
            "--",
            sys.executable,
            "-I",
            "-c",
            probe,
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == "0\n"


async def test_tethers_own_child_runs_in_the_trampolines_process_and_another_command_is_execd() -> (
    None
):
    async with Supervisor(IN_PLACE) as sup:
        own, own_report = await start_and_wait_for_report(sup, "hold", deadline=DEADLINE)
        other, other_report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, config=EXEC_D
        )
        own_cmd = cmdline(own_report["pid"])
        assert str(TRAMPOLINE) in own_cmd and own_cmd[own_cmd.index("--") + 1 :][:4] == list(
            DEFAULT_COMMAND
        ), own_cmd
        assert cmdline(other_report["pid"])[:4] == list(EXEC_D.command)
        own.abort()
        other.abort()


async def test_a_child_run_in_place_sees_what_an_execd_child_sees() -> None:
    limits = Limits(memory="768M", open_files=321, file_size="7M", wall="20s")
    # A supervisor that ignores a signal (`nohup`, a test runner) passes neither child that.
    ignored = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    try:
        await _compare_in_place_with_execd(limits)
    finally:
        signal.signal(signal.SIGHUP, ignored)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


async def _compare_in_place_with_execd(limits: Limits) -> None:
    async with Supervisor(IN_PLACE) as sup:
        own, own_report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, limits=limits
        )
        other, other_report = await start_and_wait_for_report(
            sup, "hold", deadline=DEADLINE, config=EXEC_D, limits=limits
        )
        a, b = own_report["pid"], other_report["pid"]
        # The interpreter as the child's code sees it: the same import path (site-packages
        # added, nothing of the trampoline's left in front), flags, site and builtins; the
        # collector on, start-up frozen; the same open descriptors (nothing the trampoline
        # opened survives).
        mine, theirs = own_report["interpreter"], other_report["interpreter"]
        assert mine["argv"][1:] == ["--agent", ACT]
        assert mine["argv"][0].endswith("/tether/child/__main__.py")
        for key in (
            "argv",
            "path",
            "flags",
            "site",
            "exit_builtin",
            "gc_enabled",
            "gc_frozen",
            "fds",
        ):
            assert mine[key] == theirs[key], key
        assert mine["gc_enabled"] and mine["gc_frozen"] and mine["site"]
        assert mine["flags"] == {"isolated": 1, "no_site": 0, "no_user_site": 1, "safe_path": True}
        # The process as the kernel sees it: signals, limits, session, no core dumps.
        for field in ("SigIgn", "SigCgt", "SigBlk", "NoNewPrivs", "Seccomp"):
            assert status_field(a, field) == status_field(b, field), field
        fresh = 1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)  # what Python ignores
        assert int(status_field(a, "SigIgn"), 16) == fresh
        assert int(status_field(a, "SigBlk"), 16) == 0
        assert Path(f"/proc/{a}/limits").read_text() == Path(f"/proc/{b}/limits").read_text()
        assert os.getsid(a) == a and os.getpgid(a) == a
        own.abort()
        other.abort()


@pytest.mark.parametrize("how", ["in place", "exec'd"])
async def test_a_child_that_cannot_import_its_runtime_comes_back_failed_with_the_reason(
    how: str, tmp_path: Path
) -> None:
    # Three open files: the trampoline starts, the child cannot open what it loads next.
    cfg = IN_PLACE if how == "in place" else EXEC_D
    cfg = dataclasses.replace(cfg, isolation="process")
    async with Supervisor(cfg) as sup:
        with anyio.fail_after(DEADLINE):
            result = await sup.run(
                "hi",
                workspace=tmp_path,
                limits=Limits(open_files=3),
                model=ScriptedModel.from_json('{"turns": []}'),
            )
    assert not result.success and result.failure is not None, result
    assert result.failure.kind in ("exit_nonzero", "spawn_failed"), result.failure
    # EMFILE, as Python or the dynamic loader words it.
    tail = result.failure.stderr_tail
    assert "Too many open files" in tail or "Error 24" in tail, result.failure


AGENT_MARKS_ITS_LOAD = """
import os

open(os.environ["TETHER_TEST_MARK"], "w").close()


def make(params):
    raise NotImplementedError
"""


async def _spawned_in_place(tmp_path: Path, procs: str) -> tuple[ChildProcess, Path]:
    agent = tmp_path / "marking_agent.py"
    agent.write_text(AGENT_MARKS_ITS_LOAD)
    mark = tmp_path / "agent-loaded"
    env = {**build_child_env(os.environ), "TETHER_TEST_MARK": str(mark)}
    argv = [*DEFAULT_COMMAND, "--agent", f"{agent}:make"]
    assert trampoline_in_place(argv, None)
    return ChildProcess.spawn(SpawnSpec(argv, env, cgroup_procs=[procs])), mark


async def _end(proc: ChildProcess) -> None:
    proc.stdin.close()
    if not await proc.wait_for(DEADLINE):
        proc.send_signal(signal.SIGKILL)
        await proc.wait_for(DEADLINE)
    proc.reap()
    proc.close_pipes()


async def test_a_child_run_in_place_loads_no_agent_before_its_cgroup_join_is_done(
    tmp_path: Path,
) -> None:
    # The join overlaps the runtime's imports; a `cgroup.procs` that is a FIFO holds it (the
    # write waits for a reader) for as long as this test likes.
    fifo = tmp_path / "cgroup.procs"
    os.mkfifo(fifo)
    proc, mark = await _spawned_in_place(tmp_path, str(fifo))
    try:
        await anyio.sleep(1.5)  # the runtime's imports take a tenth of that
        assert not proc.exited()
        assert not mark.exists(), "the agent loaded before the child was in its cgroup"
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            written = b""
            with anyio.fail_after(DEADLINE):
                while not written:
                    await anyio.sleep(0.01)
                    written = os.read(reader, 64)
                while not mark.exists():
                    await anyio.sleep(0.01)
        finally:
            os.close(reader)
        assert written == str(proc.pid).encode(), "the join wrote the child's own pid"
    finally:
        await _end(proc)


async def test_a_child_run_in_place_that_cannot_join_its_cgroup_ends_with_the_reason(
    tmp_path: Path,
) -> None:
    proc, mark = await _spawned_in_place(tmp_path, str(tmp_path / "gone" / "cgroup.procs"))
    try:
        assert await proc.wait_for(DEADLINE)
        status = proc.reap()
        assert status is not None and status.returncode == 127
        said = os.read(proc.stderr.fd, 4096).decode()
        assert f"{EXEC_FAILED} {sys.executable}: cannot join its cgroup:" in said, said
        assert "No such file or directory" in said, said
        assert not mark.exists()
    finally:
        await _end(proc)


def test_a_child_run_in_place_whose_runtime_fails_before_serving_ends_after_its_join(
    tmp_path: Path,
) -> None:
    # Ending while its join thread still writes, the process finalizes, and the thread that
    # wakes into it is ended by pthread_exit: glibc loads libgcc_s for that, and aborts the
    # process when it cannot (SIGABRT, "libgcc_s.so.1 must be installed for pthread_exit to
    # work") — a child out of file descriptors or memory, the very failures that end a runtime
    # this early, instead of the exit and the reason. A FIFO holds the join; a closed stdin
    # fails the runtime (it takes the wire off fd 0) before it would wait for the join.
    fifo = tmp_path / "cgroup.procs"
    os.mkfifo(fifo)
    config = config_word.encode({"cgroup_procs": [str(fifo)], "rlimits": {}, "plan": None})
    argv = trampoline_argv(str(TRAMPOLINE), config, DEFAULT_COMMAND, in_place=True)
    proc = subprocess.Popen(
        ["/bin/sh", "-c", 'exec "$@" <&-', "sh", *argv],
        env=build_child_env(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stderr is not None
    try:
        said = b""
        deadline = time.monotonic() + DEADLINE
        while b"Bad file descriptor" not in said and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 0.05)[0]:
                said += os.read(proc.stderr.fileno(), 65536)
        assert b"Bad file descriptor" in said, said  # the runtime's traceback: it failed
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)  # no longer than the end of its join
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            written = b""
            while not written and time.monotonic() < deadline + DEADLINE:
                time.sleep(0.01)
                written = os.read(reader, 64)
            proc.wait(timeout=DEADLINE)
        finally:
            os.close(reader)
        assert written == str(proc.pid).encode()
        said += proc.stderr.read()
        assert proc.returncode == 1, said  # as the runtime exec'd ends on that traceback
        assert b"libgcc_s" not in said, said
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
