"""No key and no capability token ever reaches a trace: canary keys planted in the parent's
environment, in a model provider's headers and in a foreign agent's capability token — and
echoed back by the model, the child and the agent into every part of the conversation — are in
no byte of any trace file (as they are, or JSON-escaped)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec
import pytest
from model_server import ModelServer, Reply

from tether.parent.models.openai import OpenAIModel
from tether.parent.process.config import ChildConfig
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.run.events import ChildEvent, Event
from tether.parent.run.spec import NamedModel
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import ChatMessage, ModelCompleteParams, ModelCompleteResult, Usage

pytestmark = pytest.mark.anyio

ENV_CANARY = "sk-canary-env-5d1e2f3a4b"
TOKEN_CANARY = "tok-canary-service-9c8b7a6d"
HEADER_CANARY = "sk-canary-header-0a1b2c3d4e"
ACP_AGENT = Path(__file__).resolve().parents[1] / "children" / "acp_agent.py"
QUICK = DisposePolicy(shutdown=0.5, eof=0.5, term=0.5, kill=2.0)


def openai_turn(content: str, calls: list[dict[str, object]]) -> object:
    return {
        "id": "chatcmpl-canary",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                        }
                        for i, c in enumerate(calls)
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5},
    }


def assert_no_canary(directory: Path, *canaries: str) -> int:
    """Grep every byte of every file under `directory`; the number of files read."""
    files = [p for p in directory.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        for canary in canaries:
            for form in (canary.encode(), msgspec.json.encode(canary)[1:-1]):
                assert form not in data, f"{canary} is in {path}"
    return len(files)


async def test_keys_in_the_environment_and_the_provider_s_headers_never_reach_a_trace(
    server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_CANARY)
    monkeypatch.setenv("BILLING_SERVICE_TOKEN", TOKEN_CANARY)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text(f"leaked: {TOKEN_CANARY}\n")
    everything = f"{ENV_CANARY} {TOKEN_CANARY}"
    # The model repeats every key it could know, in its text and in tool arguments; a file
    # holds one too.
    server.script(
        Reply(
            openai_turn(
                f"here: {everything}",
                [
                    {"name": "grep", "args": {"pattern": TOKEN_CANARY}},
                    {"name": "read_file", "args": {"path": "notes.txt"}},
                ],
            )
        ),
        Reply(
            openai_turn(
                "done",
                [
                    {"name": "complete", "args": {"summary": f"keys: {everything}", "paths": []}},
                ],
            )
        ),
    )
    # Two providers: one built from the environment's key, one given its key directly.
    from_env = f"openai:test-model@{server.url}/v1"
    direct = OpenAIModel("test-model", base_url=f"{server.url}/v1", api_key=HEADER_CANARY)
    traces = tmp_path / "traces"
    async with Supervisor(trace=traces) as sup:
        first = await sup.run(
            "Find the keys.",
            agent="explorer",
            workspace=workspace,
            model=from_env,
            limits=Limits(wall="30s"),
        )
        everything += f" {HEADER_CANARY}"  # the second run's model has this key too
        server.script(
            Reply(
                openai_turn(
                    f"again: {everything}",
                    [
                        {"name": "complete", "args": {"summary": everything, "paths": []}},
                    ],
                )
            ),
        )
        second = await sup.run(
            "Find the keys.",
            agent="explorer",
            workspace=workspace,
            model=NamedModel("openai:direct", direct),
            limits=Limits(wall="30s"),
        )
    assert first.success and second.success, (first, second)
    # The keys really were in play: the parent sent them, the model and the child echoed them.
    sent = {r.headers["authorization"] for r in server.received}
    assert sent == {f"Bearer {ENV_CANARY}", f"Bearer {HEADER_CANARY}"}
    assert TOKEN_CANARY in json.dumps([r.body for r in server.received])
    assert assert_no_canary(traces, ENV_CANARY, TOKEN_CANARY, HEADER_CANARY) == 2
    assert b"[redacted]" in (traces / f"{first.run_id}.jsonl").read_bytes()


class Echo:
    """A model that answers with the last user message it was sent."""

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        last = next(m.content for m in reversed(params.messages) if m.role == "user")
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content=f"you said: {last}"),
            usage=Usage(input_tokens=4, output_tokens=4),
        )


async def test_a_foreign_agent_s_capability_token_never_reaches_its_trace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    post = {
        "post": {
            "url": "$ANTHROPIC_BASE_URL/v1/messages",
            "headers": {"x-api-key": "$ANTHROPIC_API_KEY"},
            "body": {
                "model": "any",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "my token is $ANTHROPIC_API_KEY"}],
            },
            "expand": True,
        }
    }
    events: list[Event] = []
    traces = tmp_path / "traces"
    async with Supervisor(ChildConfig(isolation="process", dispose=QUICK), trace=traces) as sup:
        result = await sup.run(
            json.dumps([{"environ": True}, post, {"say": "done"}]),
            workspace=workspace,
            model=Echo(),
            provider=f"acp:{sys.executable} {ACP_AGENT}",
            on_event=events.append,
            limits=Limits(wall="60s"),
        )
    assert result.success, result
    said = [e.data.get("text", "") for e in events if isinstance(e, ChildEvent)]
    environ = json.loads(next(t for t in said if t.startswith("{")))
    token = environ["ANTHROPIC_API_KEY"]
    assert len(token) > 20 and any(f"you said: my token is {token}" in t for t in said)
    assert assert_no_canary(traces, token) == 1
    assert b"my token is [redacted]" in (traces / f"{result.run_id}.jsonl").read_bytes()
