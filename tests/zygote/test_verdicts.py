"""`tether.child.verdicts.peek`: an exited child's status and rusage, read without reaping it
(what lets the zygote tell a child's end the moment it happens and still hold its pid until the
supervisor has judged its tree)."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tether.child.verdicts import peek
from tether.contain._sys import supported_arch

pytestmark = pytest.mark.skipif(not supported_arch(), reason="no waitid number for this arch")

DEADLINE = 10.0


def _exited(pid: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline, f"{pid} did not exit"
        time.sleep(0.005)


def test_an_exited_childs_status_and_cpu_are_read_and_it_stays_a_zombie_until_reaped() -> None:
    pid = os.fork()
    if pid == 0:
        end = time.process_time() + 0.05
        while time.process_time() < end:  # some CPU to be counted
            pass
        os._exit(7)
    _exited(pid)
    said = peek(pid)
    assert said is not None
    assert said["returncode"] == 7
    assert float(said["utime"]) + float(said["stime"]) >= 0.04
    assert int(said["maxrss"]) > 0
    assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # not reaped by the peek
    _, status, _ = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7


def test_a_killed_childs_status_is_minus_its_signal() -> None:
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    os.kill(pid, signal.SIGKILL)
    _exited(pid)
    said = peek(pid)
    os.waitpid(pid, 0)
    assert said is not None and said["returncode"] == -signal.SIGKILL


def test_a_child_still_running_or_not_ours_has_no_status() -> None:
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    try:
        assert peek(pid) is None  # and it did not wait for the exit
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert peek(1) is None
