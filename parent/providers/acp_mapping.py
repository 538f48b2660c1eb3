"""Pure mapping between ACP and tether: prompts, session updates, permissions, stop reasons.

No I/O and no connection here; `acp.py` drives the agent and calls these.

- `render_prompt`: the task (and, for a fork, the caller's completed turns) as ACP content
  blocks. ACP has no way to seed a new session with a foreign transcript (`session/load` and
  `session/fork` replay the agent's own stored sessions), so earlier turns go in a first text
  block, rendered as a transcript the agent is told to read as context, and the task follows
  in its own block.
- `UpdateFolder`: folds `session/update` notifications into tether events and the final text.
  Message chunks are joined into one `text` event per message (a message ends where a chunk
  carries a new `messageId`, or a tool call, a plan or the end of the turn comes between), and
  a message the agent pauses in the middle of is shown as far as it got (`emit_pending`), so
  a listener is not kept waiting for its end. The summary is the last whole message the agent
  wrote. Thoughts become `text` events marked `thought` and never the summary. Tool calls
  become `tool_call` events, and their terminal updates (`completed`/`failed`) `tool_result`
  events; plans become `step` events carrying the plan. What the agent claims about its usage
  (`usage_update`) is ignored: usage is what the parent metered.
- `permission_answer`: which option answers a permission request, given the decision.
- `stop_outcome`: a prompt's stop reason as a run status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AudioContentBlock,
    DeniedOutcome,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    PermissionOption,
    RequestPermissionResponse,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
)

from tether.parent.run.events import ChildEvent
from tether.protocol.messages import ChatMessage, RunStatus

EVENT_PREVIEW_CHARS = 2_000
"""How much of a tool's output a `tool_result` event carries."""

READ_ONLY_KINDS = frozenset({"read", "search", "think", "fetch"})
"""ACP tool kinds that change nothing in the workspace. Every other kind (`edit`, `delete`,
`move`, `execute`, `switch_mode`, `other`) and a kind the agent never named count as a
mutation: explore mode refuses them without asking the policy."""


def is_mutation(kind: str | None) -> bool:
    return kind not in READ_ONLY_KINDS


# --- prompts ----------------------------------------------------------------------------------

_HISTORY_HEADER = (
    "Earlier conversation, for context only (it already happened; do not redo it). "
    "Your task follows after it."
)


PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)


def render_prompt(task: str, history: Sequence[ChatMessage] = ()) -> list[PromptBlock]:
    """The blocks of a `session/prompt`: the earlier turns (if any), then the task."""
    blocks: list[PromptBlock] = []
    if history:
        blocks.append(TextContentBlock(type="text", text=render_history(history)))
    blocks.append(TextContentBlock(type="text", text=task))
    return blocks


def render_history(history: Sequence[ChatMessage]) -> str:
    lines = [_HISTORY_HEADER, "<transcript>"]
    for m in history:
        if m.role == "tool":
            lines.append(
                f"[tool result for {m.tool_call_id}]" if m.tool_call_id else "[tool result]"
            )
            lines.append(m.content)
            continue
        lines.append(f"[{m.role}]")
        if m.content:
            lines.append(m.content)
        for call in m.tool_calls:
            lines.append(f"(called {call.name} {call.id}: {call.arguments})")
    lines.append("</transcript>")
    return "\n".join(lines)


# --- session updates --------------------------------------------------------------------------


@dataclass
class ToolCallSeen:
    """What the agent said about one tool call so far (updates fill in fields)."""

    id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    raw_input: Any = None


@dataclass
class UpdateFolder:
    """Folds one session's updates into events and text; see the module docstring."""

    run_id: str
    emit: Callable[[ChildEvent], None] = field(default=lambda _e: None)
    tools: dict[str, ToolCallSeen] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    """Every message the agent wrote, whole, in order."""
    ignored: int = 0
    """Updates that carry nothing tether reports (mode, commands, usage claims, ...)."""
    _seq: int = 0
    _message_id: str | None = None
    pending_since: float | None = None
    """When text that no event has shown yet started arriving (`None`: all shown)."""
    _text: list[str] = field(default_factory=list)
    _text_shown: int = 0
    _thought: list[str] = field(default_factory=list)
    _thought_shown: int = 0

    def fold(self, update: Any, now: float = 0.0) -> None:
        """Fold one update; `now` (a monotonic time) dates unshown text for `emit_pending`."""
        if isinstance(update, AgentMessageChunk):
            self._flush_thought()
            if update.message_id is not None and update.message_id != self._message_id:
                self._flush_text()
                self._message_id = update.message_id
            self._text.append(_text_of(update.content))
            self._pending(now)
        elif isinstance(update, AgentThoughtChunk):
            self._flush_text()
            self._thought.append(_text_of(update.content))
            self._pending(now)
        elif isinstance(update, ToolCallStart):
            self.flush()
            seen = self.tools.setdefault(update.tool_call_id, ToolCallSeen(update.tool_call_id))
            seen.title = update.title
            seen.kind = update.kind or seen.kind
            seen.status = update.status or seen.status
            if update.raw_input is not None:
                seen.raw_input = update.raw_input
            self._emit(
                "tool_call",
                {
                    "id": seen.id,
                    "name": seen.title,
                    "kind": seen.kind or "other",
                    "arguments": _arguments(seen.raw_input),
                },
            )
            if seen.status in ("completed", "failed"):
                self._emit_result(seen, update.content)
        elif isinstance(update, ToolCallProgress):
            self.flush()
            seen = self.tools.setdefault(update.tool_call_id, ToolCallSeen(update.tool_call_id))
            before = seen.status
            seen.title = update.title or seen.title
            seen.kind = update.kind or seen.kind
            seen.status = update.status or seen.status
            if update.raw_input is not None:
                seen.raw_input = update.raw_input
            if seen.status in ("completed", "failed") and before != seen.status:
                self._emit_result(seen, update.content)
        elif isinstance(update, AgentPlanUpdate):
            self.flush()
            entries = [
                {"content": e.content, "priority": e.priority, "status": e.status}
                for e in update.entries
            ]
            self._emit("step", {"plan": entries})
        else:
            self.ignored += 1

    def flush(self) -> None:
        """End the message (and thought) being written, emitting it."""
        self._flush_thought()
        self._flush_text()

    @property
    def summary(self) -> str:
        """The last non-empty message the agent wrote (call `flush()` first)."""
        for text in reversed(self.messages):
            if text.strip():
                return text.strip()
        return ""

    def _pending(self, now: float) -> None:
        if self.pending_since is None:
            self.pending_since = now

    def tool(self, tool_call_id: str) -> ToolCallSeen | None:
        return self.tools.get(tool_call_id)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        """Emit an event of the run's own (`started`), numbered with the folded ones."""
        self._emit(kind, data)

    # --- helpers ------------------------------------------------------------------------------

    def _flush_text(self) -> None:
        if not self._text:
            return
        self.emit_pending()
        self.messages.append("".join(self._text))
        self._text.clear()
        self._text_shown = 0

    def _flush_thought(self) -> None:
        if not self._thought:
            return
        self.emit_pending()
        self._thought.clear()
        self._thought_shown = 0

    def emit_pending(self) -> None:
        """Emit what arrived of the message (and thought) being written and was not shown yet,
        without ending it: the driver calls this when the agent pauses mid-message, so a
        listener sees progress before the message ends. The summary still gets the whole."""
        self.pending_since = None
        if self._thought:
            text = "".join(self._thought)
            if text[self._thought_shown :]:
                self._emit("text", {"text": text[self._thought_shown :], "thought": True})
            self._thought_shown = len(text)
        if self._text:
            text = "".join(self._text)
            if text[self._text_shown :]:
                self._emit("text", {"text": text[self._text_shown :]})
            self._text_shown = len(text)

    def _emit_result(self, seen: ToolCallSeen, content: Any) -> None:
        output = _tool_output(content)
        self._emit(
            "tool_result",
            {
                "id": seen.id,
                "name": seen.title,
                "isError": seen.status == "failed",
                "content": output[:EVENT_PREVIEW_CHARS],
                "truncated": len(output) > EVENT_PREVIEW_CHARS,
            },
        )

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        self._seq += 1
        self.emit(ChildEvent(self.run_id, self._seq, kind, data))


def _text_of(block: Any) -> str:
    if isinstance(block, TextContentBlock):
        return block.text
    kind = getattr(block, "type", "content")
    return f"[{kind}]"


def _arguments(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    return {"input": raw}


def _tool_output(content: Any) -> str:
    """The text of a tool call's content list (text blocks, diffs named, terminals named)."""
    if not content:
        return ""
    parts: list[str] = []
    for item in content:
        kind = getattr(item, "type", None)
        if kind == "content":
            parts.append(_text_of(item.content))
        elif kind == "diff":
            parts.append(f"[diff of {getattr(item, 'path', '?')}]")
        elif kind == "terminal":
            parts.append(f"[terminal {getattr(item, 'terminal_id', '?')}]")
    return "\n".join(parts)


# --- permissions ------------------------------------------------------------------------------


def permission_answer(
    options: Sequence[PermissionOption], allow: bool
) -> RequestPermissionResponse:
    """Select the option that carries out the decision for this one call only where the agent
    offers it (`allow_once`, `reject_once`), the lasting one otherwise; a decision no option
    expresses answers `cancelled`, which the agent must treat as not allowed."""
    wanted = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    for kind in wanted:
        for option in options:
            if option.kind == kind:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
                )
    return cancelled_answer()


def cancelled_answer() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


# --- stop reasons -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StopOutcome:
    status: RunStatus
    error: str | None
    """Why the run failed, when it did (`None` for `completed`)."""
    by_cancel: bool = False
    """The agent ended the turn because the parent cancelled it."""


_STOP_ERRORS = {
    "refusal": "the agent refused to continue (stop reason: refusal)",
    "max_tokens": "the agent's model hit its token limit (stop reason: max_tokens)",
    "max_turn_requests": (
        "the agent hit its limit of model requests for one turn (stop reason: max_turn_requests)"
    ),
}


def stop_outcome(stop_reason: str, *, cancel_requested: bool) -> StopOutcome:
    """`end_turn` → completed; `cancelled` → aborted; every other reason → error, named."""
    if stop_reason == "end_turn":
        return StopOutcome("completed", None)
    if stop_reason == "cancelled":
        if cancel_requested:
            return StopOutcome("aborted", "the run was cancelled by the parent", by_cancel=True)
        return StopOutcome("aborted", "the agent ended the turn as cancelled, unasked")
    return StopOutcome("error", _STOP_ERRORS.get(stop_reason, f"the agent stopped: {stop_reason}"))
