"""A small protocol v1 child (stdlib only) that can be told to break one rule at a time.

    python broken_child.py [BREAKAGE ...]

With no argument it follows the protocol; each BREAKAGE named breaks one rule, so the
conformance kit must fail exactly the checks about that rule:

    answers-unknown-methods  an unknown method gets a result instead of METHOD_NOT_FOUND
    serves-before-initialize requests before initialize are served, not refused
    cancel-completes         agent/cancel makes the run answer "completed", not "aborted"
    repeats-seq              every agent/event has seq 0
    prints-to-stdout         a stray line of text on stdout at start-up
    ignores-eof              stdin EOF does not end the process
    no-byte-cap              announces a cap but reads lines of any length
    message-forgets          a follow-up (agent/message) starts from an empty transcript
    message-accepted-live    agent/message to a run still in progress is answered, not refused
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from typing import Any

BREAKAGES = {
    "answers-unknown-methods",
    "serves-before-initialize",
    "cancel-completes",
    "repeats-seq",
    "prints-to-stdout",
    "ignores-eof",
    "no-byte-cap",
    "message-forgets",
    "message-accepted-live",
}
BROKEN = set(sys.argv[1:])
assert BROKEN <= BREAKAGES, f"unknown breakage: {BROKEN - BREAKAGES}"

CAP = 64 * 1024
IN = sys.stdin.fileno()
OUT = sys.stdout.fileno()

initialized = False
shutting_down = False
next_id = 0
runs: dict[str, dict[str, Any]] = {}  # runId -> {"rid": request id, "seq": int, "ask": our id}
kept: dict[str, dict[str, Any]] = {}  # finished continuable runs, for agent/message
asks: dict[int, str] = {}  # our model/complete id -> runId


def send(msg: dict[str, Any]) -> None:
    data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[os.write(OUT, data) :]


def answer(rid: Any, result: Any) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def error(rid: Any, code: int, message: str, data: Any = None) -> None:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    send({"jsonrpc": "2.0", "id": rid, "error": err})


def event(run_id: str, kind: str, data: dict[str, Any]) -> None:
    run = runs[run_id]
    seq = 0 if "repeats-seq" in BROKEN else run["seq"]
    run["seq"] += 1
    params = {"runId": run_id, "seq": seq, "kind": kind, "data": data}
    send({"jsonrpc": "2.0", "method": "agent/event", "params": params})


def run_result(run_id: str, status: str, summary: str = "", message: str = "") -> dict[str, Any]:
    ok = status == "completed"
    return {
        "success": ok,
        "status": status,
        "summary": summary,
        "message": message,
        "runId": run_id,
        "failure": None if ok else {"kind": "cancelled" if status == "aborted" else "agent_error"},
    }


def finish(run_id: str, result: dict[str, Any]) -> None:
    run = runs.pop(run_id)
    asks.pop(run["ask"], None)
    if run["continuable"]:
        kept[run_id] = run
    answer(run["rid"], result)


def start_run(rid: Any, params: dict[str, Any]) -> None:
    run_id = params["runId"]
    runs[run_id] = {
        "rid": rid,
        "seq": 0,
        "ask": None,
        "ws": params.get("workspace", "."),
        "continuable": params.get("continuable") is True,
        "messages": [{"role": "user", "content": params["prompt"]}],
    }
    event(run_id, "started", {})
    ask_model(run_id)


def ask_model(run_id: str) -> None:
    global next_id
    event(run_id, "step", {"iteration": 1})
    next_id += 1
    runs[run_id]["ask"] = next_id
    asks[next_id] = run_id
    complete = {"name": "complete", "inputSchema": {"type": "object"}}
    ask = {"runId": run_id, "messages": runs[run_id]["messages"], "tools": [complete]}
    send({"jsonrpc": "2.0", "id": next_id, "method": "model/complete", "params": ask})


def continue_run(rid: Any, params: dict[str, Any]) -> None:
    run_id = params.get("runId")
    if run_id in runs:
        if "message-accepted-live" in BROKEN:
            answer(rid, run_result(str(run_id), "completed", "taken while busy"))
        else:
            error(rid, -32004, f"run {run_id} is still running")
        return
    run = kept.pop(str(run_id), None)
    if run is None:
        error(rid, -32003, f"unknown run: {run_id} is not a finished continuable run")
        return
    user = {"role": "user", "content": str(params.get("message", ""))}
    run["messages"] = [user] if "message-forgets" in BROKEN else [*run["messages"], user]
    run["rid"] = rid
    runs[str(run_id)] = run
    ask_model(str(run_id))


def model_answered(msg: dict[str, Any]) -> None:
    run_id = asks.get(msg.get("id"))  # type: ignore[arg-type]
    if run_id is None:
        return
    if "error" in msg:
        finish(run_id, run_result(run_id, "error", message="the model turn failed"))
        return
    reply = msg["result"]["message"]
    calls = reply.get("toolCalls", [])
    messages = runs[run_id]["messages"]
    messages.append({"role": "assistant", "content": reply.get("content", ""), "toolCalls": calls})
    for call in calls:
        event(run_id, "tool_call", {"name": call["name"]})
        messages.append({"role": "tool", "content": "done", "toolCallId": call.get("id")})
        if call["name"] == "complete":
            args = call.get("arguments", {})
            result = run_result(run_id, "completed", args.get("summary", ""), "complete")
            result["artifacts"], result["skipped"] = describe(runs[run_id]["ws"], args)
            finish(run_id, result)
            return
    finish(run_id, run_result(run_id, "error", message="the model did not call complete"))


def describe(workspace: str, args: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    root = os.path.realpath(workspace)
    artifacts, skipped = [], []
    for path in args.get("paths", []):
        real = os.path.realpath(os.path.join(root, path))
        if real != root and not real.startswith(root + os.sep):
            skipped.append({"path": path, "reason": "outside the workspace"})
        elif not os.path.exists(real):
            skipped.append({"path": path, "reason": "does not exist"})
        else:
            kind = "directory" if os.path.isdir(real) else "file"
            artifacts.append({"path": real, "size": os.path.getsize(real), "fsType": kind})
    return artifacts, skipped


def cancel(run_id: str) -> None:
    if run_id in runs:
        status = "completed" if "cancel-completes" in BROKEN else "aborted"
        finish(run_id, run_result(run_id, status, message="the run was cancelled"))


def valid_params(method: str, params: Any) -> bool:
    if not isinstance(params, dict):
        return False
    if method == "initialize":
        info = params.get("clientInfo")
        return (
            isinstance(params.get("protocolVersion"), int)
            and isinstance(info, dict)
            and isinstance(info.get("name"), str)
        )
    if method == "agent/run":
        return isinstance(params.get("runId"), str) and isinstance(params.get("prompt"), str)
    return True


def request(rid: Any, method: str, params: Any) -> None:
    global initialized, shutting_down
    known = {"initialize", "ping", "shutdown", "agent/run", "agent/message"}
    if method not in known:
        if "answers-unknown-methods" in BROKEN:
            answer(rid, {})
        else:
            error(rid, -32601, f"Method not found: {method}")
        return
    if not initialized and method != "initialize" and "serves-before-initialize" not in BROKEN:
        error(rid, -32000, f"not initialized: send initialize before {method}")
        return
    if not valid_params(method, {} if params is None else params):
        error(rid, -32602, f"Invalid params for {method}")
        return
    if method == "initialize":
        if initialized:
            error(rid, -32001, "already initialized")
        elif params["protocolVersion"] != 1:
            error(rid, -32002, "unsupported version", {"supportedVersions": [1]})
        else:
            initialized = True
            info = {"name": "broken-child", "version": "0"}
            answer(
                rid,
                {
                    "protocolVersion": 1,
                    "serverInfo": info,
                    "pid": os.getpid(),
                    "maxMessageBytes": CAP,
                    "capabilities": {"agentRun": True, "agentMessage": True},
                },
            )
    elif method == "ping":
        answer(rid, {})
    elif method == "shutdown":
        shutting_down = True
        for run_id in list(runs):
            cancel(run_id)
        answer(rid, None)
    elif method == "agent/run":
        start_run(rid, params)
    elif method == "agent/message":
        continue_run(rid, params)


def notification(method: str, params: Any) -> None:
    if method == "exit":
        sys.exit(0 if shutting_down else 1)
    if method == "agent/cancel" and initialized and isinstance(params, dict):
        cancel(str(params.get("runId")))


def line(raw: bytes) -> None:
    if not raw.strip():
        return
    try:
        msg = json.loads(raw.decode("utf-8"))
    except ValueError:
        error(None, -32700, "Parse error: not valid JSON")
        return
    rid = msg.get("id") if isinstance(msg, dict) else None
    rid = rid if isinstance(rid, int | str) else None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        error(rid, -32600, "Invalid request")
    elif "method" in msg:
        if not isinstance(msg["method"], str):
            error(rid, -32600, "Invalid request: method must be a string")
        elif "id" in msg:
            request(msg["id"], msg["method"], msg.get("params"))
        else:
            notification(msg["method"], msg.get("params"))
    elif "result" in msg or "error" in msg:
        model_answered(msg)
    else:
        error(rid, -32600, "Invalid request")


def main() -> None:
    if "prints-to-stdout" in BROKEN:
        os.write(OUT, b"broken child says hello on stdout\n")
    buf = bytearray()
    discarding = False
    while True:
        select.select([IN], [], [])
        chunk = os.read(IN, 1 << 20)
        if not chunk:
            if "ignores-eof" in BROKEN:
                time.sleep(30)
            return
        while chunk:
            nl = chunk.find(b"\n")
            part, chunk = (chunk, b"") if nl < 0 else (chunk[:nl], chunk[nl + 1 :])
            if discarding:
                discarding = nl < 0
                continue
            buf += part
            if len(buf) > CAP and "no-byte-cap" not in BROKEN:
                buf.clear()
                error(None, -32006, f"message too large: a line passed the {CAP}-byte cap")
                discarding = nl < 0
                continue
            if nl >= 0:
                raw = bytes(buf.rstrip(b"\r"))
                buf.clear()
                line(raw)


if __name__ == "__main__":
    main()
