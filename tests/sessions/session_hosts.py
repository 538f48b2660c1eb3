"""`Host`: one store-using process (`store_host.py`) as the tests drive it."""

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

import pytest

HOST = Path(__file__).parent / "store_host.py"
DEADLINE = 30.0
"""For a host to say what a test waits for (a loaded 2-core machine starts Python slowly)."""


class Host:
    """One `store_host.py` process: lines from its stdout, a line or EOF to its stdin."""

    def __init__(self, args: list[str], stderr: Path) -> None:
        self.stderr_path = stderr
        with stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(HOST), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._buf = b""
        self.lines: list[str] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def line(self, seconds: float = DEADLINE) -> str:
        """The next line, or fail the test naming what the host wrote to stderr."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"host {self.pid} said nothing in {seconds} s: {self.stderr()}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    pytest.fail(f"host {self.pid} exited ({self.proc.wait()}): {self.stderr()}")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\n", 1)
        text = raw.decode()
        self.lines.append(text)
        return text

    def json(self, seconds: float = DEADLINE) -> dict[str, Any]:
        value = json.loads(self.line(seconds))
        assert isinstance(value, dict)
        return value

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE)

    def rest(self) -> list[str]:
        """Every complete line still in the pipe (after the host died)."""
        assert self.proc.stdout is not None
        tail = self.proc.stdout.read()
        lines = (self._buf + tail).split(b"\n")
        self._buf = b""
        return [x.decode() for x in lines[:-1]]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def finish(self, seconds: float = DEADLINE) -> int:
        self.close_stdin()
        return self.proc.wait(timeout=seconds)
