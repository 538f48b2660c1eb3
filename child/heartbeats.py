"""Heartbeats for every wait of one child's runs, from one task.

A run emits a `heartbeat` event every `HEARTBEAT_SECONDS` while it waits on something slow — a
model turn, a tool, an approval (`AgentContext.heartbeats`) — so the parent can tell a slow
step from a wedged child. Most waits are short: a model turn answered by a scripted or cached
model takes tens of microseconds, and a task of its own per wait (started, then cancelled)
cost a model turn more than the turn itself. So the waits of all runs are entries in one
table, and one task (`Heartbeats.run`, started with the child's first run and ended with its
server) sleeps until the oldest is due, emits for every wait that is, and sleeps again; with
no wait in progress it sleeps until one begins. A wait costs an entry made and dropped.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol

import anyio


class Emitter(Protocol):
    """Who waits: a run's context, which sends its events (`AgentContext.emit`)."""

    async def emit(self, kind: Any, data: Mapping[str, Any] | None = None) -> None: ...


class Wait:
    """One wait in progress (an async context manager: entered, it is in the table)."""

    __slots__ = ("_beats", "ctx", "due", "started", "what")

    def __init__(self, beats: Heartbeats, ctx: Emitter, what: str) -> None:
        self._beats = beats
        self.ctx = ctx
        self.what = what
        self.started = 0.0
        self.due = 0.0

    async def __aenter__(self) -> None:
        self.started = time.monotonic()
        self.due = self.started + self._beats.seconds
        self._beats.add(self)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._beats.waits.pop(id(self), None)


class Heartbeats:
    """The table of waits and the task that beats for them (see the module docstring)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.waits: dict[int, Wait] = {}
        self._idle: anyio.Event | None = None
        """Set by the first wait added while the task sleeps with none to beat for."""

    def waiting(self, ctx: Emitter, what: str) -> Wait:
        return Wait(self, ctx, what)

    def add(self, wait: Wait) -> None:
        self.waits[id(wait)] = wait
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.set()

    async def run(self) -> None:
        """Beat for every wait that is due, until cancelled (the child's server ends it)."""
        while True:
            if not self.waits:
                self._idle = anyio.Event()
                await self._idle.wait()
                continue
            now = time.monotonic()
            due = min(w.due for w in self.waits.values())
            if due > now:
                # A wait added meanwhile is due later than this one; one that ended meanwhile
                # wakes the task for nothing.
                await anyio.sleep(due - now)
                continue
            for wait in [w for w in self.waits.values() if w.due <= now]:
                wait.due += self.seconds
                beat = {"waitingFor": wait.what, "elapsedSeconds": round(now - wait.started, 1)}
                await wait.ctx.emit("heartbeat", beat)
