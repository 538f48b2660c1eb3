"""The Anthropic Messages provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import time
from typing import Any

import pytest
from model_server import ModelServer, Reply

from tether.parent.models import resolve_model
from tether.parent.models.anthropic import AnthropicModel
from tether.parent.models.retry import RetryPolicy
from tether.protocol import ErrorCode, RemoteError
from tether.protocol.messages import ChatMessage, ModelCompleteParams, ToolCall, ToolSpec, Usage

pytestmark = pytest.mark.anyio

KEY = "sk-ant-test-canary-0123456789"
FAST = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05)


def message(*blocks: dict[str, Any], stop: str = "end_turn", **usage: int) -> Any:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(blocks),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 6, **usage},
    }


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def model(server: ModelServer, **kw: Any) -> AnthropicModel:
    kw.setdefault("api_key", KEY)
    kw.setdefault("retry", FAST)
    return AnthropicModel("claude-test", base_url=server.url, **kw)


def ask(*messages: ChatMessage, tools: list[ToolSpec] | None = None) -> ModelCompleteParams:
    return ModelCompleteParams(run_id="r1", messages=list(messages), tools=tools or [])


async def test_a_plain_text_turn_sends_the_system_apart_and_the_key_and_version_headers(
    server: ModelServer,
) -> None:
    server.script(Reply(message(text("Hello"), text(" there."))))
    result = await model(server).complete(
        ask(ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="hi"))
    )
    assert result.message == ChatMessage(role="assistant", content="Hello there.")
    assert result.usage == Usage(input_tokens=30, output_tokens=6)
    assert result.stop_reason == "end_turn"
    [req] = server.received
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == KEY
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in req.headers
    assert req.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


async def test_a_tool_turn_sends_tool_use_and_merged_tool_results_and_parses_tool_use_blocks(
    server: ModelServer,
) -> None:
    server.script(
        Reply(
            message(
                text("Now b."),
                {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "b"}},
                stop="tool_use",
            )
        )
    )
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    transcript = [
        ChatMessage(role="system", content="Be careful."),
        ChatMessage(role="user", content="read a and c"),
        ChatMessage(
            role="assistant",
            content="Reading both.",
            tool_calls=[
                ToolCall(id="toolu_1", name="read_file", arguments={"path": "a"}),
                ToolCall(id="toolu_2", name="read_file", arguments={"path": "c"}),
            ],
        ),
        ChatMessage(role="tool", content="A", tool_call_id="toolu_1"),
        ChatMessage(role="tool", content="C", tool_call_id="toolu_2"),
        ChatMessage(role="user", content="and then b"),
    ]
    result = await model(server).complete(
        ask(
            *transcript,
            tools=[ToolSpec(name="read_file", description="Read.", input_schema=schema)],
        )
    )
    assert result.message.content == "Now b."
    assert result.message.tool_calls == [
        ToolCall(id="toolu_9", name="read_file", arguments={"path": "b"})
    ]
    assert result.stop_reason == "tool_use"
    body = server.received[0].body
    assert body["system"] == "Be careful."
    assert body["tools"] == [{"name": "read_file", "description": "Read.", "input_schema": schema}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read a and c"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "c"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "C"},
                {"type": "text", "text": "and then b"},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("end_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop"),
    ],
)
async def test_stop_reasons_map_and_cache_tokens_count_as_input(
    server: ModelServer, stop: str, expected: str
) -> None:
    server.script(
        Reply(
            message(
                text("t"), stop=stop, cache_read_input_tokens=100, cache_creation_input_tokens=5
            )
        )
    )
    result = await model(server).complete(ask(ChatMessage(role="user", content="go")))
    assert result.stop_reason == expected
    assert result.usage == Usage(input_tokens=135, output_tokens=6)


async def test_a_400_fails_at_once_with_the_status_type_and_message_but_never_the_key(
    server: ModelServer,
) -> None:
    server.script(
        Reply(
            status=400,
            body={
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": f"messages.0: bad content (key {KEY})",
                },
            },
        )
    )
    with pytest.raises(RemoteError) as caught:
        await model(server).complete(ask(ChatMessage(role="user", content="hi")))
    err = caught.value
    assert err.code == ErrorCode.MODEL_ERROR
    assert "HTTP 400" in err.message
    assert "invalid_request_error: messages.0: bad content" in err.message
    assert KEY not in err.message and KEY not in str(err)
    assert len(server.received) == 1


async def test_a_529_overloaded_is_retried_and_the_next_answer_is_used(server: ModelServer) -> None:
    server.script(
        Reply(
            status=529,
            body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
        Reply(message(text("made it"))),
    )
    result = await model(server).complete(ask(ChatMessage(role="user", content="hi")))
    assert result.message.content == "made it"
    assert len(server.received) == 2


async def test_a_429_honours_retry_after(server: ModelServer) -> None:
    server.script(
        Reply(status=429, headers={"retry-after": "0"}, body={"error": {"message": "rate"}}),
        Reply(message(text("ok"))),
    )
    slow_backoff = RetryPolicy(max_attempts=2, initial_delay=30.0)
    started = time.monotonic()
    result = await model(server, retry=slow_backoff).complete(
        ask(ChatMessage(role="user", content="hi"))
    )
    assert result.message.content == "ok"
    assert time.monotonic() - started < 5.0  # Retry-After: 0, not the 30 s backoff
    assert len(server.received) == 2


async def test_a_server_slower_than_the_timeout_fails_with_model_error_after_bounded_attempts(
    server: ModelServer,
) -> None:
    server.script(*[Reply(message(text("late")), delay=5)] * 3)
    provider = model(server, timeout=0.2, retry=RetryPolicy(max_attempts=2, initial_delay=0.01))
    with pytest.raises(RemoteError) as caught:
        await provider.complete(ask(ChatMessage(role="user", content="hi")))
    assert caught.value.code == ErrorCode.MODEL_ERROR
    assert "no reply within 0.2s" in caught.value.message
    assert len(server.received) == 2


async def test_the_model_string_and_environment_configure_base_url_and_key(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.script(Reply(message(text("ok"))))
    provider = resolve_model("anthropic:claude-x")
    assert KEY not in repr(provider)
    await provider.complete(ask(ChatMessage(role="user", content="x")))
    assert server.received[0].headers["x-api-key"] == KEY
    assert server.received[0].body["model"] == "claude-x"
