"""Driving `tether mcp` as a real subprocess with the MCP SDK's own stdio client, scripting its
sub-agents' models, and watching its process tree.

`serve(tmp_path, *args)` starts `python -m tether.parent.cli.main mcp ARGS` through the SDK's
`stdio_client`, initializes a `ClientSession`, and hands back a `Server`: the session, the
`initialize` result, the server's pid and where its stderr goes. `Progress` records a call's
progress notifications and waits for one that matches. `tree(pid)` and `marked(pid)` find the
server's processes, `gone(pids)` waits for them to end.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import psutil
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tether.parent.process.zygote import standby_pids

WAIT = 30.0
"""Generous: the machine may be busy."""
SLOW = "PLEASE-TAKE-YOUR-TIME"
CRASH = "PLEASE-CRASH-NOW"
ENV_DUMP = "PLEASE-DUMP-YOUR-ENVIRONMENT"
ASK = "PLEASE-ASK-FIRST"


def turn(
    *calls: dict[str, Any], text: str = "", delay: float = 0.0, tokens: int = 0
) -> dict[str, Any]:
    out: dict[str, Any] = {"text": text, "toolCalls": list(calls), "delay": delay}
    if tokens:
        out["usage"] = {"inputTokens": tokens, "outputTokens": tokens // 10}
    return out


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def complete(summary: str, *paths: str) -> dict[str, Any]:
    return call("complete", summary=summary, paths=list(paths))


def model_script(path: Path) -> Path:
    """The sub-agents' scripted model: a prompt holding SLOW waits a minute for its first turn;
    CRASH (build mode) shoots its own child runtime with SIGSEGV; ENV_DUMP (build mode) writes
    its environment to env.txt; ASK (continuable) asks its orchestrator which file, then
    completes with the answer's file; any other lists the workspace and completes."""
    scripts = [
        {"when": SLOW, "turns": [turn(call("list_dir", path="."), text="thinking", delay=60)]},
        {
            "when": CRASH,
            "turns": [turn(call("bash", command="kill -SEGV $PPID; sleep 5"), tokens=50)],
        },
        {
            "when": ENV_DUMP,
            "turns": [
                turn(call("bash", command="env > env.txt"), tokens=50),
                turn(complete("environment written", "env.txt"), tokens=60),
            ],
        },
        {
            "when": ASK,
            "turns": [
                turn(call("ask_orchestrator", question="Which file should I read?"), tokens=40),
                turn(complete("read the file you named", "notes.md"), tokens=60),
            ],
        },
        {
            "turns": [
                turn(call("list_dir", path="."), text="looking", delay=0.2, tokens=100),
                turn(complete("found the notes", "notes.md"), tokens=120),
            ]
        },
    ]
    path.write_text(json.dumps({"scripts": scripts}))
    return path


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "notes.md").write_text("TODO: refuse negative stock\n")
    return ws


def task_args(prompt: str = "Find the TODO notes.", **more: Any) -> dict[str, Any]:
    return {
        "subagent_type": "explorer",
        "description": "find the TODO notes",
        "prompt": prompt,
        **more,
    }


@dataclass
class Server:
    session: ClientSession
    init: types.InitializeResult
    pid: int
    stderr: Path

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tether.parent.cli", "mcp", *args]


@asynccontextmanager
async def serve(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[Server]:
    """`tether mcp ARGS` under the SDK's stdio client (see the module docstring)."""
    argv = command(*args)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env or {})
    stderr = tmp_path / "server-stderr.txt"
    with stderr.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(WAIT):
                init = await session.initialize()
            yield Server(session, init, server_pid(), stderr)


def server_pid() -> int:
    for child in psutil.Process().children():
        try:
            line = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "tether.parent.cli" in line and "mcp" in line:
            return child.pid
    raise AssertionError("no tether mcp process among this test's children")


@dataclass
class Progress:
    """A call's progress notifications, in arrival order."""

    seen: list[tuple[float, float | None, str]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message or ""))
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def messages(self) -> list[str]:
        return [m for _, _, m in self.seen]

    async def wait_for(self, pattern: str, seconds: float = WAIT) -> str:
        with anyio.fail_after(seconds):
            while True:
                for message in self.messages:
                    if re.search(pattern, message):
                        return message
                await self._changed.wait()


def tree(pid: int) -> list[psutil.Process]:
    """The process and its descendants."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def sub_agents(pid: int) -> list[int]:
    """The server's sub-agent children (the child runtime, however it was started): not the
    supervisor's zygote, a direct child of the server whose children share its command line,
    nor the zygote's standby (its child still in its session, not yet handed a run)."""
    found = []
    for p in tree(pid)[1:]:
        try:
            cmdline = " ".join(p.cmdline())
            if "tether.child" not in cmdline:
                continue
            if "tether.child.zygote" in cmdline and p.ppid() == pid:
                continue
            if p.pid in standby_pids(p.ppid()):
                continue
            found.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def marked(server: int) -> list[int]:
    """Processes carrying the server's supervisor's tree marker, escaped or not."""
    needle = f"TETHER_TREE={server}-".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def alive(pids: Iterable[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


async def gone(pids: Iterable[int], seconds: float = WAIT) -> list[int]:
    """Wait until none of `pids` is alive; what is still alive at the deadline."""
    pids = list(pids)
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return alive(pids)


def ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
