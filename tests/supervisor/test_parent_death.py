"""The parent itself is SIGKILLed mid-run: nothing it started may outlive it.

No code of the dead parent runs, so this is what the kernel and the supervisor's arrangements
made beforehand must achieve on their own. The parent here is a separate process
(`children/parent_host.py`) running a real Supervisor whose child starts two grandchildren,
one of them in a session of its own. Processes that escape this test process's tree are not
visible to the autouse reaper, so the test kills any survivor itself.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

CHILDREN = Path(__file__).parent.parent / "children"
DEADLINE = 20.0
"""For the host to start its run and report the pids."""


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_sigkilled_parent_takes_its_child_and_grandchildren_down_within_2s(
    tmp_path: Path, read_line: Callable[[subprocess.Popen[bytes], float], bytes]
) -> None:
    errors = tmp_path / "host-stderr.txt"
    with errors.open("wb") as err:
        host = subprocess.Popen(
            [sys.executable, "-I", str(CHILDREN / "parent_host.py")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    tracked: list[psutil.Process] = []
    try:
        line = read_line(host, DEADLINE)
        assert line, f"the host never reported: {errors.read_text()}"
        pids = json.loads(line)
        # Everything the host started, by parentage (the supervisor's own helpers included),
        # plus the grandchild that left for a session of its own.
        tracked = psutil.Process(host.pid).children(recursive=True)
        known = {p.pid for p in tracked}
        for pid in [pids["child"], *pids["grandchildren"]]:
            if pid not in known:
                tracked.append(psutil.Process(pid))
        assert all(_alive(p) for p in tracked), "all of it runs before the parent dies"

        host.send_signal(signal.SIGKILL)
        host.wait(timeout=DEADLINE)
        killed_at = time.monotonic()

        left = [p for p in tracked if _alive(p)]
        while left and time.monotonic() - killed_at < 2.0:
            time.sleep(0.02)
            left = [p for p in tracked if _alive(p)]
        assert not left, "outlived the parent: " + "; ".join(
            f"{p.pid} {p.cmdline()!r}" for p in left if _alive(p)
        )
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=DEADLINE)
        if host.stdout is not None:
            host.stdout.close()
        for p in tracked:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
