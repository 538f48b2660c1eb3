"""OpenAI-compatible Chat Completions: OpenAI itself, and local servers that speak its API
(vLLM, Ollama, llama.cpp's server, LM Studio, ...).

Model strings: `openai:MODEL` sends to `$OPENAI_BASE_URL` (default `https://api.openai.com/v1`);
`openai:MODEL@http://127.0.0.1:8000/v1` names the base URL explicitly. The key comes from
`$OPENAI_API_KEY` in the parent's environment and is sent as `Authorization: Bearer KEY`; without
one no Authorization header is sent (fine for local servers).

Tool-call arguments arrive as a JSON string. One that is not a JSON object does not fail the
turn: the call is kept with `arguments = {"_raw_arguments": TEXT}`, so the child's tool answers
with an "invalid arguments" error the model can read and correct, and the raw text stays in
the transcript.
"""

from __future__ import annotations

import json
from typing import Any

from tether.parent.models._http import HttpModel, model_error, usage_count
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RAW_ARGUMENTS_KEY = "_raw_arguments"
"""Where a tool call's arguments go when they are not a JSON object."""

_FINISH: dict[str, StopReason] = {
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "stop": "end_turn",
    "content_filter": "stop",
}


class OpenAIModel(HttpModel):
    """One model behind an OpenAI-compatible `/chat/completions` endpoint."""

    SCHEME = "openai"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    BASE_URL_ENV = "OPENAI_BASE_URL"
    API_KEY_ENV = "OPENAI_API_KEY"
    PATH = "/chat/completions"

    # --- request ------------------------------------------------------------------------------

    def request_body(self, params: ModelCompleteParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_message_out(m) for m in params.messages],
        }
        if params.tools:
            body["tools"] = [_tool_out(t) for t in params.tools]
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    # --- reply --------------------------------------------------------------------------------

    def parse_reply(self, reply: Any) -> ModelCompleteResult:
        try:
            choice = reply["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise model_error("openai: the reply has no choices[0].message") from None
        calls = [
            self._call_in(raw)
            for raw in message.get("tool_calls") or []
            if isinstance(raw, dict) and raw.get("type", "function") == "function"
        ]
        content = _text_of(message.get("content"))
        if not content and isinstance(message.get("refusal"), str):
            content = message["refusal"]
        finish = choice.get("finish_reason")
        stop: StopReason = (
            _FINISH.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"
        )
        if calls and stop in ("end_turn", "stop"):
            # Several local servers say "stop" on a turn that calls tools.
            stop = "tool_use"
        usage = reply.get("usage") if isinstance(reply, dict) else None
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content=content, tool_calls=calls),
            usage=Usage(
                input_tokens=usage_count(usage, "prompt_tokens"),
                output_tokens=usage_count(usage, "completion_tokens"),
            ),
            stop_reason=stop,
        )

    def _call_in(self, raw: dict[str, Any]) -> ToolCall:
        function = raw.get("function") or {}
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise model_error("openai: a tool call in the reply has no function name")
        call_id = raw.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{next(self._ids)}"
        return ToolCall(id=call_id, name=name, arguments=parse_arguments(function.get("arguments")))


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments: a JSON object (as text or already decoded); anything else is
    kept as text under `_raw_arguments`."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw)
        except ValueError:
            return {RAW_ARGUMENTS_KEY: raw}
        if isinstance(decoded, dict):
            return decoded
    text = raw if isinstance(raw, str) else json.dumps(raw)
    return {RAW_ARGUMENTS_KEY: text}


def _message_out(m: ChatMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    if m.role == "assistant" and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content or None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in m.tool_calls
            ],
        }
    return {"role": m.role, "content": m.content}


def _tool_out(t: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": t.name,
            "description": t.description,
            "parameters": t.input_schema or {"type": "object", "properties": {}},
        },
    }


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts, as some servers answer
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""
