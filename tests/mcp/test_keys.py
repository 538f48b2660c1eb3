"""The server brokers every model call with the keys in its own environment; none reaches a
sub-agent: not its environment, not what its commands see."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from harness import WAIT, serve, sub_agents, task_args, tree, workspace
from model_server import ModelServer, Reply

pytestmark = pytest.mark.anyio

CANARY = "sk-canary-3b9d-mcp-server-only"


def tool_turn(name: str, arguments: dict[str, Any], tokens: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{name}",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": f"call_{name}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 9},
    }


def environ_of(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


@pytest.fixture
def model_server() -> Any:
    srv = ModelServer()
    try:
        yield srv
    finally:
        srv.close()


async def test_the_server_uses_its_key_for_the_sub_agents_model_and_no_child_ever_sees_it(
    tmp_path: Path, model_server: ModelServer
) -> None:
    gate = threading.Event()
    model_server.script(
        Reply(tool_turn("bash", {"command": "env > env.txt"}, 300), gate=gate),
        Reply(tool_turn("complete", {"summary": "environment written", "paths": ["env.txt"]}, 310)),
    )
    ws = workspace(tmp_path)
    args = ["--model", f"openai:test-model@{model_server.url}/v1", "--workspace", str(ws)]
    results: list[Any] = []
    async with (
        serve(tmp_path, *args, env={"OPENAI_API_KEY": CANARY}) as server,
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            results.append(await server.session.call_tool("task", task_args(readOnly=False)))

        tg.start_soon(call)
        # The sub-agent waits on its first model turn, which the model server holds.
        with anyio.fail_after(WAIT):
            while not model_server.received:
                await anyio.sleep(0.02)
        children = sub_agents(server.pid)
        assert children, "the sub-agent's child was never seen"
        assert CANARY.encode() in environ_of(server.pid)  # the key is the server's
        for proc in tree(server.pid)[1:]:
            assert CANARY.encode() not in environ_of(proc.pid), proc.cmdline()
            assert b"OPENAI_API_KEY" not in environ_of(proc.pid), proc.cmdline()
        gate.set()

    [result] = results
    assert not result.is_error, result.content[0]
    assert result.structured_content["summary"] == "environment written"
    dumped = (ws / "env.txt").read_text()
    assert "PATH=" in dumped  # the dump is real
    assert CANARY not in dumped and "OPENAI_API_KEY" not in dumped
    assert [r.headers["authorization"] for r in model_server.received] == [f"Bearer {CANARY}"] * 2
    assert all(r.path == "/v1/chat/completions" for r in model_server.received)
