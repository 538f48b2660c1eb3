"""Keeping an agent's stored transcript in step with its child's, turn by turn. Pure: no I/O.

The parent never sees a child's transcript directly, only what the child sends with each model
turn: the whole transcript so far (`model/complete` carries every message). So after each
brokered turn the stored transcript is made equal to what the child sent (its system message
left out: the definition carries it) plus the answer it is about to get. Usually the stored
transcript is a prefix of what was sent and the turn only appends; where they differ — the
child compacted its transcript, or wrote a different text than the parent did for a message the
parent stored for it (the result of the final `complete` call, see below) — the stored
transcript is cut where they part and the child's version is stored from there (a splice).

When an activation ends, the child has run the final turn's tool calls (the `complete` call,
say) but their results travel in no request, so the stored transcript would end on tool calls
nobody answered, which model APIs refuse when the transcript is replayed on a cold resume.
`closing_results` writes a short result for each such call; a child continued warm sends its
own texts for them on its next turn, and the splice keeps those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.protocol.messages import ChatMessage, RunResult, ToolCall


@dataclass(frozen=True)
class Splice:
    """Keep the first `keep` stored messages and store `add` after them."""

    keep: int
    add: list[ChatMessage]


def common_prefix(a: Sequence[ChatMessage], b: Sequence[ChatMessage]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def as_stored(reply: ChatMessage) -> ChatMessage:
    """A model's answer as the child keeps it in its transcript (an assistant message with the
    text and tool calls, nothing else)."""
    return ChatMessage(role="assistant", content=reply.content, tool_calls=list(reply.tool_calls))


def turn_splice(
    stored: Sequence[ChatMessage], request: Sequence[ChatMessage], reply: ChatMessage
) -> Splice:
    """What to store after one brokered turn: the request's messages (without system ones)
    and the reply, from where they part from the stored transcript."""
    sent = [m for m in request if m.role != "system"]
    keep = common_prefix(stored, sent)
    return Splice(keep, [*sent[keep:], as_stored(reply)])


def open_calls(transcript: Sequence[ChatMessage]) -> list[ToolCall]:
    """The tool calls of the last assistant message that no later tool message answers."""
    last = next(
        (i for i in range(len(transcript) - 1, -1, -1) if transcript[i].role == "assistant"),
        None,
    )
    if last is None:
        return []
    answered = {m.tool_call_id for m in transcript[last + 1 :] if m.role == "tool"}
    return [c for c in transcript[last].tool_calls if c.id not in answered]


def closing_results(
    transcript: Sequence[ChatMessage], result: RunResult | None
) -> list[ChatMessage]:
    """A tool result for each call left open at the end of an activation. `result`: how the
    activation ended (`None`: unknown, its owner is gone)."""
    return [
        ChatMessage(role="tool", content=closing_note(call, result), tool_call_id=call.id)
        for call in open_calls(transcript)
    ]


def closing_note(call: ToolCall, result: RunResult | None) -> str:
    if result is not None and result.success:
        if call.name == "complete" and result.status == "completed":
            return "completed"
        if call.name == "ask_orchestrator" and result.status == "needs_input":
            return "asked; the answer is the next message"
        if call.name == "report":
            return "reported"
    how = f" ({result.status})" if result is not None else ""
    return (
        f"no result was recorded: the activation ended{how} before this call's result was "
        "stored; check what it did before running it again"
    )
