"""What a supervisor tells its listeners: a run started, the child made progress, a run ended;
and, for an orchestrated run, what its sub-agents do (`subagent.queued`, `.started`,
`.progress`, `.completed`, from `tether.parent.run.subagent_events`); for a run with a network
policy, each decision of its egress proxy (`net.allowed`, `net.denied`:
`tether.parent.egress`); trouble with the session store that no caller was waiting to hear
(`StoreTrouble`) — and the one event bus that tells them (`EventBus`: a local supervisor's and
a Ray placement's)."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from tether.parent.egress.events import NetEvent
from tether.parent.run.subagent_events import (
    SubagentCompleted,
    SubagentEvent,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
)
from tether.protocol.messages import RunResult


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    pid: int
    argv: tuple[str, ...]
    """The child's command (without the launcher's prefix)."""
    launcher: str = "local"
    """The launcher the command runs under (`local`, `bwrap`, `ssh:HOST`, ...)."""
    spawner: str = "exec"
    """How the child was started: `zygote` (forked from the supervisor's zygote, the default
    for tether's own child), `exec` (a fresh interpreter through the trampoline) or `memory`
    (no process: the in-memory transport; `pid` is then the supervisor's own)."""
    fallback: str | None = None
    """Why the default spawner did not use the zygote for tether's own child (it ran by
    exec); `None` otherwise."""


@dataclass(frozen=True)
class ChildEvent:
    """An `agent/event` the child sent, relayed as it arrived."""

    run_id: str
    seq: int
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    result: RunResult


@dataclass(frozen=True)
class StoreTrouble:
    """A write of the session store that nobody was waiting for failed: a continuable agent's
    lease could not be renewed or released (a full disk, a read-only or damaged store). The
    agent's child is disposed as usual, the lease is left to go stale, and the agent's next
    result says so too (in its `message`)."""

    agent_id: str
    message: str
    """One line: what failed, the file, and what to do."""
    run_id: str = ""
    """The run of the agent's child at the time, if it had one."""


Event = RunStarted | ChildEvent | RunFinished | SubagentEvent | NetEvent | StoreTrouble
EventCallback = Callable[[Event], None]

PROGRESS = (ChildEvent, SubagentProgress, SubagentQueued, NetEvent)
"""The events a slow consumer may lose: progress, queue positions (each superseded by the
next), and the egress proxy's decisions (`net.allowed`, `net.denied`; a run's result keeps its
counts and first denials). A run's start and end, and a sub-agent's `started` and `completed`,
are never dropped."""
LIFECYCLE = (RunStarted, RunFinished, SubagentStarted, SubagentCompleted)


DEFAULT_EVENT_BUFFER = 10_000


class EventStream:
    """What `Supervisor.events()` yields: an async iterator over events, with a bounded buffer.

    When the consumer falls `buffer` events behind, the oldest *progress* events (`PROGRESS`:
    a child's events, a sub-agent's relayed progress and queue positions) still waiting are
    dropped and counted in `dropped`; the events that say a run or a sub-agent started or
    finished (`LIFECYCLE`) are never dropped (there is one pair per run), so a slow consumer
    still sees every run and sub-agent begin and end with its result.
    """

    def __init__(self, buffer: int = DEFAULT_EVENT_BUFFER) -> None:
        if buffer < 1:
            raise ValueError("the event buffer must hold at least one event")
        self._buffer = buffer
        self._queue: deque[Event] = deque()
        self._progress = 0
        self._wake = anyio.Event()
        self._closed = False
        self.dropped = 0
        """Progress events dropped because the consumer fell behind."""

    def put(self, event: Event) -> None:
        if self._closed:
            return
        self._queue.append(event)
        if isinstance(event, PROGRESS):
            self._progress += 1
        if len(self._queue) > self._buffer and self._progress:
            self._drop_oldest_progress()
        self._wake.set()

    def _drop_oldest_progress(self) -> None:
        for i, queued in enumerate(self._queue):
            if isinstance(queued, PROGRESS):
                del self._queue[i]
                self._progress -= 1
                self.dropped += 1
                return

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        while not self._queue:
            if self._closed:
                raise StopAsyncIteration
            self._wake = anyio.Event()
            await self._wake.wait()
        event = self._queue.popleft()
        if isinstance(event, PROGRESS):
            self._progress -= 1
        return event


class EventBus:
    """Where a supervisor's events go: every subscriber, and the run's own callback. A local
    supervisor (`SupervisorCore`) and a Ray placement (`RayPlacement`) are each one bus; their
    runs `publish` to it and their users `subscribe` or iterate `events()`."""

    def __init__(self, event_buffer: int = DEFAULT_EVENT_BUFFER) -> None:
        """`event_buffer`: what `events()` buffers unless it is told otherwise."""
        self._subscribers: list[EventCallback] = []
        self._event_buffer = event_buffer

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call `callback` for every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    @contextlib.asynccontextmanager
    async def events(self, buffer: int | None = None) -> AsyncIterator[EventStream]:
        """`async with sup.events() as stream: async for ev in stream: ...`. The stream buffers
        up to `buffer` events the consumer has not read (default: the bus's); past that the
        oldest progress events are dropped and counted (`stream.dropped`), never a run's start
        or end."""
        stream = EventStream(self._event_buffer if buffer is None else buffer)
        unsubscribe = self.subscribe(stream.put)
        try:
            yield stream
        finally:
            unsubscribe()
            stream.close()

    def publish(self, event: Event, extra: EventCallback | None = None) -> None:
        """Hand `event` to the run's own callback (`extra`) and to every subscriber; a
        listener that raises is skipped, never the run's business."""
        if extra is not None:
            try:
                extra(event)
            except Exception:  # a listener's bug must not break the run
                pass
        for cb in tuple(self._subscribers):  # a callback may unsubscribe
            try:
                cb(event)
            except Exception:
                pass
