"""Fork context: what a sub-agent started with `forkContext: true` sees before its prompt.

It gets the orchestrator's completed model turns: the transcript without system messages (the
sub-agent has its own system prompt; the orchestrator's would tell it it can delegate), cut
before the first assistant turn whose tool calls are not all answered. The turn that issued
this task call is such a turn (its result is what is being computed), so the in-flight turn is
never forked, and neither is anything after it; the transcript a sub-agent gets is always one a
model API accepts (no tool call without its result).
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.protocol.messages import ChatMessage


def fork_history(
    transcript: Sequence[ChatMessage], tool_call_id: str | None = None
) -> list[ChatMessage]:
    messages = [m for m in transcript if m.role != "system"]
    end = len(messages)
    i = 0
    while i < end:
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            # Answered within what is kept: a cut can drop the answer to an earlier call, so
            # after each cut the kept turns are checked again.
            answered = {r.tool_call_id for r in messages[i + 1 : end] if r.role == "tool"}
            issued = tool_call_id is not None and any(c.id == tool_call_id for c in m.tool_calls)
            if issued or any(c.id not in answered for c in m.tool_calls):
                end, i = i, 0
                continue
        i += 1
    return messages[:end]
