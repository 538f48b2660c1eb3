"""What an orchestrated run looks like while it runs: a nested live view on a terminal, plain
lines elsewhere.

`TreeState` folds the events of one orchestration (the orchestrator's run events and the
`subagent.*` events) into rows: the orchestrator, and under it each sub-agent with its label,
state (queued with its position, running, or how it ended), step, elapsed time, last tool and
tokens. It is pure: `apply(event, now)` and `render(now, width)`.

`LiveView` shows it on a stream. On a terminal it redraws the block in place a few times a
second (`TERMINAL_REFRESH`) and leaves the final state on screen; on anything else it prints one
plain line per thing that happened (no escape sequences, nothing redrawn). Every word that came
from a child or a model (labels, tool names, text) is cleaned with `terminal.clean` first.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

import anyio

from tether.parent.cli.progress import net_line
from tether.parent.egress.events import NetEvent
from tether.parent.run.events import ChildEvent, Event, RunFinished, RunStarted, StoreTrouble
from tether.parent.run.subagent_events import (
    SubagentCompleted,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
)
from tether.parent.run.terminal import clean

TERMINAL_REFRESH = 0.25
"""Seconds between redraws of the live block on a terminal."""
LABEL_WIDTH = 32


def _one_line(value: object, limit: int = 120) -> str:
    text = clean(str(value), multiline=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k tok" if n >= 1000 else f"{n} tok"


@dataclass
class Row:
    id: str
    type: str
    label: str
    role: str = "task"
    state: str = "queued"
    """queued, running, or how it ended (a task status: completed, truncated, crashed, ...)."""
    position: int | None = None
    step: int = 0
    last_tool: str | None = None
    tokens: int = 0
    started: float | None = None
    ended: float | None = None
    message: str = ""

    def elapsed(self, now: float) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else now) - self.started


@dataclass
class TreeState:
    """The orchestrator and its sub-agents, as far as the events have told."""

    orchestrator: Row = field(default_factory=lambda: Row("", "orchestrator", "", state="starting"))
    subagents: dict[str, Row] = field(default_factory=dict)
    tokens: Callable[[], int] | None = None
    """The orchestrator's tokens so far (its broker's count), when the viewer can ask."""

    def apply(self, event: Event, now: float | None = None) -> list[str]:
        """Fold one event in; the plain lines that say what happened (for non-terminals)."""
        t = time.monotonic() if now is None else now
        if isinstance(
            event, SubagentQueued | SubagentStarted | SubagentProgress | SubagentCompleted
        ):
            return self._subagent(event, t)
        if isinstance(event, StoreTrouble):
            return [f"agent {event.agent_id}: the session store: {_one_line(event.message, 400)}"]
        o = self.orchestrator
        if o.id and event.run_id != o.id:
            return []  # a sub-agent's own run: its progress comes as subagent.progress
        if isinstance(event, RunStarted):
            o.id, o.state, o.started = event.run_id, "running", t
            return [f"orchestrator {o.id}: started (pid {event.pid})"]
        if isinstance(event, ChildEvent):
            return self._orchestrator_progress(event)
        if isinstance(event, NetEvent):
            return [f"orchestrator {_one_line(net_line(event), 200)}"]
        assert isinstance(event, RunFinished)
        r = event.result
        o.ended = t
        o.state = "completed" if r.success else (r.failure.kind if r.failure else r.status)
        return [f"orchestrator {o.id}: {o.state}"]

    def _orchestrator_progress(self, event: ChildEvent) -> list[str]:
        o, d = self.orchestrator, event.data
        if event.kind == "step":
            o.step = int(d.get("iteration", o.step + 1))
            return [f"orchestrator: step {o.step}"]
        if event.kind == "tool_call":
            o.last_tool = _one_line(d.get("name", "?"), 40)
            return [f"orchestrator: tool {o.last_tool}"]
        if event.kind == "text" and d.get("text"):
            return [f"orchestrator says: {_one_line(d['text'], 200)}"]
        return []

    def _subagent(
        self,
        event: SubagentQueued | SubagentStarted | SubagentProgress | SubagentCompleted,
        t: float,
    ) -> list[str]:
        row = self.subagents.get(event.id)
        if row is None:
            row = self.subagents[event.id] = Row(
                event.id, _one_line(event.type, 64), _one_line(event.label, 80)
            )
        who = f"  {row.id} {row.type} {row.label!r}"
        if isinstance(event, SubagentQueued):
            row.state, row.position = "queued", event.position
            wait = "a free slot" if event.waiting_for == "slot" else "the workspace"
            return [f"{who}: queued #{event.position} (waiting for {wait})"]
        if isinstance(event, SubagentStarted):
            row.state, row.position, row.role, row.started = "running", None, event.role, t
            row.step, row.last_tool, row.tokens, row.ended = 0, None, 0, None
            mode = "read-only" if event.read_only else "build"
            return [f"{who}: started ({event.role}, {mode})"]
        if isinstance(event, SubagentProgress):
            row.step, row.tokens = event.step, event.tokens
            row.last_tool = None if event.last_tool is None else _one_line(event.last_tool, 40)
            if event.kind == "step":
                return [f"{who}: step {row.step}"]
            if event.kind == "tool_call":
                return [f"{who}: tool {row.last_tool}"]
            if event.kind == "net.denied":
                d = event.data
                where = _one_line(f"{d.get('host', '')}:{d.get('port', '')}", 80)
                return [f"{who}: net: refused {where}: {_one_line(d.get('reason', ''), 160)}"]
            return []
        row.state, row.ended, row.position = event.status, t, None
        row.message = _one_line(event.message, 160)
        tail = f": {row.message}" if row.message else ""
        return [f"{who}: {event.status}{tail}"]

    def render(self, now: float | None = None, width: int = 100) -> list[str]:
        """The nested view: the orchestrator, then one line per sub-agent."""
        t = time.monotonic() if now is None else now
        o = self.orchestrator
        tokens = self.tokens() if self.tokens is not None else None
        head = [f"orchestrator {o.id or '(starting)'}", o.state]
        if o.started is not None:
            head.append(f"step {o.step}")
            head.append(f"{o.elapsed(t):.1f}s")
        if o.last_tool:
            head.append(f"last {o.last_tool}")
        if tokens is not None:
            head.append(_tokens(tokens))
        lines = ["  ".join(head)]
        rows = list(self.subagents.values())
        for i, row in enumerate(rows):
            branch = "└─" if i == len(rows) - 1 else "├─"
            label = (
                row.label if len(row.label) <= LABEL_WIDTH else row.label[: LABEL_WIDTH - 1] + "…"
            )
            who = f"{branch} {row.id} {row.type}"
            if row.role != "task":
                who += f" ({row.role})"
            bits = [f"{who:<26}", f"{label:<{LABEL_WIDTH}}"]
            if row.state == "queued":
                bits.append(f"queued #{row.position}" if row.position else "queued")
            else:
                bits += [
                    f"{row.state:<9}",
                    f"step {row.step}",
                    f"{row.elapsed(t):.1f}s",
                ]
                if row.last_tool:
                    bits.append(f"last {row.last_tool}")
                bits.append(_tokens(row.tokens))
            lines.append("  ".join(bits))
        return [line[:width] for line in lines]


class LiveView:
    """Show one orchestration on `out` while it runs (see the module docstring)."""

    def __init__(self, out: TextIO, *, terminal: bool | None = None) -> None:
        self.out = out
        self.terminal = out.isatty() if terminal is None else terminal
        self.state = TreeState()
        self._drawn = 0

    def __call__(self, event: Event) -> None:
        lines = self.state.apply(event)
        if not self.terminal:
            for line in lines:
                print(f"tether: {line}", file=self.out)
            self.out.flush()

    async def refresh(self) -> None:
        """Redraw the block until cancelled (terminals only); the caller runs this in a task."""
        if not self.terminal:
            return
        while True:
            self.draw()
            await anyio.sleep(TERMINAL_REFRESH)

    def draw(self) -> None:
        if not self.terminal:
            return
        width = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
        lines = self.state.render(width=width)
        # Up to the first line of the previous block, clear to the end of the screen, redraw.
        prefix = f"\x1b[{self._drawn}F\x1b[J" if self._drawn else ""
        self.out.write(prefix + "".join(f"{line}\n" for line in lines))
        self.out.flush()
        self._drawn = len(lines)
