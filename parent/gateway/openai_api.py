"""OpenAI Chat Completions (`POST /v1/chat/completions`) as the gateway serves it: requests
become a tether `ModelCompleteParams`, results become a completion or its chunk stream.

Request mapping: `system` and `developer` messages become system messages; content given as
parts keeps its text parts (other parts become a placeholder); an assistant's `tool_calls`
become tool calls (their JSON-string arguments decoded; text that is not a JSON object is
kept under `_raw_arguments`, as the OpenAI provider does); `tool` messages keep their
`tool_call_id`. Function tools become tool specs. Sampling options are not passed on: the
parent decides which model answers and how.

Streaming sends `chat.completion.chunk` objects as `data:` events: the role, the text, each
tool call whole (id, name, arguments), the finish reason, then (when `stream_options.
include_usage` asks for it) a chunk with no choices and the usage, then `data: [DONE]`.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from tether.parent.models.openai import parse_arguments
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    ToolSpec,
)

PATH = "/v1/chat/completions"

_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "stop": "stop"}

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    402: "insufficient_quota",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
}


class BadRequest(ValueError):
    """The request is not a chat completion request the gateway can answer."""


def params_of(body: Any, run_id: str) -> tuple[ModelCompleteParams, bool, bool, str]:
    """The tether request, whether to stream, whether to send usage in the stream, and the
    model name asked for."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise BadRequest("messages: a non-empty list is required")
    messages = [_message_in(m, i) for i, m in enumerate(raw_messages)]
    tools = [_tool_in(t, i) for i, t in enumerate(body.get("tools") or [])]
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    model = body.get("model")
    return (
        ModelCompleteParams(
            run_id=run_id, messages=messages, tools=[t for t in tools if t is not None]
        ),
        body.get("stream") is True,
        include_usage,
        model if isinstance(model, str) else "",
    )


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict):
                raise BadRequest(f"{where}: every content part must be an object")
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                out.append(part["text"])
            else:
                out.append(f"[{part.get('type', 'part')} omitted]")
        return "".join(out)
    raise BadRequest(f"{where}: a string or a list of parts is required")


def _message_in(raw: Any, i: int) -> ChatMessage:
    where = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise BadRequest(f"{where}: an object is required")
    role = raw.get("role")
    content = _text(raw.get("content"), f"{where}.content")
    if role in ("system", "developer"):
        return ChatMessage(role="system", content=content)
    if role == "user":
        return ChatMessage(role="user", content=content)
    if role == "tool":
        ident = raw.get("tool_call_id")
        if not isinstance(ident, str):
            raise BadRequest(f"{where}: a tool message needs a string tool_call_id")
        return ChatMessage(role="tool", content=content, tool_call_id=ident)
    if role == "assistant":
        calls = []
        for j, call in enumerate(raw.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise BadRequest(f"{where}.tool_calls[{j}]: a function with a name is required")
            ident = call.get("id")
            calls.append(
                ToolCall(
                    id=ident if isinstance(ident, str) else f"call_{i}_{j}",
                    name=function["name"],
                    arguments=parse_arguments(function.get("arguments")),
                )
            )
        return ChatMessage(role="assistant", content=content, tool_calls=calls)
    raise BadRequest(f"{where}: unknown role {role!r}")


def _tool_in(raw: Any, i: int) -> ToolSpec | None:
    if not isinstance(raw, dict):
        raise BadRequest(f"tools[{i}]: an object is required")
    if raw.get("type", "function") != "function":
        return None
    function = raw.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise BadRequest(f"tools[{i}]: a function with a name is required")
    description = function.get("description")
    parameters = function.get("parameters")
    return ToolSpec(
        name=function["name"],
        description=description if isinstance(description, str) else "",
        input_schema=parameters if isinstance(parameters, dict) else {},
    )


# --- answers ----------------------------------------------------------------------------------


def _calls(result: ModelCompleteResult) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": msgspec.json.encode(call.arguments).decode(),
            },
        }
        for call in result.message.tool_calls
    ]


def _usage(result: ModelCompleteResult) -> dict[str, int]:
    u = result.usage
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
    }


def completion_of(result: ModelCompleteResult, model: str, completion_id: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.message.content or None}
    if result.message.tool_calls:
        message["tool_calls"] = _calls(result)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _FINISH.get(result.stop_reason, "stop"),
            }
        ],
        "usage": _usage(result),
    }


def chunks_of(
    result: ModelCompleteResult, model: str, completion_id: str, include_usage: bool
) -> list[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return data_event(body)

    out = [chunk({"role": "assistant", "content": ""})]
    if result.message.content:
        out.append(chunk({"content": result.message.content}))
    for index, call in enumerate(_calls(result)):
        out.append(chunk({"tool_calls": [{"index": index, **call}]}))
    out.append(chunk({}, _FINISH.get(result.stop_reason, "stop")))
    if include_usage:
        out.append(
            data_event(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(result),
                }
            )
        )
    out.append(b"data: [DONE]\n\n")
    return out


def error_of(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def error_event(status: int, message: str) -> bytes:
    return data_event(error_of(status, message))


def data_event(data: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(data) + b"\n\n"
