"""Every failure is a result: tiny misbehaving children under a real `Supervisor`.

Each test runs one child from `tests/children/` and checks that the parent neither raised nor
hung, that the result says `success: false` with the exact `failure.kind` and its details, and
that the result came within a bound derived from the configured graces. The bounds are
correctness bounds (the parent did not wait for something it must not wait for), not
benchmarks. The autouse `reaper` fixture fails any test that leaves a process behind.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from tether.parent.process.host import host
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.run.events import Event, RunFinished, RunStarted
from tether.parent.supervisor import ChildConfig, RunHandle, Supervisor
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
)

pytestmark = pytest.mark.anyio

CHILDREN = Path(__file__).parent.parent / "children"
GRACES = DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0)
LADDER = GRACES.shutdown + GRACES.eof + GRACES.term + GRACES.kill
"""The longest the dispose ladder may take, sweep included."""
STARTUP = 5.0
"""Margin for starting the trampoline and a Python child on a busy machine. The bounds are far
below what a parent that waits for the wrong thing would take (a 60 s grandchild, a child
that never exits)."""
CONFIG = ChildConfig(dispose=GRACES, handshake_timeout=10.0, cancel_grace=0.5)
HANG = 30.0
"""Past this the parent hung: fail rather than wait for the suite's timeout."""


def child(name: str, *args: str) -> list[str]:
    return [sys.executable, "-I", str(CHILDREN / name), *args]


async def run_child(
    workspace: Path,
    command: list[str],
    *,
    config: ChildConfig = CONFIG,
    **kwargs: Any,
) -> tuple[RunResult, float]:
    """Run one child to its result; return the result and the seconds it took."""
    async with Supervisor(config) as sup:
        started = time.monotonic()
        with anyio.fail_after(HANG):
            result = await sup.run("misbehave", workspace=workspace, command=command, **kwargs)
        return result, time.monotonic() - started


def assert_failed(result: RunResult, kind: str) -> None:
    assert result.success is False, result
    assert result.failure is not None, result
    assert result.failure.kind == kind, result
    assert result.status == ("aborted" if kind == "cancelled" else "error")
    assert result.message


# --- the child dies ---------------------------------------------------------------------------


async def test_a_child_that_exits_1_mid_run_is_exit_nonzero_with_its_stderr_tail(
    tmp_path: Path,
) -> None:
    result, elapsed = await run_child(tmp_path, child("exit_mid_run.py"))

    assert_failed(result, "exit_nonzero")
    assert result.failure is not None
    assert result.failure.exit_code == 1
    assert result.failure.signal is None
    assert "flux capacitor overheated" in result.failure.stderr_tail
    assert "starting the widget" in result.failure.stderr_tail
    assert "flux capacitor overheated" in result.message
    assert "status 1" in result.message
    assert elapsed < STARTUP + 1.0


class BlockingModel:
    """A model provider whose turn never ends; records whether the parent abandoned it."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.abandoned = False

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.asked.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.abandoned = True
            raise
        raise AssertionError("unreachable")


async def test_a_child_that_exits_0_with_its_model_request_pending_is_a_protocol_failure(
    tmp_path: Path,
) -> None:
    # Exit status 0 without answering the run is not a crash and not `exit_nonzero`: the child
    # broke the protocol by leaving with `agent/run` unanswered.
    model = BlockingModel()
    result, elapsed = await run_child(tmp_path, child("exit_while_requesting.py"), model=model)

    assert_failed(result, "protocol")
    assert result.failure is not None
    assert result.failure.exit_code == 0
    assert result.failure.signal is None
    assert "without answering" in result.message
    assert "asked for a model turn" in result.failure.stderr_tail
    # The request and the end of the stream may be read together, and a dead child's request is
    # then never served; if it was served, the call must not outlive the child.
    assert model.abandoned or not model.asked.is_set(), "a model call outlived its child"
    assert elapsed < STARTUP + 1.0


async def test_a_child_killed_by_sigsegv_is_crashed_with_the_signal_name(tmp_path: Path) -> None:
    result, elapsed = await run_child(tmp_path, child("signal_self.py", "SIGSEGV"))

    assert_failed(result, "crashed")
    assert result.failure is not None
    assert result.failure.signal == "SIGSEGV"
    assert result.failure.exit_code is None
    assert result.failure.rung in ("none", "exit")  # it died by itself, not by our hand
    assert "SIGSEGV" in result.message
    assert "about to die by SIGSEGV" in result.failure.stderr_tail
    assert elapsed < STARTUP + 1.0


@pytest.mark.parametrize("how", ["SIGABRT", "abort"])
async def test_a_child_killed_by_sigabrt_is_crashed_never_exit_0(tmp_path: Path, how: str) -> None:
    result, _ = await run_child(tmp_path, child("signal_self.py", how))

    assert_failed(result, "crashed")
    assert result.failure is not None
    assert result.failure.signal == "SIGABRT"
    assert result.failure.exit_code is None
    assert "still alive" not in result.failure.stderr_tail


async def test_a_sigkill_from_outside_is_killed_even_with_a_cpu_limit_set(
    tmp_path: Path,
) -> None:
    # Not `cpu_limit`: the child used a fraction of its 30 s of CPU.
    result, _ = await run_child(tmp_path, child("signal_self.py", "SIGKILL"), limits=Limits(cpu=30))

    assert_failed(result, "killed")
    assert result.failure is not None
    assert result.failure.signal == "SIGKILL"
    assert result.failure.limit is None


# --- the child breaks the wire ----------------------------------------------------------------


async def test_a_line_that_is_not_json_is_a_protocol_failure(tmp_path: Path) -> None:
    result, elapsed = await run_child(tmp_path, child("garbage_line.py"))

    assert_failed(result, "protocol")
    assert "not JSON" in result.message
    assert "Traceback" in result.message  # a preview of the offending line
    assert elapsed < STARTUP + LADDER


async def test_half_a_line_then_exit_is_a_truncated_protocol_failure(tmp_path: Path) -> None:
    result, elapsed = await run_child(tmp_path, child("half_line.py"))

    assert_failed(result, "protocol")
    assert result.failure is not None
    assert result.failure.exit_code == 0
    assert "middle of a message" in result.message
    assert elapsed < STARTUP + 1.0


async def test_a_child_that_answers_initialize_with_another_protocol_version_is_protocol(
    tmp_path: Path,
) -> None:
    result, elapsed = await run_child(tmp_path, child("wrong_version.py"))

    assert_failed(result, "protocol")
    assert "protocol version 99" in result.message
    assert result.failure is not None
    assert result.failure.rung in ("none", "exit")  # it left on the EOF lifeline
    assert elapsed < STARTUP + 1.0


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        m = re.search(r"VmHWM:\s+(\d+)", f.read())
    assert m is not None
    return int(m.group(1))


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


async def test_a_line_over_the_cap_is_oversize_and_the_parent_memory_stays_bounded(
    tmp_path: Path,
) -> None:
    megabytes = 50
    config = ChildConfig(dispose=GRACES, max_message_bytes=1_000_000)
    exact_peak = _reset_peak_rss()
    before = _peak_rss_kib() if exact_peak else psutil.Process().memory_info().rss // 1024

    result, elapsed = await run_child(
        tmp_path, child("oversize_line.py", str(megabytes)), config=config
    )

    growth_mib = (_peak_rss_kib() - before) / 1024
    assert_failed(result, "oversize")
    assert "1000000" in result.message
    assert growth_mib < 20, f"the parent's peak RSS grew {growth_mib:.1f} MiB"
    assert elapsed < STARTUP + LADDER


# --- the child will not stop ------------------------------------------------------------------


async def test_a_child_deaf_to_sigterm_and_eof_is_killed_at_the_sigkill_rung_within_the_graces(
    tmp_path: Path,
) -> None:
    wall = 0.5
    result, elapsed = await run_child(tmp_path, child("stubborn.py"), limits=Limits(wall=wall))

    assert_failed(result, "timeout")
    assert result.failure is not None
    assert result.failure.rung == "sigkill"
    assert result.failure.signal == "SIGKILL"
    assert "never answering" in result.failure.stderr_tail
    # Spawn, the wall clock, then each rung in turn: eof, sigterm, sigkill.
    assert elapsed >= wall + GRACES.eof + GRACES.term
    assert elapsed < STARTUP + wall + LADDER


async def test_a_grandchild_holding_stdout_does_not_delay_the_result_and_is_killed(
    tmp_path: Path,
) -> None:
    result, elapsed = await run_child(tmp_path, child("leaves_grandchild.py"))
    received_at = time.monotonic()

    assert_failed(result, "exit_nonzero")
    assert result.failure is not None
    assert result.failure.exit_code == 2
    tail = result.failure.stderr_tail
    grandchild = re.search(r"grandchild=(\d+)", tail)
    exited = re.search(r"exiting_at=([\d.]+)", tail)
    assert grandchild is not None and exited is not None, tail
    # The grandchild would hold the pipe for 60 s: the result came from the child's exit.
    assert received_at - float(exited.group(1)) < 1.0, "the held pipe delayed the result"
    assert elapsed < STARTUP + 1.0
    assert not _running(int(grandchild.group(1))), "the grandchild outlived the dispose"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_run_past_its_wall_deadline_is_timeout_with_the_limit_named(
    tmp_path: Path,
) -> None:
    # A generous EOF grace: this test is about the rung a child that honours EOF stops at, and a
    # loaded machine can take longer than the suite's short grace to run its exit.
    patient = ChildConfig(dispose=DisposePolicy(shutdown=0.3, eof=3.0, term=0.5, kill=1.0))
    result, elapsed = await run_child(
        tmp_path, child("silent.py"), config=patient, limits=Limits(wall="500ms")
    )

    assert_failed(result, "timeout")
    assert result.failure is not None
    assert result.failure.limit == "wall=0.5s"
    assert result.failure.rung == "exit"  # it left on the EOF lifeline
    assert "0.5s" in result.message
    assert 0.5 <= elapsed < STARTUP + 0.5 + LADDER


async def test_a_child_silent_past_the_idle_limit_is_unresponsive(tmp_path: Path) -> None:
    result, elapsed = await run_child(tmp_path, child("silent.py"), limits=Limits(idle=0.5))

    assert_failed(result, "unresponsive")
    assert result.failure is not None
    assert result.failure.limit == "idle=0.5s"
    assert "thinking very quietly" in result.failure.stderr_tail
    assert 0.5 <= elapsed < STARTUP + 0.5 + LADDER


class SlowModel:
    """A model provider that takes its time over one turn."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        await anyio.sleep(self.seconds)
        return ModelCompleteResult(message=ChatMessage(role="assistant", content="slow but sure"))


async def test_a_slow_model_turn_in_the_parent_does_not_count_as_the_childs_silence(
    tmp_path: Path,
) -> None:
    # The child waits in silence for the parent's answer: it is the parent that is slow.
    result, _ = await run_child(
        tmp_path, child("asks_model.py"), model=SlowModel(1.5), limits=Limits(idle=0.5)
    )

    assert result.success is True, result
    assert result.summary == "slow but sure"


# --- stderr -----------------------------------------------------------------------------------


async def test_a_stderr_flood_does_not_deadlock_a_run_that_then_succeeds(tmp_path: Path) -> None:
    result, elapsed = await run_child(tmp_path, child("stderr_flood.py", "answer", "50"))

    assert result.success is True, result
    assert result.status == "completed"
    assert result.summary == "survived the flood"
    assert result.failure is None
    assert elapsed < 10.0


async def test_the_stderr_ring_keeps_the_last_words_after_a_flood(tmp_path: Path) -> None:
    ring = 16 * 1024
    config = ChildConfig(dispose=GRACES, stderr_ring_bytes=ring)
    result, _ = await run_child(tmp_path, child("stderr_flood.py", "fail", "50"), config=config)

    assert_failed(result, "exit_nonzero")
    assert result.failure is not None
    tail = result.failure.stderr_tail
    assert tail.rstrip().endswith("last words: the flood is over")
    assert len(tail.encode()) <= ring
    assert "the flood is over" in result.message


# --- the child cannot start -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["tether-no-such-command-anywhere"],
        ["/nonexistent/tether/child"],
    ],
    ids=["bare-name-not-on-path", "absolute-path-missing"],
)
async def test_a_command_that_does_not_exist_is_spawn_failed(
    tmp_path: Path, command: list[str]
) -> None:
    result, elapsed = await run_child(tmp_path, command)

    assert_failed(result, "spawn_failed")
    assert command[0] in result.message
    assert elapsed < 2.0  # refused before anything was spawned


async def test_a_file_without_execute_permission_is_spawn_failed(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\nexit 0\n")

    result, _ = await run_child(tmp_path, [str(script)])

    assert_failed(result, "spawn_failed")
    assert "not executable" in result.message


async def test_a_script_whose_interpreter_is_missing_is_spawn_failed(tmp_path: Path) -> None:
    # The file exists and is executable, so only exec itself can fail: the trampoline reports it.
    script = tmp_path / "bad-shebang"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

    result, elapsed = await run_child(tmp_path, [str(script)])

    assert_failed(result, "spawn_failed")
    assert "bad-shebang" in result.message
    assert elapsed < STARTUP + LADDER


# --- the parent ends the run ------------------------------------------------------------------


async def _start_and_wait_running(
    sup: Supervisor, workspace: Path, command: list[str]
) -> RunHandle:
    """Start a run and return once the child has said `started`."""
    running = anyio.Event()

    def on_event(ev: Event) -> None:
        if getattr(ev, "kind", None) == "started":
            running.set()

    handle = await sup.start("wait", workspace=workspace, command=command, on_event=on_event)
    with anyio.fail_after(HANG):
        await running.wait()
    return handle


async def test_cancelling_a_child_that_obeys_agent_cancel_is_aborted(tmp_path: Path) -> None:
    async with Supervisor(CONFIG) as sup:
        handle = await _start_and_wait_running(sup, tmp_path, child("cancellable.py", "obey"))
        started = time.monotonic()
        with anyio.fail_after(HANG):
            result = await handle.cancel()
        elapsed = time.monotonic() - started

    assert_failed(result, "cancelled")
    assert result.message == "stopped on request"  # the child's own answer
    assert result.failure is not None
    assert result.failure.rung in ("none", "shutdown")  # it left politely
    assert elapsed < CONFIG.cancel_grace + LADDER


async def test_cancelling_a_child_that_ignores_agent_cancel_cuts_it_after_the_cancel_grace(
    tmp_path: Path,
) -> None:
    async with Supervisor(CONFIG) as sup:
        handle = await _start_and_wait_running(sup, tmp_path, child("cancellable.py", "ignore"))
        started = time.monotonic()
        with anyio.fail_after(HANG):
            result = await handle.cancel()
        elapsed = time.monotonic() - started

    assert_failed(result, "cancelled")
    assert result.failure is not None
    assert result.failure.rung == "exit"  # cut off, it still left on the EOF lifeline
    assert CONFIG.cancel_grace <= elapsed < CONFIG.cancel_grace + LADDER


async def test_cancelling_the_callers_task_disposes_the_child_and_raises_nothing_else(
    tmp_path: Path,
) -> None:
    pids: list[int] = []

    def on_event(ev: Event) -> None:
        if isinstance(ev, RunStarted):
            pids.append(ev.pid)

    async with Supervisor(CONFIG) as sup:
        started = time.monotonic()
        with anyio.move_on_after(1.0) as scope:
            await sup.run(
                "wait", workspace=tmp_path, command=child("stubborn.py"), on_event=on_event
            )
        elapsed = time.monotonic() - started
        assert scope.cancelled_caught
        # The child is gone before the cancellation reached us, not later.
        assert pids and not _running(pids[0])
        assert not sup._live and not sup._handles

    assert elapsed < 1.0 + LADDER


async def test_cancelling_a_run_before_its_child_has_started_is_aborted(tmp_path: Path) -> None:
    started: list[Event] = []
    async with Supervisor(CONFIG) as sup:
        handle = await sup.start(
            "never", workspace=tmp_path, command=child("stubborn.py"), on_event=started.append
        )
        with anyio.fail_after(HANG):
            result = await handle.cancel()

    assert_failed(result, "cancelled")
    assert not [ev for ev in started if isinstance(ev, RunStarted)]


async def test_an_error_in_the_supervisor_block_disposes_its_children_and_propagates_as_itself(
    tmp_path: Path,
) -> None:
    class Boom(Exception):
        pass

    handles: list[RunHandle] = []
    started = time.monotonic()
    with pytest.raises(Boom):
        async with Supervisor(CONFIG) as sup:
            handles.append(await _start_and_wait_running(sup, tmp_path, child("stubborn.py")))
            raise Boom
    assert handles[0].done
    assert handles[0].pid is not None and not _running(handles[0].pid)
    result = await handles[0].result()
    assert_failed(result, "cancelled")
    assert time.monotonic() - started < STARTUP + LADDER


# --- well-behaved edge --------------------------------------------------------------------------


async def test_a_child_that_answers_and_exits_at_once_still_delivers_its_answer(
    tmp_path: Path,
) -> None:
    # Its answer and its EOF reach the parent in one go; the EOF must not eat the answer.
    for _ in range(5):
        result, _ = await run_child(tmp_path, child("answer_and_exit.py"))
        assert result.success is True, result
        assert result.summary == "done and gone"


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
async def test_a_crashed_childs_result_is_told_once_as_soon_as_its_tree_is_judged(
    tmp_path: Path, isolation: str
) -> None:
    """The run's result goes out the moment the dispose has judged the tree (the child
    reaped, the sweep's verdict in), before the child's cgroup and pipes are let go; they
    are gone by the time the run is."""
    unified = host().parents.get("unified")
    mine = f"tether-{os.getpid()}-*"
    seen: list[tuple[str, int]] = []

    def on_event(ev: Event) -> None:
        if isinstance(ev, RunFinished):
            kind = ev.result.failure.kind if ev.result.failure else ""
            seen.append((kind, len(list(unified.glob(mine))) if unified else 1))

    config = ChildConfig(isolation=isolation, dispose=GRACES)
    async with Supervisor(config) as sup:
        with anyio.fail_after(HANG):
            handle = await sup.start(
                "misbehave",
                workspace=tmp_path,
                command=child("signal_self.py", "SIGSEGV"),
                on_event=on_event,
            )
            result = await handle.result()
            await handle.wait()
        left = list(unified.glob(mine)) if unified else []
    assert_failed(result, "crashed")
    assert result.failure is not None and result.failure.signal == "SIGSEGV"
    assert seen == [("crashed", 1)]  # told once, while the child's cgroup was still there
    assert left == []  # and let go before the run was over
