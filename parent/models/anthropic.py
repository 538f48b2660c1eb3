"""Anthropic Messages API.

Model strings: `anthropic:MODEL` sends to `$ANTHROPIC_BASE_URL` (default
`https://api.anthropic.com`); `anthropic:MODEL@http://127.0.0.1:8000` names the base URL
explicitly. The key comes from `$ANTHROPIC_API_KEY` in the parent's environment and is sent as
`x-api-key`; without one the header is left out (for proxies that add it themselves).

Mapping from tether's transcript: system messages are joined into the top-level `system`; tool
results become `tool_result` blocks in a user message, and consecutive messages of one role
(several tool results, or tool results followed by a user note) are merged into one message, as
the API wants roles to alternate. Empty text is left out (the API refuses empty text blocks).
Input usage counts cache writes and reads too (`input_tokens` + `cache_creation_input_tokens` +
`cache_read_input_tokens`).
"""

from __future__ import annotations

from typing import Any

from tether.parent.models._http import HttpModel, model_error, usage_count
from tether.parent.models.openai import RAW_ARGUMENTS_KEY
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
"""Sent as `max_tokens` (required by the API); every current model accepts at least this."""

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop",
    "refusal": "stop",
}


class AnthropicModel(HttpModel):
    """One model behind the Anthropic Messages API (`/v1/messages`)."""

    SCHEME = "anthropic"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    BASE_URL_ENV = "ANTHROPIC_BASE_URL"
    API_KEY_ENV = "ANTHROPIC_API_KEY"
    DEFAULT_MAX_TOKENS = DEFAULT_MAX_TOKENS
    PATH = "/v1/messages"

    # --- request ------------------------------------------------------------------------------

    def request_body(self, params: ModelCompleteParams) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in params.messages if m.role == "system" and m.content)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages_out(params.messages),
        }
        if system:
            body["system"] = system
        if params.tools:
            body["tools"] = [_tool_out(t) for t in params.tools]
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    # --- reply --------------------------------------------------------------------------------

    def parse_reply(self, reply: Any) -> ModelCompleteResult:
        blocks = reply.get("content") if isinstance(reply, dict) else None
        if not isinstance(blocks, list):
            raise model_error("anthropic: the reply has no content blocks")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use":
                calls.append(self._call_in(block))
        raw_stop = reply.get("stop_reason")
        stop: StopReason = (
            _STOP.get(raw_stop, "end_turn") if isinstance(raw_stop, str) else "end_turn"
        )
        if calls and stop == "end_turn":
            stop = "tool_use"
        usage = reply.get("usage")
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="".join(texts), tool_calls=calls),
            usage=Usage(
                input_tokens=usage_count(usage, "input_tokens")
                + usage_count(usage, "cache_creation_input_tokens")
                + usage_count(usage, "cache_read_input_tokens"),
                output_tokens=usage_count(usage, "output_tokens"),
            ),
            stop_reason=stop,
        )

    def _call_in(self, block: dict[str, Any]) -> ToolCall:
        name = block.get("name")
        if not isinstance(name, str) or not name:
            raise model_error("anthropic: a tool_use block in the reply has no name")
        call_id = block.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"toolu_tether_{next(self._ids)}"
        raw = block.get("input")
        if raw is None:
            arguments: dict[str, Any] = {}
        elif isinstance(raw, dict):
            arguments = raw
        else:
            arguments = {RAW_ARGUMENTS_KEY: str(raw)}
        return ToolCall(id=call_id, name=name, arguments=arguments)


def messages_out(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """tether's transcript (system messages left out) as Anthropic messages, one role per
    message, alternating."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        role = "assistant" if m.role == "assistant" else "user"
        blocks: list[dict[str, Any]] = []
        if m.role == "tool":
            blocks.append(
                {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}
            )
        else:
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls if m.role == "assistant" else []:
                blocks.append(
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                )
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _tool_out(t: ToolSpec) -> dict[str, Any]:
    schema = dict(t.input_schema) if t.input_schema else {"type": "object", "properties": {}}
    schema.setdefault("type", "object")
    return {"name": t.name, "description": t.description, "input_schema": schema}
