"""The server's stdio, byte for byte: MCP is all that reaches stdout, and the server's life ends
with its stdin (exit 0) or a signal (128 + the signal), every child disposed first. Driven here
by hand, one JSON line at a time, to see exactly what crosses the pipe and how it exits."""

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

import mcp.types as types
import pytest
from harness import SLOW, WAIT, alive, command, marked, model_script, sub_agents, tree, workspace
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.message import SessionMessage

from tether.parent.mcp_server.stdio import decode
from tether.protocol.codec import ErrorResponse, Notification, Response, decode_frame

PROTOCOL = "2025-11-25"


class RawClient:
    """`tether mcp` on pipes; every stdout line it wrote is kept, decoded or not."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.stderr_path = tmp_path / "server-stderr.txt"
        with self.stderr_path.open("w") as err:
            self.proc = subprocess.Popen(
                command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
        self.lines: list[bytes] = []
        self._buf = b""

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, seconds: float = WAIT) -> dict[str, Any] | None:
        """The next message from stdout, or None at its end."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            assert left > 0, "no message from the server in time"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        self.lines.append(line)
        return dict(json.loads(line))

    def until(self, predicate: Any) -> dict[str, Any]:
        while True:
            message = self.read()
            assert message is not None, "stdout ended first"
            if predicate(message):
                return message

    def handshake(self) -> dict[str, Any]:
        self.send(
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        answer = self.until(lambda m: m.get("id") == 1)
        self.send({"method": "notifications/initialized"})
        return answer

    def rest(self) -> list[dict[str, Any]]:
        """Everything else it writes until stdout ends."""
        out = []
        while (message := self.read()) is not None:
            out.append(message)
        return out

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        """Whatever happened, leave no process and no open pipe behind."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def start_slow_call(client: RawClient) -> None:
    client.send(
        {
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "task",
                "arguments": {
                    "subagent_type": "explorer",
                    "description": "slow look",
                    "prompt": f"Look. {SLOW}",
                },
                "_meta": {"progressToken": "p-1"},
            },
        }
    )
    client.until(
        lambda m: (
            m.get("method") == "notifications/progress"
            and "next step (step 1," in m["params"]["message"]
        )
    )


def serve_raw(tmp_path: Path) -> RawClient:
    ws = workspace(tmp_path)
    script = model_script(tmp_path / "model.json")
    return RawClient(tmp_path, "--model", f"scripted:{script}", "--workspace", str(ws))


def test_closing_stdin_mid_run_disposes_of_the_sub_agent_and_exits_0_with_only_mcp_on_stdout(
    tmp_path: Path,
) -> None:
    client = serve_raw(tmp_path)
    try:
        init = client.handshake()
        assert init["result"]["serverInfo"]["name"] == "tether"
        start_slow_call(client)
        children = [p.pid for p in tree(client.proc.pid)[1:]]
        assert sub_agents(client.proc.pid)
        assert client.proc.stdin is not None
        client.proc.stdin.close()
        client.rest()
        assert client.proc.wait(WAIT) == 0
    finally:
        client.kill()
    assert alive(children) == [] and marked(client.proc.pid) == []
    for line in client.lines:  # nothing but JSON-RPC 2.0 messages
        assert json.loads(line)["jsonrpc"] == "2.0", line
    assert "the client closed the connection" in client.stderr()
    assert "stopped; 1 sub-agent run(s), every child disposed" in client.stderr()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_disposes_of_every_child_and_exits_128_plus_it(
    tmp_path: Path, signum: int
) -> None:
    client = serve_raw(tmp_path)
    try:
        client.handshake()
        start_slow_call(client)
        children = [p.pid for p in tree(client.proc.pid)[1:]]
        client.proc.send_signal(signum)
        # The call is never answered; stdout ends when the server is done.
        assert all(m.get("id") != 2 for m in client.rest())
        assert client.proc.wait(WAIT) == 128 + signum
    finally:
        client.kill()
    assert alive(children) == [] and marked(client.proc.pid) == []
    name = signal.Signals(signum).name
    assert f"{name}: stopping; disposing of every child" in client.stderr()


def test_while_serving_stray_output_goes_to_stderr_and_the_wire_keeps_stdout(
    tmp_path: Path,
) -> None:
    code = (
        "import os, sys\n"
        "from tether.parent.mcp_server.stdio import claim_stdio\n"
        "wire = claim_stdio()\n"
        "print('stray print', flush=True)\n"
        "os.write(1, b'stray write\\n')\n"
        "os.system('echo stray command')\n"
        'os.write(wire.write_fd, b\'{"jsonrpc": "2.0"}\\n\')\n'
        "got = os.read(wire.read_fd, 100)\n"
        "os.write(wire.write_fd, got)\n"
        "print(repr(sys.stdin.read()), flush=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=b"from the client\n",
        capture_output=True,
        timeout=WAIT,
        check=True,
    )
    assert proc.stdout == b'{"jsonrpc": "2.0"}\nfrom the client\n'
    assert proc.stderr.splitlines() == [b"stray print", b"stray write", b"stray command", b"''"]


def nested(rid: int | None, depth: int) -> bytes:
    """A `tools/list` request (a notification when `rid` is None) whose params nest `depth`
    levels of arrays."""
    head = b'{"jsonrpc":"2.0",' + (b'"id":%d,' % rid if rid is not None else b"")
    return head + b'"method":"tools/list","params":{"x":' + b"[" * depth + b"]" * depth + b"}}\n"


def test_a_request_the_server_cannot_read_is_answered_and_the_server_serves_on(
    tmp_path: Path,
) -> None:
    client = serve_raw(tmp_path)
    try:
        client.handshake()
        for rid, depth in ((7, 250), (8, 5000)):
            client.send_raw(nested(rid, depth))
            answer = client.until(lambda m: "id" in m)
            assert answer["id"] == rid, answer
            assert answer["error"]["code"] == -32600
            assert "nested deeper than the limit of 128 levels" in answer["error"]["message"]
        # Too deep to tell a notification from a request: answered, with no id to name.
        client.send_raw(nested(None, 5000))
        answer = client.until(lambda m: "id" in m)
        assert (answer["id"], answer["error"]["code"]) == (None, -32600)
        client.send_raw(b"this is not json\n")
        answer = client.until(lambda m: "id" in m)
        assert (answer["id"], answer["error"]["code"]) == (None, -32700)
        client.send_raw(b'{"jsonrpc":"2.0","id":"s-9","method":7}\n')
        answer = client.until(lambda m: "id" in m)
        assert (answer["id"], answer["error"]["code"]) == ("s-9", -32600)
        client.send({"id": 9, "method": "tools/list"})
        listed = client.until(lambda m: "id" in m)
        assert listed["id"] == 9 and "tools" in listed["result"]  # nothing else came first
        assert client.proc.stdin is not None
        client.proc.stdin.close()
        client.rest()
        assert client.proc.wait(WAIT) == 0
    finally:
        client.kill()
    for line in client.lines:
        assert json.loads(line)["jsonrpc"] == "2.0", line


@given(st.binary(max_size=300) | st.from_regex(rb'\{"jsonrpc":"2\.0","id":[0-9]{1,5},.{0,80}'))
def test_reading_a_line_never_raises_and_every_unreadable_request_gets_an_answer(
    line: bytes,
) -> None:
    line = line.replace(b"\n", b" ")
    got = decode(line)
    assert isinstance(got, SessionMessage | types.JSONRPCError | Exception)
    if isinstance(got, Exception):  # left unanswered: only what is no request
        assert isinstance(decode_frame(line), Notification | Response | ErrorResponse)


@given(st.integers(0, 2**31), st.integers(129, 3000))
def test_a_request_too_deep_is_answered_with_its_own_id(rid: int, depth: int) -> None:
    got = decode(nested(rid, depth).rstrip(b"\n"))
    assert isinstance(got, types.JSONRPCError)
    assert (got.id, got.error.code) == (rid, -32600)
    assert isinstance(decode(nested(rid, 120).rstrip(b"\n")), SessionMessage)
