"""Parent processes for the tests: `agent_host.py` driven over its stdin and stdout, and the
`hosts` fixture that always kills them."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

HOST = Path(__file__).parent / "agent_host.py"
DEADLINE = 60.0


class Host:
    """One `agent_host.py` parent process."""

    def __init__(
        self, state: Path, workspace: Path, stderr: Path, lease: tuple[float, float] | None = None
    ) -> None:
        self.stderr_path = stderr
        extra = [str(x) for x in lease] if lease is not None else []
        with stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(HOST), str(state), str(workspace), *extra],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._buf = b""

    def ask(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        self.proc.stdin.flush()

    def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"host {self.proc.pid} said nothing: {self.stderr()}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    pytest.fail(f"host {self.proc.pid} exited: {self.stderr()}")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\n", 1)
        value = json.loads(raw)
        assert isinstance(value, dict)
        return value

    def answer(self) -> dict[str, Any]:
        """The next line that is not a model turn event."""
        while (got := self.line()).get("event") == "turn":
            pass
        return got

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def finish(self) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(timeout=DEADLINE)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE)


class Hosts:
    """Starts hosts on one state directory; `close()` kills whatever is left of them."""

    def __init__(self, tmp: Path, state: Path, workspace: Path) -> None:
        self._tmp, self._state, self._workspace = tmp, state, workspace
        self.started: list[Host] = []

    def start(self, lease: tuple[float, float] | None = None) -> Host:
        """A host; `lease`: its `(stale_after, heartbeat_every)`."""
        stderr = self._tmp / f"host-{len(self.started)}.stderr"
        host = Host(self._state, self._workspace, stderr, lease)
        self.started.append(host)
        return host

    def close(self) -> None:
        for host in self.started:
            host.kill()
            for stream in (host.proc.stdin, host.proc.stdout):
                if stream is not None and not stream.closed:
                    stream.close()


def wait_dead(pid: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.02)
    pytest.fail(f"process {pid} outlived its parent")
