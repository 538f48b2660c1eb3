"""`tether run`'s progress lines on stderr: what the run is doing, as it happens, for people.

One line per event worth a person's attention: the child started (pid, launcher, command),
each model turn, each tool call and its result — a refused or failed call says so, with the
reason — what the agent said, compactions, reports, each decision of the run's egress proxy,
and a heartbeat line while a model turn, an approval or a tool call is still pending (so a
long wait is visibly alive); then the end of the run with its duration. Everything the child
wrote is cleaned for the terminal (`terminal.clean`) and cut to one line.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any, TextIO

import msgspec

from tether.parent.egress.events import NetEvent
from tether.parent.run.events import ChildEvent, Event, RunFinished, RunStarted, StoreTrouble
from tether.parent.run.terminal import clean

PREVIEW = 120
"""Characters of a tool's arguments or result shown on its line."""


def line(value: object, limit: int | None = None) -> str:
    """A child's value as one line of plain text, cut to `limit` characters."""
    text = clean(str(value), multiline=False)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def describe(ev: Event) -> str | None:
    """The progress line for `ev`, or `None` for an event not shown."""
    if isinstance(ev, RunStarted):
        under = "" if ev.launcher == "local" else f" under {line(ev.launcher)}"
        return f"tether: child pid {ev.pid} started{under} ({shlex.join(ev.argv)})"
    if isinstance(ev, RunFinished):
        r = ev.result
        how = "ok" if r.success else f"failed ({r.failure.kind if r.failure else r.status})"
        took = f" in {r.duration_seconds:.2f}s" if r.duration_seconds is not None else ""
        return f"tether: run {ev.run_id} {how}{took}"
    if isinstance(ev, ChildEvent):
        return _child_event(ev.kind, ev.data)
    if isinstance(ev, NetEvent):
        prefix = "  ! " if ev.kind == "net.denied" else "  "
        return prefix + net_line(ev)
    if isinstance(ev, StoreTrouble):
        return f"tether: agent {ev.agent_id}: the session store: {line(ev.message)}"
    return None  # a delegation's sub-agent events: `tether orchestrate` shows those


def net_line(ev: NetEvent) -> str:
    """One decision of a run's egress proxy, as a line (`tether run`, `tether orchestrate`)."""
    where = line(f"{ev.host}:{ev.port}" if ev.host else "a connection")
    if ev.kind == "net.denied":
        return f"net: refused {where}: {line(ev.reason, PREVIEW)}"
    return f"net: {where} ({ev.via}, {ev.bytes_up} B up, {ev.bytes_down} B down)"


def _child_event(kind: str, d: dict[str, Any]) -> str | None:
    if kind == "step":
        return f"  step {line(d.get('iteration', d.get('step', '')))}"
    if kind == "tool_call":
        args = msgspec.json.encode(d.get("arguments", {})).decode()
        return f"  tool {line(d.get('name', '?'))} {line(args, PREVIEW)}"
    if kind == "tool_result":
        name = line(d.get("name", "?"))
        content = line(d.get("content", ""), PREVIEW)
        if d.get("isError"):
            return f"  ! {name} refused or failed: {content}"
        return f"  = {name}: {content}" if content else f"  = {name}: done"
    if kind == "text" and d.get("text"):
        return f"  says: {line(d['text'], 200)}"
    if kind == "compaction":
        return "  compacted the transcript"
    if kind == "heartbeat":
        waiting = line(d.get("waitingFor", "something"))
        elapsed = d.get("elapsedSeconds")
        since = f" for {elapsed:g}s" if isinstance(elapsed, int | float) else ""
        return f"  … still waiting on {waiting}{since}"
    if kind == "report":
        return f"  report: {line(msgspec.json.encode(d).decode(), PREVIEW)}"
    return None


def printer(out: TextIO) -> Callable[[Event], None]:
    """An event callback that prints each event's progress line to `out`."""

    def show(ev: Event) -> None:
        text = describe(ev)
        if text is not None:
            print(text, file=out, flush=True)

    return show
