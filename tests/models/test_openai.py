"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from model_server import ModelServer, Reply

from tether.parent.models import resolve_model
from tether.parent.models.openai import RAW_ARGUMENTS_KEY, OpenAIModel
from tether.parent.models.retry import RetryPolicy
from tether.protocol import ErrorCode, RemoteError
from tether.protocol.messages import ChatMessage, ModelCompleteParams, ToolCall, ToolSpec, Usage

pytestmark = pytest.mark.anyio

KEY = "sk-test-canary-0123456789"
FAST = RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05)


def chat(content: str = "", tool_calls: list[dict[str, Any]] | None = None, **extra: Any) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": extra.get("finish", "stop")}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 4, "total_tokens": 25},
    }


def model(server: ModelServer, **kw: Any) -> OpenAIModel:
    kw.setdefault("api_key", KEY)
    kw.setdefault("retry", FAST)
    return OpenAIModel("test-model", base_url=f"{server.url}/v1", **kw)


def ask(*messages: ChatMessage, tools: list[ToolSpec] | None = None) -> ModelCompleteParams:
    return ModelCompleteParams(run_id="r1", messages=list(messages), tools=tools or [])


async def test_a_plain_text_turn_becomes_an_assistant_message_with_usage_and_end_turn(
    server: ModelServer,
) -> None:
    server.script(Reply(chat("Hello there.")))
    result = await model(server).complete(ask(ChatMessage(role="user", content="hi")))
    assert result.message == ChatMessage(role="assistant", content="Hello there.")
    assert result.usage == Usage(input_tokens=21, output_tokens=4)
    assert result.stop_reason == "end_turn"
    [req] = server.received
    assert req.path == "/v1/chat/completions"
    assert req.body == {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.headers["content-type"] == "application/json"


async def test_a_tool_call_turn_sends_specs_calls_and_results_and_parses_the_calls(
    server: ModelServer,
) -> None:
    server.script(
        Reply(
            chat(
                "Reading it.",
                [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "b.txt"}'},
                    }
                ],
                finish="tool_calls",
            )
        )
    )
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    transcript = [
        ChatMessage(role="system", content="You are careful."),
        ChatMessage(role="user", content="read a then b"),
        ChatMessage(
            role="assistant",
            tool_calls=[ToolCall(id="call_1", name="read_file", arguments={"path": "a.txt"})],
        ),
        ChatMessage(role="tool", content="contents of a", tool_call_id="call_1"),
    ]
    result = await model(server).complete(
        ask(
            *transcript,
            tools=[ToolSpec(name="read_file", description="Read.", input_schema=schema)],
        )
    )
    assert result.message.content == "Reading it."
    assert result.message.tool_calls == [
        ToolCall(id="call_9", name="read_file", arguments={"path": "b.txt"})
    ]
    assert result.stop_reason == "tool_use"
    body = server.received[0].body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "read_file", "description": "Read.", "parameters": schema},
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "read a then b"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "contents of a"},
    ]
    assert json.loads(body["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {
        "path": "a.txt"
    }


@pytest.mark.parametrize(
    ("finish", "calls", "expected"),
    [
        ("stop", False, "end_turn"),
        ("length", False, "max_tokens"),
        ("tool_calls", True, "tool_use"),
        ("content_filter", False, "stop"),
        ("stop", True, "tool_use"),  # local servers that say "stop" on a tool-calling turn
    ],
)
async def test_finish_reasons_map_to_stop_reasons(
    server: ModelServer, finish: str, calls: bool, expected: str
) -> None:
    tool_calls = (
        [{"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}]
        if calls
        else None
    )
    server.script(Reply(chat("t", tool_calls, finish=finish)))
    result = await model(server).complete(ask(ChatMessage(role="user", content="go")))
    assert result.stop_reason == expected


async def test_malformed_tool_arguments_keep_the_raw_text_instead_of_failing_the_turn(
    server: ModelServer,
) -> None:
    broken = '{"path": "a.txt"'
    server.script(
        Reply(
            chat(
                "",
                [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": broken},
                    }
                ],
                finish="tool_calls",
            )
        )
    )
    result = await model(server).complete(ask(ChatMessage(role="user", content="go")))
    assert result.message.tool_calls == [
        ToolCall(id="c1", name="read_file", arguments={RAW_ARGUMENTS_KEY: broken})
    ]


async def test_a_400_fails_at_once_with_the_status_and_the_api_message_but_never_the_key(
    server: ModelServer,
) -> None:
    server.script(
        Reply(
            status=400,
            body={
                "error": {
                    "message": f"Incorrect API key provided: {KEY}.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )
    )
    with pytest.raises(RemoteError) as caught:
        await model(server).complete(ask(ChatMessage(role="user", content="hi")))
    err = caught.value
    assert err.code == ErrorCode.MODEL_ERROR
    assert "400" in err.message
    assert "Incorrect API key provided" in err.message
    assert KEY not in err.message and KEY not in str(err) and KEY not in repr(err)
    assert len(server.received) == 1


@pytest.mark.parametrize(
    "first",
    [
        Reply(status=429, headers={"Retry-After": "0"}, body={"error": {"message": "slow down"}}),
        Reply(status=503, body={"error": {"message": "unavailable"}}),
    ],
    ids=["429-retry-after-0", "503"],
)
async def test_a_429_or_5xx_is_retried_and_the_next_answer_is_used(
    server: ModelServer, first: Reply
) -> None:
    server.script(first, Reply(chat("second time lucky")))
    result = await model(server).complete(ask(ChatMessage(role="user", content="hi")))
    assert result.message.content == "second time lucky"
    assert len(server.received) == 2
    assert server.received[0].body == server.received[1].body


async def test_retries_are_bounded_and_the_last_status_is_reported(server: ModelServer) -> None:
    server.script(*[Reply(status=500, body={"error": {"message": "boom"}})] * 5)
    with pytest.raises(RemoteError) as caught:
        await model(server).complete(ask(ChatMessage(role="user", content="hi")))
    assert caught.value.code == ErrorCode.MODEL_ERROR
    assert "after 3 attempts" in caught.value.message and "HTTP 500" in caught.value.message
    assert "boom" in caught.value.message
    assert len(server.received) == 3


async def test_a_server_slower_than_the_timeout_fails_with_model_error_after_bounded_attempts(
    server: ModelServer,
) -> None:
    server.script(*[Reply(chat("late"), delay=5)] * 3)
    provider = model(server, timeout=0.2, retry=RetryPolicy(max_attempts=2, initial_delay=0.01))
    started = time.monotonic()
    with pytest.raises(RemoteError) as caught:
        await provider.complete(ask(ChatMessage(role="user", content="hi")))
    assert time.monotonic() - started < 2.0
    assert caught.value.code == ErrorCode.MODEL_ERROR
    assert "no reply within 0.2s" in caught.value.message
    assert "after 2 attempts" in caught.value.message
    assert len(server.received) == 2


async def test_a_refused_connection_is_retried_then_fails_with_model_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", retry=FAST)
    with pytest.raises(RemoteError) as caught:
        await provider.complete(ask(ChatMessage(role="user", content="hi")))
    assert caught.value.code == ErrorCode.MODEL_ERROR
    assert "cannot connect" in caught.value.message


async def test_a_reply_that_is_not_json_fails_the_turn_without_retrying(
    server: ModelServer,
) -> None:
    server.script(Reply(raw=b"<html>gateway</html>"))
    with pytest.raises(RemoteError) as caught:
        await model(server).complete(ask(ChatMessage(role="user", content="hi")))
    assert "not JSON" in caught.value.message
    assert len(server.received) == 1


async def test_without_a_key_no_authorization_header_is_sent(server: ModelServer) -> None:
    server.script(Reply(chat("local")))
    result = await model(server, api_key=None).complete(ask(ChatMessage(role="user", content="x")))
    assert result.message.content == "local"
    assert "authorization" not in server.received[0].headers


async def test_the_model_string_names_the_base_url_and_the_key_comes_from_the_environment(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/unused")
    provider = resolve_model(f"openai:test-model@{server.url}/v1")
    assert KEY not in repr(provider)
    server.script(Reply(chat("ok")))
    await provider.complete(ask(ChatMessage(role="user", content="x")))
    assert server.received[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.received[0].body["model"] == "test-model"


async def test_openai_base_url_comes_from_the_environment_when_the_string_names_none(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1/")
    server.script(Reply(chat("ok")))
    await resolve_model("openai:llama3").complete(ask(ChatMessage(role="user", content="x")))
    assert server.received[0].path == "/v1/chat/completions"
    assert server.received[0].body["model"] == "llama3"
