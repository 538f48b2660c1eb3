"""The warm pool: children spawned and initialized ahead of time, each used for one run only.

Theory of operation
-------------------
A `WarmPool` keeps up to `size` children that have answered `initialize` and wait, idle, for a
run. Each is spawned exactly as a cold child is (the supervisor hands the pool its own spawn
function: the same environment scrub, cgroup, rlimits through the trampoline, new session,
PR_SET_PDEATHSIG and keeper registration), so a pooled child differs from a cold one only in
when it was started.

Every slot of the pool is a loop in the supervisor's task group: start one child, wait until
it leaves the idle set (a run took it, it died while idle, or it never became ready), start the
next. Each child lives in a task of its own that runs its reader, stderr drain and exit watch,
the handshake, and at the end the dispose ladder, shielded, like every other child. Slots that
keep failing (a child that dies on start) back off instead of spinning.

`acquire()` is synchronous and never waits for a child: it hands out a ready child whose
settings match the run's (the key) and whose environment, built again now, is the one it was
started with, and only if the child is still alive with its wire open; otherwise the run spawns
cold. A child that was handed out is never handed out again: the run disposes it when it ends
and `release()`s it, and its slot has already started a replacement in the background.

Closing the pool (the supervisor does it when it closes, after every run is done) stops the
slots and disposes every idle child through the same ladder; the supervisor's task group waits
for all of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from tether.parent.child import LiveChild
from tether.parent.endpoint import NotificationHandler, RequestHandler
from tether.parent.limits import DisposePolicy
from tether.parent.process import SpawnError
from tether.protocol import ErrorCode, RemoteError

Open = Callable[[RequestHandler, NotificationHandler], LiveChild]
"""Spawn one child with these handlers (raises `SpawnError`)."""
Handshake = Callable[[LiveChild], Awaitable[bool]]
"""Send `initialize`; whether the child is ready for a run."""

BACKOFF_FIRST = 0.05
BACKOFF_MAX = 5.0


class Pooled:
    """One ready child handed to one run. The run binds its handlers, drives the child,
    disposes it, then calls `release()`."""

    def __init__(
        self, child: LiveChild, key: Hashable, env: dict[str, str], left_idle: anyio.Event
    ) -> None:
        self.child = child
        self.key = key
        self.env = env
        self.taken = False
        self.released = anyio.Event()
        self.left_idle = left_idle
        """Set once the child is no longer idle in the pool (taken, dead, or closing)."""
        self.idle_scope = anyio.CancelScope()
        self._on_request: RequestHandler | None = None
        self._on_notification: NotificationHandler | None = None

    def bind(self, on_request: RequestHandler, on_notification: NotificationHandler) -> None:
        self._on_request = on_request
        self._on_notification = on_notification

    def release(self) -> None:
        """The run is done with the child (it has been disposed)."""
        self.released.set()

    async def route_request(self, method: str, params: Any) -> Any:
        if self._on_request is None:
            raise RemoteError(ErrorCode.NOT_INITIALIZED, "no run has started in this child yet")
        return await self._on_request(method, params)

    def route_notification(self, method: str, params: Any) -> None:
        if self._on_notification is not None:
            self._on_notification(method, params)


class WarmPool:
    def __init__(
        self,
        size: int,
        key: Hashable,
        *,
        env: Callable[[], dict[str, str]],
        open: Open,
        handshake: Handshake,
        register: Callable[[LiveChild], None],
        unregister: Callable[[LiveChild], None],
        dispose: DisposePolicy,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one child, got size={size}")
        self.size = size
        self.key = key
        self._env = env
        self._open = open
        self._prepare = prepare
        self._handshake = handshake
        self._register = register
        self._unregister = unregister
        self._dispose = dispose
        self._ready: list[Pooled] = []
        self._closing = False
        self._slots: set[anyio.CancelScope] = set()
        self._idle: set[Pooled] = set()
        self._changed = anyio.Event()
        self._tg: TaskGroup | None = None
        self.last_error: str | None = None
        """Why the last child failed to become ready, if one did."""
        self.handed_out = 0

    # --- public -------------------------------------------------------------------------------

    def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        for _ in range(self.size):
            tg.start_soon(self._slot)

    @property
    def ready_pids(self) -> list[int]:
        return [p.child.pid for p in self._ready]

    def acquire(self, key: Hashable, env: dict[str, str]) -> Pooled | None:
        """A ready child for a run with these settings, or `None` (spawn cold). Never waits."""
        if self._closing or key != self.key:
            return None
        while self._ready:
            entry = self._ready.pop(0)
            child = entry.child
            if child.proc.exited() or child.endpoint.end is not None or entry.env != env:
                # Dead while idle, its wire broken, or started under an environment that is no
                # longer the one a cold spawn would get: never handed out; its task disposes it.
                entry.idle_scope.cancel()
                continue
            entry.taken = True
            entry.idle_scope.cancel()
            entry.left_idle.set()
            self.handed_out += 1
            self._signal()
            return entry
        return None

    async def wait_ready(self, count: int | None = None) -> None:
        """Wait until `count` (default: all) children are ready (callers bound it)."""
        want = self.size if count is None else count
        while len(self._ready) < want:
            await self._changed.wait()

    def close(self) -> None:
        """Stop refilling and dispose every idle child; the task group waits for the rest."""
        self._closing = True
        for scope in list(self._slots):
            scope.cancel()
        for entry in list(self._idle):
            entry.idle_scope.cancel()
        self._ready.clear()
        self._signal()

    # --- slots --------------------------------------------------------------------------------

    def _signal(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _slot(self) -> None:
        failures = 0
        scope = anyio.CancelScope()
        self._slots.add(scope)
        with scope:
            while not self._closing:
                assert self._tg is not None
                entry_box: list[Pooled] = []
                gone = anyio.Event()
                self._tg.start_soon(self._life, entry_box, gone)
                await gone.wait()
                if entry_box and entry_box[0].taken:
                    failures = 0
                    continue
                failures += 1
                if failures > 1:
                    await anyio.sleep(min(BACKOFF_FIRST * 2 ** (failures - 2), BACKOFF_MAX))
        self._slots.discard(scope)

    async def _life(self, box: list[Pooled], gone: anyio.Event) -> None:
        """One pooled child, from spawn to the end of its dispose."""
        try:
            env = self._env()
            holder: list[Pooled] = []

            async def on_request(method: str, params: Any) -> Any:
                return await holder[0].route_request(method, params)

            def on_notification(method: str, params: Any) -> None:
                holder[0].route_notification(method, params)

            try:
                if self._prepare is not None:
                    await self._prepare()  # what `open` needs first (the zygote, started)
                child = self._open(on_request, on_notification)
            except SpawnError as exc:
                self.last_error = str(exc)
                return
            entry = Pooled(child, self.key, env, gone)
            holder.append(entry)
            box.append(entry)
            self._register(child)
            try:
                await self._serve(entry)
            finally:
                self._drop(entry)
                with anyio.CancelScope(shield=True):
                    await child.dispose(self._dispose, polite=False)
                self._unregister(child)
        finally:
            gone.set()

    async def _serve(self, entry: Pooled) -> None:
        child = entry.child
        async with anyio.create_task_group() as tg:
            tg.start_soon(child.read_stdout, tg)
            tg.start_soon(child.drain_stderr)
            tg.start_soon(child.watch_exit)
            ready = False
            self._idle.add(entry)
            try:
                with entry.idle_scope:
                    if self._closing:
                        entry.idle_scope.cancel()
                    ready = await self._handshake(child)
                    if ready:
                        self._ready.append(entry)
                        self._signal()
                        await child.proc.wait()
                        self.last_error = "a pooled child exited while idle"
            finally:
                self._idle.discard(entry)
                self._drop(entry)
            if entry.taken:
                # The run drives, disposes and releases it; until then its jobs keep running.
                await entry.released.wait()
            else:
                if not ready and child.stderr.tail():
                    self.last_error = child.stderr.tail(500)
                await child.dispose(self._dispose, polite=ready and child.endpoint.end is None)
            tg.cancel_scope.cancel()

    def _drop(self, entry: Pooled) -> None:
        if entry in self._ready:
            self._ready.remove(entry)
            self._signal()
