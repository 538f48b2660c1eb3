"""The few JSON-RPC moves the misbehaving test children share: stdlib only, no tether.

Children run as `python -I script.py`; `-I` keeps the script's folder off `sys.path`, so each
child puts it back before `import _wire`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, NoReturn

Message = dict[str, Any]

_stdin = sys.stdin.buffer


def write_raw(data: bytes, fd: int = 1) -> None:
    """Write every byte to `fd` (stdout by default), bypassing Python's buffers."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def send(msg: Message) -> None:
    write_raw((json.dumps(msg, separators=(",", ":")) + "\n").encode())


def log(text: str) -> None:
    """A line on stderr, unbuffered (it must be there even if the process dies right after)."""
    write_raw((text + "\n").encode(), fd=2)


def recv() -> Message | None:
    """The next message from the parent, or `None` at EOF."""
    line = _stdin.readline()
    if not line:
        return None
    msg: Message = json.loads(line)
    return msg


def reply(rid: Any, result: Any) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def request(rid: int, method: str, params: Any) -> None:
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def notify(method: str, params: Any) -> None:
    send({"jsonrpc": "2.0", "method": method, "params": params})


def event(run_id: str, seq: int, kind: str, data: dict[str, Any] | None = None) -> None:
    notify("agent/event", {"runId": run_id, "seq": seq, "kind": kind, "data": data or {}})


def leave() -> NoReturn:
    """Exit 0 at once, skipping interpreter teardown: a busy machine must not make a child
    that leaves on its lifeline look like one that needed the next rung."""
    os._exit(0)


def handshake() -> None:
    """Answer `initialize` (exit 0 if the parent hangs up first)."""
    msg = recv()
    if msg is None:
        leave()
    assert msg.get("method") == "initialize", msg
    reply(
        msg["id"],
        {
            "protocolVersion": 1,
            "serverInfo": {"name": "x", "version": "0"},
            "pid": os.getpid(),
            "capabilities": {},
            "maxMessageBytes": 33554432,
        },
    )


def wait_run() -> Message:
    """Handshake, then return the `agent/run` request (exit 0 on EOF before it arrives)."""
    handshake()
    while True:
        msg = recv()
        if msg is None:
            leave()
        if msg.get("method") == "agent/run":
            return msg


def run_result(status: str = "completed", **fields: Any) -> Message:
    result: Message = {"success": status == "completed", "status": status}
    result.update(fields)
    return result


def serve_until_exit() -> None:
    """Behave during dispose: answer `shutdown`, exit 0 on `exit` or EOF."""
    while True:
        msg = recv()
        if msg is None or msg.get("method") == "exit":
            leave()
        if msg.get("method") == "shutdown":
            reply(msg["id"], None)
