"""Progress of a task call for an MCP client: each sub-agent event as one line, and the
bounded feed that carries the lines from the call to the request's progress notifications.

`describe(event)` is pure. A line names the sub-agent (id, type, label) and what happened, and
a running sub-agent's line carries its figures in a fixed form a program can read too:

    sa-2 explorer 'how adjust() is tested': queued (position 1, waiting for a slot)
    sa-1 explorer 'find the TODO notes': started (task, read-only)
    sa-1 explorer 'find the TODO notes': next step (step 1, 0.4 s, last tool none, 0 tokens)
    sa-1 explorer 'find the TODO notes': calls grep (step 1, 0.6 s, last tool grep, 1130 tokens)
    sa-1 explorer 'find the TODO notes': working (step 1, 2.6 s, last tool grep, 1130 tokens)
    sa-1 explorer 'find the TODO notes': completed

Labels, tool names and messages are a model's or a child's words: they are cleaned of escape
sequences and control characters (`terminal.clean`) and kept to one line.

`ProgressFeed` is what the call writes to (synchronously, from the delegator's event callback)
and the request's sender reads from. It holds at most `capacity` lines: past that the oldest
are dropped (and counted), so a client that reads slowly loses old progress, never the call.
"""

from __future__ import annotations

from collections import deque

import anyio

from tether.parent.run.subagent_events import (
    SubagentCompleted,
    SubagentEvent,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
)
from tether.parent.run.terminal import clean

LABEL_CHARS = 80
TEXT_CHARS = 200
DEFAULT_CAPACITY = 256


def describe(event: SubagentEvent) -> str:
    """One line for `event` (see the module docstring)."""
    who = f"{event.id} {_line(event.type, 64)} {_line(event.label, LABEL_CHARS)!r}"
    if isinstance(event, SubagentQueued):
        wants = "a slot" if event.waiting_for == "slot" else "the workspace"
        return f"{who}: queued (position {event.position}, waiting for {wants})"
    if isinstance(event, SubagentStarted):
        mode = "read-only" if event.read_only else "build mode"
        return f"{who}: started ({event.role}, {mode})"
    if isinstance(event, SubagentProgress):
        return f"{who}: {_what(event)} ({figures(event)})"
    if isinstance(event, SubagentCompleted):
        if event.status == "completed":
            return f"{who}: completed"
        return f"{who}: {event.status}: {_line(event.message, TEXT_CHARS)}"
    raise TypeError(f"not a sub-agent event: {event!r}")


def figures(event: SubagentProgress) -> str:
    """`step N, E s, last tool T, K tokens`: the running figures of a sub-agent."""
    tool = _line(event.last_tool, 64) if event.last_tool else "none"
    return f"step {event.step}, {event.elapsed:.1f} s, last tool {tool}, {event.tokens} tokens"


_KINDS = {
    "started": "child started",
    "step": "next step",
    "text": "says something",
    "tool_result": "tool result",
    "heartbeat": "working",
    "report": "reports",
    "compaction": "compacted its transcript",
}
"""How each `agent/event` kind reads; others are named as they are."""


def _what(event: SubagentProgress) -> str:
    if event.kind == "tool_call":
        return f"calls {_line(event.data.get('name', '?'), 64)}"
    return _KINDS.get(event.kind) or _line(event.kind, 32)


def _line(value: object, limit: int) -> str:
    text = clean(str(value), multiline=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ProgressFeed:
    """Lines from a call to the one task that sends them (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._lines: deque[str] = deque()
        self._capacity = capacity
        self._more = anyio.Event()
        self._closed = False
        self.dropped = 0

    def put(self, line: str) -> None:
        """Add a line (never blocks); ignored once the feed is closed."""
        if self._closed:
            return
        if len(self._lines) >= self._capacity:
            self._lines.popleft()
            self.dropped += 1
        self._lines.append(line)
        self._more.set()

    def close(self) -> None:
        """No more lines: the reader gets what is queued, then stops."""
        self._closed = True
        self._more.set()

    def __aiter__(self) -> ProgressFeed:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._closed:
                raise StopAsyncIteration
            self._more = anyio.Event()
            await self._more.wait()
        return self._lines.popleft()
