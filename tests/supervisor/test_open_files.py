"""The supervisor raises its own RLIMIT_NOFILE soft limit to the hard limit when it starts (each
live child holds several of its descriptors), and every child still starts with the soft limit
the supervisor was given."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

HOST = """
import anyio, json, resource, sys
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import ChatMessage, ModelCompleteResult, ToolCall, Usage

class Echo:
    # Asks the child to run `ulimit -Sn`, then completes with what it printed.
    async def complete(self, params):
        tool = [m.content for m in params.messages if m.role == "tool"]
        if tool:
            call = ToolCall(id="2", name="complete", arguments={"summary": tool[-1], "paths": []})
        else:
            call = ToolCall(id="1", name="bash", arguments={"command": "ulimit -Sn"})
        message = ChatMessage(role="assistant", content="", tool_calls=[call])
        return ModelCompleteResult(message=message, usage=Usage(1, 1))

async def main():
    got = {"before": resource.getrlimit(resource.RLIMIT_NOFILE)}
    async with Supervisor() as sup:
        got["during"] = resource.getrlimit(resource.RLIMIT_NOFILE)
        for spawner in ("exec", "zygote"):
            result = await sup.run(
                "x", agent="tester", workspace=sys.argv[1], model=Echo(),
                config=ChildConfig(spawner=spawner),
            )
            got[spawner] = result.summary if result.success else result.message
    print(json.dumps(got))

anyio.run(main)
"""


@pytest.mark.timeout(60)
def test_the_supervisor_raises_its_descriptor_limit_and_children_keep_the_inherited_one(
    tmp_path: Path,
) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 256 or hard == resource.RLIM_INFINITY:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}")
    low = 256
    out = subprocess.run(
        [sys.executable, "-c", HOST, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=50,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard)),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == [low, hard]
    assert got["during"] == [hard, hard]
    # Each child ran `ulimit -Sn` with its bash tool and completed with what it printed.
    assert str(low) in got["exec"], got
    assert str(low) in got["zygote"], got
