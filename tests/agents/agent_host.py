"""A parent process with continuable agents, driven by a test over stdin and stdout (JSON lines).

    python agent_host.py STATE_DIR WORKSPACE [STALE_AFTER HEARTBEAT_EVERY]

Each command (a JSON object a line on stdin) is answered by one line on stdout:

    {"op": "spawn", "prompt": ..., "keepAlive": 60}   {"id": ..., "pid": ..., "result": {...}}
    {"op": "send", "id": ..., "message": ..., "wait": 0}
                                                      {"result": {...}} or {"error": ..., ...}

Each answer also says when the call began and ended (`began`, `ended`: `time.time()`) and, for
a send, the pid of the child that served it (`pid`, when it is still warm here).

The model (`agent_models.Commanded`) also writes a line before it answers each turn:
`{"event": "turn", "runId": ..., "messages": N}`. EOF on stdin ends the host; its supervisor
disposes of every child on the way out.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import msgspec

sys.path.insert(0, str(Path(__file__).parent))

from agent_models import Commanded

from tether.parent import Supervisor
from tether.parent.agents.service import AgentError
from tether.parent.agents.sessions import LeasePolicy


def say(obj: object) -> None:
    sys.stdout.write(msgspec.json.encode(obj).decode() + "\n")
    sys.stdout.flush()


async def main(state: str, workspace: str, lease: LeasePolicy | None) -> None:
    model = Commanded(log=sys.stdout)
    async with Supervisor(state_dir=state, lease=lease) as sup:
        lines = anyio.wrap_file(sys.stdin)
        async for line in lines:
            cmd = json.loads(line)
            began = time.time()
            if cmd["op"] == "spawn":
                agent = await sup.spawn_agent(
                    cmd["prompt"],
                    agent="explorer",
                    workspace=workspace,
                    model=model,
                    keep_alive=cmd.get("keepAlive", 60),
                )
                result = await agent.result()
                say({"id": agent.id, "pid": agent.run.pid, "result": result, "began": began})
            elif cmd["op"] == "send":
                try:
                    result = await sup.send_message(
                        cmd["id"], cmd["message"], model=model, wait=cmd.get("wait", 0)
                    )
                except AgentError as exc:
                    say(
                        {
                            "error": type(exc).__name__,
                            "message": exc.message,
                            "began": began,
                            "ended": time.time(),
                        }
                    )
                else:
                    live = sup.agents.live_handle(cmd["id"])
                    pid = live.pid if live is not None else None
                    say({"result": result, "began": began, "ended": time.time(), "pid": pid})


if __name__ == "__main__":
    policy = None
    if len(sys.argv) > 3:
        policy = LeasePolicy(stale_after=float(sys.argv[3]), heartbeat_every=float(sys.argv[4]))
    anyio.run(main, sys.argv[1], sys.argv[2], policy)
