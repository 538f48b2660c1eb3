"""The Anthropic Messages API (`POST /v1/messages`) as the gateway serves it: requests become a
tether `ModelCompleteParams`, results become a message or its server-sent event stream.

Request mapping: `system` (a string or text blocks) becomes one system message; each message's
content (a string or blocks) is split into what tether's transcript holds: text, `tool_use`
blocks as tool calls of an assistant message, `tool_result` blocks as `tool` messages (placed
before the user text that came with them). Thinking blocks are dropped; images and documents
become a placeholder, since tether's transcript is text. Tools with an `input_schema` become
tool specs; server tools (no schema) are dropped. `model`, `max_tokens`, `temperature` and the
like are not passed on: the parent decides which model answers and how.

Streaming follows the API's event order: `message_start` (the message with empty content and
the input usage), per content block `content_block_start`, `content_block_delta`
(`text_delta`, or `input_json_delta` with the tool input as JSON), `content_block_stop`; then
`message_delta` (stop reason, output usage) and `message_stop`. An error once the stream has
started is an `error` event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    ToolSpec,
)

PATH = "/v1/messages"

_STOP = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop": "end_turn",
}

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
}


class BadRequest(ValueError):
    """The request is not a Messages request the gateway can answer; the message says why."""


def params_of(body: Any, run_id: str) -> tuple[ModelCompleteParams, bool, str]:
    """The tether request, whether the client wants a stream, and the model name it asked for
    (echoed back in the answer)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise BadRequest("messages: a non-empty list is required")
    messages: list[ChatMessage] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append(ChatMessage(role="system", content=system))
    for i, raw in enumerate(raw_messages):
        messages.extend(_message_in(raw, i))
    tools = [_tool_in(t, i) for i, t in enumerate(body.get("tools") or [])]
    model = body.get("model")
    return (
        ModelCompleteParams(
            run_id=run_id, messages=messages, tools=[t for t in tools if t is not None]
        ),
        body.get("stream") is True,
        model if isinstance(model, str) else "",
    )


def _system_text(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        return "\n\n".join(_text_blocks(raw, "system"))
    raise BadRequest("system: a string or a list of text blocks is required")


def _text_blocks(blocks: list[Any], where: str) -> list[str]:
    out = []
    for block in blocks:
        if not isinstance(block, dict):
            raise BadRequest(f"{where}: every block must be an object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            out.append(block["text"])
    return out


def _message_in(raw: Any, i: int) -> list[ChatMessage]:
    if not isinstance(raw, dict) or raw.get("role") not in ("user", "assistant"):
        raise BadRequest(f"messages[{i}]: an object with role user or assistant is required")
    role = raw["role"]
    content = raw.get("content")
    if isinstance(content, str):
        return [ChatMessage(role=role, content=content)]
    if not isinstance(content, list):
        raise BadRequest(f"messages[{i}].content: a string or a list of blocks is required")
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[ChatMessage] = []
    for j, block in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        if not isinstance(block, dict):
            raise BadRequest(f"{where}: a block must be an object")
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise BadRequest(f"{where}.text: a string is required")
            texts.append(block["text"])
        elif kind == "tool_use" and role == "assistant":
            ident, name, args = block.get("id"), block.get("name"), block.get("input")
            if not isinstance(ident, str) or not isinstance(name, str):
                raise BadRequest(f"{where}: tool_use needs a string id and name")
            calls.append(
                ToolCall(id=ident, name=name, arguments=args if isinstance(args, dict) else {})
            )
        elif kind == "tool_result" and role == "user":
            ident = block.get("tool_use_id")
            if not isinstance(ident, str):
                raise BadRequest(f"{where}: tool_result needs a string tool_use_id")
            raw_result = block.get("content")
            if isinstance(raw_result, list):
                text = "\n".join(_text_blocks(raw_result, where))
            else:
                text = raw_result if isinstance(raw_result, str) else ""
            if block.get("is_error") is True:
                text = f"error: {text}"
            results.append(ChatMessage(role="tool", content=text, tool_call_id=ident))
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            texts.append(f"[{kind} omitted]")
    out = list(results)
    if texts or calls or not results:
        out.append(ChatMessage(role=role, content="".join(texts), tool_calls=calls))
    return out


def _tool_in(raw: Any, i: int) -> ToolSpec | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise BadRequest(f"tools[{i}]: an object with a name is required")
    schema = raw.get("input_schema")
    if not isinstance(schema, dict):
        return None  # a server tool (web search and the like): not tether's to run
    description = raw.get("description")
    return ToolSpec(
        name=raw["name"],
        description=description if isinstance(description, str) else "",
        input_schema=schema,
    )


# --- answers ----------------------------------------------------------------------------------


def _usage(result: ModelCompleteResult) -> dict[str, int]:
    return {
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _blocks(result: ModelCompleteResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if result.message.content or not result.message.tool_calls:
        blocks.append({"type": "text", "text": result.message.content})
    for call in result.message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def message_of(result: ModelCompleteResult, model: str, message_id: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(result),
        "stop_reason": _STOP.get(result.stop_reason, "end_turn"),
        "stop_sequence": None,
        "usage": _usage(result),
    }


def events_of(result: ModelCompleteResult, model: str, message_id: str) -> list[bytes]:
    """The whole answer as server-sent events, in the API's order."""
    start = message_of(result, model, message_id)
    start["content"] = []
    start["stop_reason"] = None
    start["usage"] = {**_usage(result), "output_tokens": 0}
    out = [sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(_blocks(result)):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            partial = msgspec.json.encode(block["input"]).decode()
            delta = {"type": "input_json_delta", "partial_json": partial}
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        out.append(
            sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        )
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": _STOP.get(result.stop_reason, "end_turn"),
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": result.usage.output_tokens},
            },
        )
    )
    out.append(sse("message_stop", {"type": "message_stop"}))
    return out


def error_of(status: int, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
    }


def error_event(status: int, message: str) -> bytes:
    return sse("error", error_of(status, message))


def sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"
