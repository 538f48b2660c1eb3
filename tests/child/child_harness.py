"""A test-side parent: spawns a real `python -I -m tether.child` and speaks raw lines to it.

Every read has a deadline, so a child that hangs fails its test in seconds rather than at the
suite-wide timeout; every child is killed and reaped when the `with` block ends.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

CHILD_ARGV = [sys.executable, "-I", "-m", "tether.child"]
DEADLINE = 5.0

Message = dict[str, Any]


class ChildProcess:
    def __init__(self, argv: list[str] | None = None, *, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            argv or CHILD_ARGV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self._out = self.proc.stdout.fileno()
        self._buf = bytearray()
        self._stderr = bytearray()
        # Drain stderr all along, so a chatty child never blocks on a full pipe.
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()
        self._next_id = 1000
        self.notifications: list[Message] = []
        """Notifications seen while waiting for something else, in arrival order."""

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE)
        self._drain.join(timeout=DEADLINE)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while chunk := os.read(fd, 65536):
            self._stderr += chunk

    @property
    def stderr(self) -> str:
        return self._stderr.decode(errors="replace")

    def wait_exit(self, timeout: float = DEADLINE) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the child did not exit within {timeout}s") from None

    # --- writing ----------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Message) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def request(self, method: str, params: Any = None, *, id: Any = None) -> Any:
        """Send a request and return its id (a fresh one unless given)."""
        if id is None:
            self._next_id += 1
            id = self._next_id
        msg: Message = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return id

    def notify(self, method: str, params: Any = None) -> None:
        msg: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def reply(self, id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": id, "result": result})

    def reply_error(self, id: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})

    # --- reading ----------------------------------------------------------------------------

    def read_line(self, timeout: float = DEADLINE) -> bytes:
        """The next raw line from the child's stdout (without its newline)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no message from the child within {timeout}s; stderr:\n{self.stderr[-2000:]}"
                )
            ready, _, _ = select.select([self._out], [], [], left)
            if ready:
                chunk = os.read(self._out, 1 << 20)
                if not chunk:
                    raise AssertionError(
                        f"the child's stdout ended; stderr:\n{self.stderr[-2000:]}"
                    )
                self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line

    def read(self, timeout: float = DEADLINE) -> Message:
        msg: Message = json.loads(self.read_line(timeout))
        assert msg.get("jsonrpc") == "2.0", msg
        return msg

    def read_until(self, match: Callable[[Message], bool], timeout: float = DEADLINE) -> Message:
        """Read until `match` holds; notifications seen on the way go to `notifications`."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.read(max(0.01, deadline - time.monotonic()))
            if match(msg):
                return msg
            if "id" not in msg:
                self.notifications.append(msg)
            else:
                raise AssertionError(f"unexpected message from the child: {msg}")

    def response(self, id: Any, timeout: float = DEADLINE) -> Message:
        return self.read_until(lambda m: m.get("id") == id and "method" not in m, timeout)

    def expect_request(self, method: str, timeout: float = DEADLINE) -> Message:
        return self.read_until(lambda m: m.get("method") == method and "id" in m, timeout)

    def call(self, method: str, params: Any = None) -> Message:
        """Request and wait for its response (the whole response object)."""
        return self.response(self.request(method, params))

    def initialize(self, **params: Any) -> Message:
        body = {"protocolVersion": 1, "clientInfo": {"name": "tests", "version": "0"}, **params}
        response = self.call("initialize", body)
        assert "result" in response, response
        return response

    def events(self, run_id: str) -> list[Message]:
        return [
            n["params"]
            for n in self.notifications
            if n["method"] == "agent/event" and n["params"]["runId"] == run_id
        ]


def run_params(run_id: str, workspace: Path, **agent: Any) -> dict[str, Any]:
    return {
        "runId": run_id,
        "prompt": "Write the report.",
        "description": "report writer",
        "workspace": str(workspace),
        "agent": {
            "type": "general",
            "model": "scripted:test",
            "instructions": "Be brief.",
            **agent,
        },
    }


def assistant(text: str = "", *calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """A `ModelCompleteResult` carrying assistant text and tool calls (id, name, arguments)."""
    return {
        "message": {
            "role": "assistant",
            "content": text,
            "toolCalls": [{"id": i, "name": n, "arguments": a} for i, n, a in calls],
        },
        "usage": {"inputTokens": 10, "outputTokens": 5},
        "stopReason": "tool_use" if calls else "end_turn",
    }
