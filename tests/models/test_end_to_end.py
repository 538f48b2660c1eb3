"""A real run through the real `Supervisor` and the real child, with the model served by a
local OpenAI-compatible server — and proof that the API key stays in the parent."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import anyio
import msgspec
import psutil
import pytest
from model_server import ModelServer, Reply

from tether.parent.process.limits import Limits
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import Usage

pytestmark = pytest.mark.anyio

CANARY = "sk-canary-7f3a9c1e-never-in-the-child"
TAP = Path(__file__).with_name("stdin_tap.py")


def complete_turn(summary: str) -> object:
    return {
        "id": "chatcmpl-e2e",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "All done.",
                    "tool_calls": [
                        {
                            "id": "call_done",
                            "type": "function",
                            "function": {
                                "name": "complete",
                                "arguments": json.dumps({"summary": summary, "paths": []}),
                            },
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 123, "completion_tokens": 17},
    }


def environ_of(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()


async def test_a_run_completes_through_an_openai_compatible_server_and_the_key_stays_in_the_parent(
    server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    gate = threading.Event()
    server.script(Reply(complete_turn("summarised by the local model"), gate=gate))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # In the workspace: the tap runs in the child's sandbox, which writes nowhere else.
    record = workspace / "parent-to-child.bin"
    command = [
        sys.executable,
        "-I",
        str(TAP),
        str(record),
        sys.executable,
        "-I",
        "-m",
        "tether.child",
    ]

    async with Supervisor() as sup:
        handle = await sup.start(
            "Summarise the workspace.",
            workspace=workspace,
            model=f"openai:test-model@{server.url}/v1",
            command=command,
            limits=Limits(wall="20s"),
        )
        # The child is now waiting on its first model turn, which the server holds at the gate.
        deadline = time.monotonic() + 10
        while not server.received and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        assert server.received, "the model request never reached the server"
        assert handle.pid is not None
        relay = psutil.Process(handle.pid)
        tree = [relay, *relay.children(recursive=True)]
        assert any("tether.child" in " ".join(p.cmdline()) for p in tree)
        for proc in tree:
            env = environ_of(proc.pid)
            assert CANARY.encode() not in env
            assert b"OPENAI_API_KEY" not in env
        gate.set()
        result = await handle.result()

    assert result.success, result
    assert result.status == "completed"
    assert result.summary == "summarised by the local model"
    assert result.usage == Usage(input_tokens=123, output_tokens=17)

    [req] = server.received
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {CANARY}"
    assert req.body["model"] == "test-model"
    assert "complete" in {t["function"]["name"] for t in req.body["tools"]}
    assert req.body["messages"][-1]["role"] == "user"
    assert "Summarise the workspace." in req.body["messages"][-1]["content"]

    sent = record.read_bytes()
    assert b'"method":"agent/run"' in sent.replace(b" ", b"")
    assert b"summarised by the local model" in sent  # the tap saw the model's answer go by
    assert CANARY.encode() not in sent
    assert b"OPENAI_API_KEY" not in sent


async def test_a_rejected_key_fails_the_run_with_the_api_message_and_without_the_key(
    server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    server.script(
        Reply(
            status=401,
            body={"error": {"message": f"Incorrect API key provided: {CANARY}", "type": "auth"}},
        )
    )
    async with Supervisor() as sup:
        result = await sup.run(
            "Summarise the workspace.",
            workspace=tmp_path,
            model=f"openai:test-model@{server.url}/v1",
            limits=Limits(wall="20s"),
        )
    assert not result.success
    assert result.status == "error"
    assert "401" in result.message and "Incorrect API key provided" in result.message
    assert CANARY.encode() not in msgspec.json.encode(result)
    assert len(server.received) == 1
