"""Fork context: what a sub-agent started with `forkContext: true` sees before its prompt.

It gets the orchestrator's completed model turns: the transcript without system messages (the
sub-agent has its own system prompt; the orchestrator's would tell it it can delegate), cut
before the first assistant turn whose tool calls are not all answered. The turn that issued
this task call is such a turn (its result is what is being computed), so the in-flight turn is
never forked, and neither is anything after it; the transcript a sub-agent gets is always one a
model API accepts (no tool call without its result).

The orchestrator's turns hold calls of tools a sub-agent does not have: its `task` calls above
all. Chat Completions does not check a past call's name against the request's tools, but the
Messages API and others may, and a model shown calls of a tool it lacks is invited to try
it. `without_tools` therefore rewrites those exchanges as plain text before a fork sees them: the
call becomes a line of the assistant's text, its result a line of a user message placed after
the turn's remaining tool results (where every API takes user text).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

from tether.protocol.messages import ChatMessage


def fork_history(
    transcript: Sequence[ChatMessage], tool_call_id: str | None = None
) -> list[ChatMessage]:
    messages = [m for m in transcript if m.role != "system"]
    end = len(messages)
    cut = True
    while cut:  # each cut can orphan an earlier call whose result was past it: check again
        cut = False
        for i, m in enumerate(messages[:end]):
            if m.role != "assistant" or not m.tool_calls:
                continue
            answered = {r.tool_call_id for r in messages[i + 1 : end] if r.role == "tool"}
            in_flight = tool_call_id is not None and any(c.id == tool_call_id for c in m.tool_calls)
            if in_flight or any(c.id not in answered for c in m.tool_calls):
                end, cut = i, True
                break
    return messages[:end]


def without_tools(messages: Sequence[ChatMessage], names: Collection[str]) -> list[ChatMessage]:
    """`messages` with every call of the tools in `names`, and its result, turned into text
    (see the module docstring); calls of other tools are kept as they are."""
    out: list[ChatMessage] = []
    pending: list[str] = []
    """Results of rewritten calls, waiting for the end of their turn's tool results."""
    foreign: dict[str, str] = {}
    """Rewritten call id -> tool name."""

    def flush() -> None:
        if pending:
            note = "Results of the calls above of tools you do not have:\n" + "\n".join(pending)
            out.append(ChatMessage(role="user", content=note))
            pending.clear()

    for m in messages:
        if m.role == "tool" and m.tool_call_id in foreign:
            name = foreign[m.tool_call_id]
            pending.append(f"[{name} {m.tool_call_id} result] {m.content}")
            continue
        if m.role != "tool":
            flush()
        if m.role == "assistant" and any(c.name in names for c in m.tool_calls):
            lines = [m.content] if m.content else []
            kept = []
            for c in m.tool_calls:
                if c.name in names:
                    foreign[c.id] = c.name
                    args = msgspec.json.encode(c.arguments).decode()
                    lines.append(f"[called {c.name} {c.id}: {args}]")
                else:
                    kept.append(c)
            m = ChatMessage(role="assistant", content="\n".join(lines), tool_calls=kept)
        out.append(m)
    flush()
    return out
