"""An ACP agent for tests, written with the `agent-client-protocol` package.

The prompt's last text block is a JSON list of steps, run in order; each step is an object with
one key. What a step observed is said back as an agent message, so a test reads it in the
run's events and summary:

- `{"say": TEXT}` sends TEXT as two message chunks; `{"think": TEXT}` as a thought;
- `{"tool": {"id", "title", "kind", "input"?}}` starts a tool call;
  `{"update": {"id", "status", "output"?}}` updates it;
- `{"plan": [TEXT, ...]}` sends a plan;
- `{"ask": {"id", "title"?, "kind"?}}` requests permission (allow_once / reject_once) and says
  `permission ID: OPTION`, or says `permission ID: cancelled` and ends the turn `cancelled`;
- `{"write": {"path", "content"}}`, `{"read": {"path", "line"?, "limit"?}}`,
  `{"terminal": COMMAND}` call the client and say what came back;
- `{"wait": SECONDS}` waits, ending the turn `cancelled` if `session/cancel` comes;
  `{"hang": SECONDS}` waits and ignores `session/cancel`; after any other step a cancel that
  has arrived ends the turn `cancelled`;
- `{"crash": CODE}` exits at once with CODE; `{"raw": TEXT}` writes TEXT to stdout as it is;
  `{"post": {"url", "body", "headers", "expand"?}}` POSTs JSON with urllib and says the status
  and body (`$NAME` in the url and header values, and with `"expand": true` in the body too,
  is the agent's environment variable NAME);
- `{"burst": {"count": N, "post": POST}}` sends N copies of a `post` step's request at once
  and says `burst: {STATUS: COUNT, ...}` (JSON);
- `{"flood": {"connections": N, "declare"?: BYTES, "send"?: BYTES, "token"?: bool,
  "wait"?: SECONDS}}` opens N TCP connections to `$ANTHROPIC_BASE_URL`'s address and holds
  them until the agent exits; with `declare`, each sends a `POST /v1/messages` head declaring
  a body of that many bytes (with the agent's token when `token`) and `send` bytes of it,
  and never the rest. Then it waits up to `wait` seconds (default 2) for what each got back
  and says `flood: {"opened", "failed", "answers": {STATUS|closed|open: COUNT}}` (JSON);
- `{"connect": [HOST, PORT]}` opens a TCP connection and says `connect HOST:PORT: ok` or the
  error; `{"unix_socket": true}` makes a UNIX stream socket and says `unix socket: ok` or
  the error; `{"environ": true}` says the agent's whole environment as JSON;
- `{"own_write": {"path", "content"}}` writes a file itself (not through the client) and says
  `own write PATH: ok` or the error;
- `{"sleeper": true}` starts `sleep 300` as a child that inherits the agent's stdout (and
  holds it open after the agent dies);
- `{"ignore_eof": true}` makes the agent ignore the end of its input and SIGTERM from then
  on (it must be killed);
- `{"echo_prompt": true}` says the text of the prompt's blocks before the script;
- `{"usage_claim": N}` claims N tokens used (`usage_update`), which the parent must ignore;
- `{"stop": REASON}` ends the turn with that stop reason (default `end_turn`).

argv: `--mute` reads its input and never answers; `--version N` answers `initialize` with
protocol version N.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import acp
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    UsageUpdate,
)


class ScriptAgent:
    def __init__(self, version: int) -> None:
        self.version = version
        self.conn: Any = None
        self.cancelled = asyncio.Event()
        self.said = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=self.version,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="script-agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self.cwd = cwd
        return NewSessionResponse(session_id="session-1")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def say(self, sid: str, text: str) -> None:
        """One message, in two chunks that share a message id."""
        self.said += 1
        half = len(text) // 2
        for part in (text[:half], text[half:]):
            chunk = AgentMessageChunk(
                session_update="agent_message_chunk",
                content=acp.text_block(part),
                message_id=f"m{self.said}",
            )
            await self.conn.session_update(sid, chunk)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        sid = session_id
        steps = json.loads(prompt[-1].text)
        for step in steps:
            ((op, arg),) = step.items()
            if op == "say":
                await self.say(sid, arg)
            elif op == "think":
                await self.conn.session_update(sid, acp.update_agent_thought_text(arg))
            elif op == "tool":
                await self.conn.session_update(
                    sid,
                    acp.start_tool_call(
                        arg["id"], arg["title"], kind=arg.get("kind"), raw_input=arg.get("input")
                    ),
                )
            elif op == "update":
                content = (
                    [acp.tool_content(acp.text_block(arg["output"]))] if "output" in arg else None
                )
                await self.conn.session_update(
                    sid, acp.update_tool_call(arg["id"], status=arg["status"], content=content)
                )
            elif op == "plan":
                await self.conn.session_update(
                    sid, acp.update_plan([acp.plan_entry(t) for t in arg])
                )
            elif op == "ask":
                options = [
                    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="always", name="Always", kind="allow_always"),
                    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
                ]
                call = acp.update_tool_call(arg["id"], title=arg.get("title"), kind=arg.get("kind"))
                got = await self.conn.request_permission(sid, call, options)
                outcome = got.outcome
                chosen = getattr(outcome, "option_id", None) or outcome.outcome
                await self.say(sid, f"permission {arg['id']}: {chosen}")
                if chosen == "cancelled":  # the client says the turn is being cancelled
                    return PromptResponse(stop_reason="cancelled")
            elif op == "write":
                try:
                    await self.conn.write_text_file(sid, arg["path"], arg["content"])
                    await self.say(sid, f"wrote {arg['path']}")
                except acp.RequestError as exc:
                    await self.say(sid, f"write {arg['path']} refused: {exc}")
            elif op == "read":
                try:
                    got = await self.conn.read_text_file(
                        sid, arg["path"], line=arg.get("line"), limit=arg.get("limit")
                    )
                    await self.say(sid, f"read {arg['path']}: {got.content}")
                except acp.RequestError as exc:
                    await self.say(sid, f"read {arg['path']} refused: {exc}")
            elif op == "terminal":
                try:
                    await self.conn.create_terminal(sid, arg)
                    await self.say(sid, "terminal created")
                except acp.RequestError as exc:
                    await self.say(sid, f"terminal refused: {exc}")
            elif op == "wait":
                try:
                    await asyncio.wait_for(self.cancelled.wait(), arg)
                    return PromptResponse(stop_reason="cancelled")
                except TimeoutError:
                    pass
            elif op == "hang":
                await asyncio.sleep(arg)
            elif op == "crash":
                os._exit(arg)
            elif op == "raw":
                _write_raw(arg.encode())
            elif op == "post":
                await self.say(sid, await asyncio.to_thread(_post, arg))
            elif op == "burst":
                await self.say(sid, "burst: " + await asyncio.to_thread(_burst, arg))
            elif op == "flood":
                await self.say(sid, "flood: " + await asyncio.to_thread(_flood, arg))
            elif op == "connect":
                await self.say(sid, await asyncio.to_thread(_connect, arg[0], arg[1]))
            elif op == "unix_socket":
                await self.say(sid, _unix_socket())
            elif op == "sleeper":
                _start_sleeper()
                await self.say(sid, "sleeper started")
            elif op == "own_write":
                await self.say(sid, f"own write {arg['path']}: {_own_write(arg)}")
            elif op == "environ":
                await self.say(sid, json.dumps(dict(os.environ)))
            elif op == "ignore_eof":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                os.environ["ACP_AGENT_IGNORE_EOF"] = "1"
            elif op == "echo_prompt":
                await self.say(sid, " | ".join(block.text for block in prompt[:-1]))
            elif op == "usage_claim":
                await self.conn.session_update(
                    sid, UsageUpdate(session_update="usage_update", used=arg, size=arg * 2)
                )
            elif op == "stop":
                return PromptResponse(stop_reason=arg)
            if self.cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
        return PromptResponse(stop_reason="end_turn")


def _write_raw(data: bytes) -> None:
    """Write to stdout past the package's framing (asyncio made fd 1 non-blocking)."""
    os.set_blocking(1, True)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]
    finally:
        os.set_blocking(1, False)


def _start_sleeper() -> None:
    subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)


def _own_write(arg: dict[str, Any]) -> str:
    try:
        with open(arg["path"], "w") as f:
            f.write(arg["content"])
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    return "ok"


def _connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=5):
            return f"connect {host}:{port}: ok"
    except OSError as exc:
        return f"connect {host}:{port}: {errno.errorcode.get(exc.errno or 0, str(exc))}"


_HELD: list[socket.socket] = []
"""A flood's connections, held until the agent exits."""


def _flood(arg: dict[str, Any]) -> str:
    url = urllib.parse.urlsplit(os.environ["ANTHROPIC_BASE_URL"])
    address = (url.hostname or "127.0.0.1", url.port or 80)
    declare = arg.get("declare")
    head = b""
    if declare is not None:
        token = os.environ["ANTHROPIC_API_KEY"] if arg.get("token") else "none"
        head = (
            f"POST /v1/messages HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
            f"x-api-key: {token}\r\ncontent-length: {declare}\r\n\r\n"
        ).encode()
    body = b"x" * int(arg.get("send", 0))
    opened: list[socket.socket] = []
    failed = 0
    for _ in range(int(arg["connections"])):
        try:
            sock = socket.create_connection(address, timeout=5)
        except OSError:
            failed += 1
            continue
        opened.append(sock)
        if head:
            try:
                sock.sendall(head + body)
            except OSError:
                pass
    _HELD.extend(opened)
    answers: Counter[str] = Counter()
    deadline = time.monotonic() + float(arg.get("wait", 2))
    for sock in opened:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got = sock.recv(64)
        except TimeoutError:
            answers["open"] += 1
            continue
        except OSError:
            got = b""
        answers[got.split(b" ")[1].decode() if got.startswith(b"HTTP/") else "closed"] += 1
    return json.dumps({"opened": len(opened), "failed": failed, "answers": dict(answers)})


def _burst(arg: dict[str, Any]) -> str:
    count = int(arg["count"])

    def one(_: int) -> str:
        try:
            return _post(arg["post"]).split(":")[0].removeprefix("status ")
        except OSError:
            return "failed"

    with ThreadPoolExecutor(max_workers=count) as pool:
        return json.dumps(dict(Counter(pool.map(one, range(count)))))


def _unix_socket() -> str:
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    except OSError as exc:
        return f"unix socket: {errno.errorcode.get(exc.errno or 0, str(exc))}"
    return "unix socket: ok"


def _body(arg: dict[str, Any]) -> str:
    body = json.dumps(arg["body"])
    return os.path.expandvars(body) if arg.get("expand") else body


def _post(arg: dict[str, Any]) -> str:
    headers = {k: os.path.expandvars(v) for k, v in arg.get("headers", {}).items()}
    request = urllib.request.Request(
        os.path.expandvars(arg["url"]),
        data=_body(arg).encode(),
        headers={"content-type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return f"status {response.status}: {response.read().decode()}"
    except urllib.error.HTTPError as exc:
        return f"status {exc.code}: {exc.read().decode()}"


def main() -> None:
    args = sys.argv[1:]
    if "--mute" in args:
        while sys.stdin.buffer.readline():
            pass
        return
    version = (
        int(args[args.index("--version") + 1]) if "--version" in args else acp.PROTOCOL_VERSION
    )
    asyncio.run(acp.run_agent(ScriptAgent(version)))
    if os.environ.get("ACP_AGENT_IGNORE_EOF"):
        while True:  # an agent that outlives the end of its input (and SIGTERM)
            signal.pause()


if __name__ == "__main__":
    main()
