"""The keeper cannot be disarmed from the sandbox: a child that writes the farewell through
/proc, SIGSTOPs the keeper and SIGKILLs the supervisor is refused each time, and when the
supervisor is then SIGKILLed, the child's whole tree (a daemon in its own session and one with
an empty environment included) is gone within 2 s."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from sandbox_targets import HERE, needs_sandbox

pytestmark = needs_sandbox
DEADLINE = 20.0


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_STOPPED)
    except psutil.NoSuchProcess:
        return False


def test_a_sandboxed_child_cannot_disarm_the_keeper_and_its_tree_dies_with_the_supervisor(
    tmp_path: Path, read_line: Callable[[subprocess.Popen[bytes], float], bytes]
) -> None:
    errors = tmp_path / "host-stderr.txt"
    ws = tmp_path / "ws"
    ws.mkdir()
    with errors.open("wb") as err:
        host = subprocess.Popen(
            [sys.executable, "-I", str(HERE / "disarm_host.py"), str(ws)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    tracked: list[psutil.Process] = []
    try:
        line = read_line(host, DEADLINE)
        assert line, f"the host never reported: {errors.read_text()}"
        report = json.loads(line)
        assert all(v.startswith("refused") for v in report["outcomes"].values()), report
        assert host.poll() is None, "the child killed its supervisor"
        keeper = psutil.Process(report["keeper"])
        assert keeper.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)
        tracked = [psutil.Process(p) for p in [report["child"], *report["grandchildren"]]]
        assert all(_alive(p) for p in tracked)

        host.send_signal(signal.SIGKILL)
        host.wait(timeout=DEADLINE)
        killed_at = time.monotonic()
        left = [p for p in tracked if _alive(p)]
        while left and time.monotonic() - killed_at < 2.0:
            time.sleep(0.02)
            left = [p for p in tracked if _alive(p)]
        assert not left, "outlived the supervisor: " + "; ".join(str(p.pid) for p in left)
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
