"""What `tether mcp` costs: starting the server until `initialize` is answered, and one `task`
call beside a plain run of the same sub-agent.

`.venv/bin/python -m benchmarks.mcp [--starts 5] [--rounds 7]`:

- start: `python -m tether.parent.cli.main mcp ...` spawned by the MCP SDK's stdio client, from just
  before the spawn to the `initialize` result; beside it, `python -c "import mcp.server.lowlevel"`
  alone (the SDK's import, most of the start) and `tether task-schema` (the interpreter, tether
  and the delegation layer, no SDK);
- plain: `Supervisor.run`, in this process, of an explorer (the built-in role's wire definition)
  whose scripted model answers `complete` at once: spawn, handshake, one turn, result, dispose;
- mcp: the same explorer through a `task` call to a running `tether mcp`, timed by the client
  from sending `tools/call` to the result (the server validates, admits, spawns and runs the
  sub-agent in its own supervisor, records it, answers);

plain and mcp interleaved round by round. Prints medians and minima; overhead = mcp - plain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tether.parent import ScriptedModel, Supervisor
from tether.parent.delegation import builtin_registry

DONE = {"toolCalls": [{"name": "complete", "arguments": {"summary": "found it"}}]}
TASK = {"subagent_type": "explorer", "description": "look", "prompt": "Find it."}


def server(script: Path, ws: Path) -> StdioServerParameters:
    argv = ["-m", "tether.parent.cli", "mcp", "--model", f"scripted:{script}"]
    return StdioServerParameters(command=sys.executable, args=[*argv, "--workspace", str(ws)])


def wall(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - t


async def starts(n: int, script: Path, ws: Path, errlog: TextIO) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {"start": [], "sdk_import": [], "task_schema": []}
    for _ in range(n):
        t = time.perf_counter()
        async with (
            stdio_client(server(script, ws), errlog=errlog) as (r, w),
            ClientSession(r, w) as session,
        ):
            await session.initialize()
            got["start"].append(time.perf_counter() - t)
        got["sdk_import"].append(wall([sys.executable, "-c", "import mcp.server.lowlevel"]))
        got["task_schema"].append(wall([sys.executable, "-m", "tether.parent.cli", "task-schema"]))
    return got


async def calls(n: int, script: Path, ws: Path, errlog: TextIO) -> dict[str, list[float]]:
    explorer = next(d for d in builtin_registry() if d.type == "explorer").to_wire()
    model = ScriptedModel.from_json(json.dumps([DONE]))
    got: dict[str, list[float]] = {"plain": [], "mcp": []}
    async with (
        Supervisor() as sup,
        stdio_client(server(script, ws), errlog=errlog) as (r, w),
        ClientSession(r, w) as session,
    ):
        await session.initialize()
        for _ in range(n):
            t = time.perf_counter()
            result = await sup.run("Find it.", agent=explorer, workspace=ws, model=model)
            got["plain"].append(time.perf_counter() - t)
            assert result.success, result

            t = time.perf_counter()
            answer = await session.call_tool("task", TASK)
            got["mcp"].append(time.perf_counter() - t)
            assert not answer.is_error, answer.content
    return got


def report(name: str, values: list[float]) -> None:
    print(
        f"{name:<12} median {statistics.median(values) * 1000:7.1f} ms   "
        f"min {min(values) * 1000:7.1f} ms   (n={len(values)})"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--starts", type=int, default=5)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        script = Path(tmp) / "model.json"
        script.write_text(json.dumps([DONE]))
        with (Path(tmp) / "server-stderr.txt").open("w") as errlog:
            got = anyio.run(starts, args.starts, script, ws, errlog)
            got |= anyio.run(calls, args.rounds, script, ws, errlog)
    for name, values in got.items():
        report(name, values)
    overhead = [m - p for m, p in zip(got["mcp"], got["plain"], strict=True)]
    print(
        f"overhead     median {statistics.median(overhead) * 1000:7.1f} ms   "
        "(mcp - plain, round by round)"
    )


if __name__ == "__main__":
    main()
