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
next. Each child lives in a task of its own that holds the child's context (its reader, stderr
drain and exit watch, and on leaving, the dispose ladder, shielded, like every other child) and
does the handshake. Slots that keep failing (a child that dies on start) back off instead of
spinning.

`acquire()` is synchronous and never waits for a child: it hands out a ready child whose
settings match the run's (the key) and whose environment, built again now, is the one it was
started with, and only if the child is still alive with its wire open; otherwise the run spawns
cold. A child that was handed out is never handed out again: the run drives it and `finish()`es
it, its task's context disposes of it, and its slot has already started a replacement in the
background.

Closing the pool (the supervisor does it when it closes, after every run is done) stops the
slots and disposes every idle child through the same ladder; the supervisor's task group waits
for all of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable

import anyio
from anyio.abc import TaskGroup

from tether.parent.process.proc import SpawnError
from tether.parent.process.supervised import SupervisedChild

Open = Callable[[], Awaitable[SupervisedChild]]
"""Spawn one child (raises `SpawnError`)."""
Handshake = Callable[[SupervisedChild], Awaitable[bool]]
"""Send `initialize`; whether the child is ready for a run."""

BACKOFF_FIRST = 0.05
BACKOFF_MAX = 5.0


class Pooled:
    """One ready child handed to one run. The run binds its handlers, drives the child, and
    calls `finish()`, which returns once the pool's task has disposed of it."""

    def __init__(
        self, child: SupervisedChild, key: Hashable, env: dict[str, str], left_idle: anyio.Event
    ) -> None:
        self.child = child
        self.key = key
        self.env = env
        self.taken = False
        self.left_idle = left_idle
        """Set once the child is no longer idle in the pool (taken, dead, or closing)."""
        self.idle_scope = anyio.CancelScope()
        self.finished = anyio.Event()
        self.disposed = anyio.Event()

    async def finish(self) -> None:
        """The run is done with the child: let its context end (which disposes it) and wait
        until it has."""
        self.finished.set()
        await self.disposed.wait()


class WarmPool:
    def __init__(
        self,
        size: int,
        key: Hashable,
        *,
        env: Callable[[], dict[str, str]],
        open: Open,
        handshake: Handshake,
        register: Callable[[SupervisedChild], None],
        unregister: Callable[[SupervisedChild], None],
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
        """One pooled child, from spawn to the end of its dispose (its context's exit)."""
        try:
            env = self._env()
            try:
                if self._prepare is not None:
                    await self._prepare()  # what `open` needs first (the zygote, started)
                child = await self._open()
            except SpawnError as exc:
                self.last_error = str(exc)
                return
            entry = Pooled(child, self.key, env, gone)
            box.append(entry)
            self._register(child)
            try:
                async with child:
                    await self._serve(entry)
            finally:
                self._drop(entry)
                self._unregister(child)
                entry.disposed.set()
        finally:
            gone.set()

    async def _serve(self, entry: Pooled) -> None:
        child = entry.child
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
            # The run drives it and says when it is done; then the context disposes of it.
            await entry.finished.wait()
        elif not ready and child.stderr.tail():
            self.last_error = child.stderr.tail(500)

    def _drop(self, entry: Pooled) -> None:
        if entry in self._ready:
            self._ready.remove(entry)
            self._signal()
