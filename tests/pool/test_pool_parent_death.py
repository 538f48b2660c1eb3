"""The supervisor holding a warm pool is SIGKILLed: its idle children die with it (each got
PR_SET_PDEATHSIG from the trampoline, as a cold child does)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

HOST = Path(__file__).with_name("pool_host.py")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_pooled_children_die_within_2s_when_their_supervisor_is_sigkilled(
    tmp_path: Path,
) -> None:
    host = subprocess.Popen([sys.executable, str(HOST), str(tmp_path)], stdout=subprocess.PIPE)
    pooled: list[int] = []
    try:
        assert host.stdout is not None
        ready, _, _ = select.select([host.stdout], [], [], 30)
        assert ready, "the host never reported its pool"
        pooled = json.loads(host.stdout.readline())["pooled"]
        assert len(pooled) == 2 and all(_alive(pid) for pid in pooled)
        host.send_signal(signal.SIGKILL)
        host.wait(5)
        deadline = time.monotonic() + 2.0
        while any(_alive(pid) for pid in pooled) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not [pid for pid in pooled if _alive(pid)]
    finally:
        for pid in pooled:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if host.poll() is None:
            host.kill()
            host.wait(5)
        if host.stdout is not None:
            host.stdout.close()
