"""The durable session store: agents, transcripts, reports, and one activation at a time.

Theory of operation
-------------------
`SessionStore` is an async context manager over one SQLite database (`db.Database`, blocking)
in the state directory. Every call runs the blocking work in a worker thread under the store's
own capacity limiter (as many threads as pooled connections), so the event loop never waits on
SQLite and the store cannot starve anyone else's threads. Each call is one short transaction,
committed before the call returns; a cancelled caller still waits for its transaction to finish
(the thread is never abandoned), so a call either happened whole or not at all.

An *activation* is the right to run an agent: at most one live child per session, across tasks
and across processes. `acquire(agent_id)` answers an `Activation`, or `Busy` (who holds it and
since when), or `Unavailable` (no such agent, or closed). Two layers make it exclusive:

- in this process, a one-slot semaphore per agent id, held for the whole activation: a second
  acquirer of the same agent queues behind the first (FIFO) or, without `wait`, is told at
  once; different agents never share a slot, so they activate in parallel;
- across processes, a lease row in the database (owner pid, its start time, boot id, pid
  namespace, a heartbeat and a random token), taken in a `BEGIN IMMEDIATE` transaction. A lease
  whose holder is dead, or whose heartbeat is older than `LeasePolicy.stale_after`, is taken
  over (see `lease.judge`).

While an activation lives, a heartbeat task in the store's task group refreshes its lease every
`heartbeat_every` seconds. Every write an activation makes checks its token in the same
transaction, so an activation whose lease was taken over cannot write again: its next write or
heartbeat raises `LeaseLost`, `activation.lost` is set, and if the activation is being used as a
context manager its body is cancelled and `LeaseLost` raised at the end of the `async with`.

`release()` is idempotent, and releases only what this activation's token still holds. Closing
the store releases every activation still live (their sessions become `interrupted` if they
were `running`), shielded and bounded.

Trouble with the storage (`diagnose.py`) is the caller's exception wherever a caller waits for
the write. Where none does — a heartbeat, a release while the store closes — it is told to
`on_trouble(agent_id, message)` and the store goes on: a lease that cannot be renewed or
released is left to go stale, which is what it is for. Nothing the disk does escapes
`async with SessionStore`.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import anyio
import anyio.abc

from tether.parent.agents.sessions import queries
from tether.parent.agents.sessions.db import Database, Synchronous
from tether.parent.agents.sessions.errors import LeaseLost, SessionError, StoreUnavailable
from tether.parent.agents.sessions.ids import new_agent_id, parse_agent_id
from tether.parent.agents.sessions.paths import prepare_database, resolve_state_dir
from tether.parent.agents.sessions.records import (
    AgentDetail,
    AgentStatus,
    AgentSummary,
    Busy,
    Holder,
    ReportEntry,
    SettledStatus,
    SpawnSettings,
    StoreBounds,
    TakenOver,
    Unavailable,
)
from tether.parent.agents.sessions.schema import MIGRATIONS, Migration
from tether.protocol.messages import AgentDefinition, ChatMessage, Usage

T = TypeVar("T")
log = logging.getLogger("tether.parent.agents.sessions")
TroubleHook = Callable[[str, str], None]
"""Told `(agent_id, message)` of a store write nobody waited for that failed (a heartbeat, a
release on close)."""

_live_tokens: set[str] = set()
"""The lease tokens of every live activation of this process, whichever store holds it: a lease
of this process with another token is an orphan (`lease.judge`)."""

RELEASE_GRACE = 30.0
"""At most this long to release one activation on close (a locked database is retried)."""


@dataclass(frozen=True)
class LeasePolicy:
    stale_after: float = 60.0
    """A lease whose heartbeat is older than this is taken over, even if its holder lives."""
    heartbeat_every: float | None = None
    """How often a live activation refreshes its lease; `None`: a quarter of `stale_after`."""
    poll_min: float = 0.02
    poll_max: float = 0.5
    """Backoff bounds while waiting for a lease held by another process."""

    def __post_init__(self) -> None:
        if not self.stale_after > 0:
            raise ValueError("LeasePolicy.stale_after must be positive")
        if not 0 < self.interval < self.stale_after:
            raise ValueError("LeasePolicy.heartbeat_every must be positive and below stale_after")

    @property
    def interval(self) -> float:
        return self.heartbeat_every if self.heartbeat_every is not None else self.stale_after / 4


@dataclass
class _Slot:
    """One agent's in-process exclusion: held for the whole activation."""

    semaphore: anyio.Semaphore
    users: int = 0
    taken_at: float = 0.0


class Activation:
    """The right to run one agent, held until `release()` (or the end of `async with`)."""

    def __init__(
        self,
        store: SessionStore,
        agent_id: str,
        token: str,
        *,
        acquired_at: float,
        took_over: TakenOver | None,
    ) -> None:
        self._store = store
        self.agent_id = agent_id
        self.token = token
        self.acquired_at = acquired_at
        """Wall-clock time the lease was taken."""
        self.took_over = took_over
        """Whose stale or dead lease this one replaced, if any."""
        self.lost = anyio.Event()
        """Set when the lease turned out to be taken over (a heartbeat or write said so)."""
        self.lost_reason = ""
        self.released = False
        self._beat_scope = anyio.CancelScope()
        self._body: anyio.CancelScope | None = None
        self.last_heartbeat = anyio.current_time()
        _live_tokens.add(token)

    # -- writes --------------------------------------------------------------------------------

    async def append(self, messages: Sequence[ChatMessage], usage: Usage | None = None) -> int:
        """Append a turn (one or more messages) and its usage; the transcript's new length.

        Committed before this returns. `TranscriptFull` if it would pass the bound (nothing is
        stored); `LeaseLost` if this activation no longer holds the lease.
        """
        return await self._append_or_replace(queries.append, messages, usage)

    async def splice(
        self, keep: int, messages: Sequence[ChatMessage], usage: Usage | None = None
    ) -> int:
        """Keep the first `keep` stored messages and replace the rest with `messages` (the
        child's transcript diverged from the stored one there: it compacted, or rewrote a
        message the parent had written for it); the transcript's new length."""
        return await self._append_or_replace(
            partial(queries.splice, keep=max(0, keep)), messages, usage
        )

    async def replace_transcript(
        self, messages: Sequence[ChatMessage], usage: Usage | None = None
    ) -> int:
        """Replace the stored transcript whole (the child compacted its own)."""
        return await self._append_or_replace(queries.replace_transcript, messages, usage)

    async def report(self, text: str) -> ReportEntry:
        """Store an interim finding (from the child's `report` tool)."""
        return await self._write(
            partial(
                queries.add_report,
                agent_id=self.agent_id,
                token=self.token,
                text=text,
                bounds=self._store.bounds,
            )
        )

    async def settle(
        self,
        status: SettledStatus,
        summary: str = "",
        question: str | None = None,
        *,
        messages: Sequence[ChatMessage] = (),
        usage: Usage | None = None,
    ) -> None:
        """A run answered: its status (`needs_input` with the question it asks), its summary;
        with `messages` and `usage` appended in the same transaction (the results that close
        the last turn's calls, the usage no turn carried). The activation itself goes on (a warm
        child idling for its keep-alive)."""
        settle = partial(
            queries.settle,
            agent_id=self.agent_id,
            token=self.token,
            status=status,
            summary=summary,
            question=question,
            bounds=self._store.bounds,
        )
        await self._append_then(settle, messages, usage)

    async def mark_running(self, messages: Sequence[ChatMessage] = ()) -> None:
        """A new message for this (warm) activation: the session is `running` again, with
        `messages` (the user's message) appended in the same transaction."""
        running = partial(queries.mark_running, agent_id=self.agent_id, token=self.token)
        await self._append_then(running, messages, None)

    async def _append_then(
        self,
        then: Callable[[sqlite3.Connection], None],
        messages: Sequence[ChatMessage],
        usage: Usage | None,
    ) -> None:
        """Append `messages` and `usage` (if any), then `then`, in one transaction."""
        store, copied = self._store, list(messages)

        def run() -> None:
            bodies = [queries.encode_message(m, store.bounds.message_bytes) for m in copied]

            def both(conn: sqlite3.Connection) -> None:
                if bodies or (usage is not None and usage != Usage()):
                    queries.append(
                        conn,
                        self.agent_id,
                        token=self.token,
                        bodies=bodies,
                        usage=usage or Usage(),
                        bounds=store.bounds,
                    )
                then(conn)

            store._db.write(both)

        await self._guarded(run)

    async def heartbeat(self) -> None:
        await self._write(partial(queries.heartbeat, agent_id=self.agent_id, token=self.token))
        self.last_heartbeat = anyio.current_time()

    async def _append_or_replace(
        self,
        query: Callable[..., int],
        messages: Sequence[ChatMessage],
        usage: Usage | None,
    ) -> int:
        store, copied = self._store, list(messages)

        def run() -> int:
            # Encoding (and cutting) happens in the worker thread but before the transaction,
            # so the database's write lock is held only for the inserts.
            bodies = [queries.encode_message(m, store.bounds.message_bytes) for m in copied]
            return store._db.write(
                partial(
                    query,
                    agent_id=self.agent_id,
                    token=self.token,
                    bodies=bodies,
                    usage=usage or Usage(),
                    bounds=store.bounds,
                )
            )

        return await self._guarded(run)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._store._db
        return await self._guarded(lambda: db.write(fn))

    async def _guarded(self, run: Callable[[], T]) -> T:
        """`run` in a worker thread, unless released; a `LeaseLost` marks the activation lost."""
        if self.released:
            raise LeaseLost(f"agent {self.agent_id}: this activation was released")
        try:
            return await self._store._in_thread(run)
        except LeaseLost as exc:
            self._mark_lost(str(exc))
            raise

    def _mark_lost(self, reason: str) -> None:
        if not self.lost.is_set() and not self.released:
            log.warning("%s", reason)
            self.lost_reason = reason
            self.lost.set()
            self._beat_scope.cancel()
            if self._body is not None:
                self._body.cancel()

    # -- the end -------------------------------------------------------------------------------

    async def release(self, status: AgentStatus | None = None) -> bool:
        """Give the activation up. The session takes `status` if given (a `running` one becomes
        `interrupted`). Idempotent; returns whether this call released the lease (`False` if it
        was already released or taken over). Shielded: a cancelled caller still releases."""
        if self.released:
            return False
        self.released = True
        self._beat_scope.cancel()
        released = False
        with anyio.CancelScope(shield=True):
            try:
                released = await self._store._write(
                    partial(
                        queries.release, agent_id=self.agent_id, token=self.token, status=status
                    )
                )
            finally:
                _live_tokens.discard(self.token)
                self._store._forget(self)
        return released

    async def __aenter__(self) -> Activation:
        self._body = anyio.CancelScope()
        self._body.__enter__()
        if self.lost.is_set():
            self._body.cancel()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._body is not None
        try:
            swallowed = bool(self._body.__exit__(exc_type, exc, tb))
        finally:
            self._body = None
            with anyio.move_on_after(RELEASE_GRACE, shield=True):
                await self.release()
        if self.lost.is_set() and (exc_type is None or swallowed):
            raise LeaseLost(self.lost_reason)
        return swallowed


class SessionStore:
    """See the module docstring. Use as `async with SessionStore(state_dir) as store:`."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        synchronous: Synchronous = "full",
        bounds: StoreBounds | None = None,
        lease: LeasePolicy | None = None,
        connections: int = 4,
        busy_timeout: float = 10.0,
        migrations: Sequence[Migration] = MIGRATIONS,
        on_trouble: TroubleHook | None = None,
    ) -> None:
        """`on_trouble`: see the module docstring (default: logged only)."""
        if connections < 1:
            raise ValueError("connections must be at least 1")
        self.state_dir = resolve_state_dir(state_dir)
        self.bounds = bounds or StoreBounds()
        self.lease = lease or LeasePolicy()
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._migrations = tuple(migrations)
        self._limiter = anyio.CapacityLimiter(connections)
        self._db_handle: Database | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._slots: dict[str, _Slot] = {}
        self._active: dict[str, Activation] = {}
        self._on_trouble = on_trouble

    def _trouble(self, agent_id: str, message: str) -> None:
        log.warning("agent %s: %s", agent_id, message)
        if self._on_trouble is not None:
            try:
                self._on_trouble(agent_id, message)
            except Exception:  # a listener's bug must not break the store
                log.exception("the session store's trouble hook failed")

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def _db(self) -> Database:
        if self._db_handle is None:
            raise StoreUnavailable("the session store is not open (use `async with`)")
        return self._db_handle

    async def _in_thread(self, run: Callable[[], T]) -> T:
        """`run` in a worker thread under the store's limiter. Never abandoned: a cancelled
        caller waits for it, so a transaction it started is finished, not left half-known."""
        return await anyio.to_thread.run_sync(run, limiter=self._limiter)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` in one write transaction; committed when this returns."""
        db = self._db
        return await self._in_thread(lambda: db.write(fn))

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._db
        return await self._in_thread(lambda: db.read(fn))

    # -- lifetime ------------------------------------------------------------------------------

    async def __aenter__(self) -> SessionStore:
        def open_db() -> Database:
            path = prepare_database(self.state_dir)
            return Database(
                path,
                synchronous=self._synchronous,
                busy_timeout=self._busy_timeout,
                migrations=self._migrations,
            )

        self._db_handle = await anyio.to_thread.run_sync(open_db, limiter=self._limiter)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            with anyio.CancelScope(shield=True):
                for activation in list(self._active.values()):
                    with anyio.move_on_after(RELEASE_GRACE):
                        try:
                            await activation.release()
                        except SessionError as exc:
                            self._trouble(
                                activation.agent_id,
                                f"its lease could not be released (it goes stale): {exc}",
                            )
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
            # Only heartbeat loops run in this group, and they never raise: whatever the body
            # raised goes on as it is, not wrapped in an exception group.
            await self._tg.__aexit__(None, None, None)
            return None
        finally:
            self._tg = None
            db, self._db_handle = self._db_handle, None
            if db is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(db.close)

    # -- agents --------------------------------------------------------------------------------

    async def create_agent(
        self,
        definition: AgentDefinition,
        *,
        provider: str = "spawn",
        label: str = "",
        workspace: str = "",
        parent_run: str | None = None,
        spawn: SpawnSettings | None = None,
    ) -> AgentSummary:
        """A new durable session, `idle` and not yet activated, with a fresh id; `spawn`: how
        to start its child again (stored for a cold resume in any process)."""

        def create(conn: sqlite3.Connection) -> AgentSummary:
            for _ in range(8):
                agent_id = new_agent_id()
                try:
                    queries.insert_agent(
                        conn,
                        agent_id=agent_id,
                        definition=definition,
                        provider=provider,
                        label=label,
                        workspace=workspace,
                        parent_run=parent_run,
                        bounds=self.bounds,
                        spawn=spawn,
                    )
                except sqlite3.IntegrityError:
                    continue  # 80 random bits collided: astronomically rare, but cheap to handle
                summary = queries.select_summary(conn, agent_id, stale_after=self.lease.stale_after)
                assert summary is not None
                return summary
            raise RuntimeError("could not mint an unused agent id in 8 tries")

        return await self._write(create)

    async def get(self, agent_id: str) -> AgentSummary | None:
        """One agent's summary, `None` if there is no such agent. `BadAgentId` if `agent_id` is
        not an id at all (model-supplied ids are checked here before any query)."""
        agent_id = parse_agent_id(agent_id)
        return await self._read(
            partial(queries.select_summary, agent_id=agent_id, stale_after=self.lease.stale_after),
        )

    async def list_agents(
        self,
        *,
        status: AgentStatus | Sequence[AgentStatus] | None = None,
        parent_run: str | None = None,
        limit: int = 200,
    ) -> list[AgentSummary]:
        """Agents, most recently updated first, optionally only those in `status` (the status a
        reader acts on, so `interrupted` finds dead holders) or created by `parent_run`."""
        statuses = [status] if isinstance(status, str) else status
        return await self._read(
            partial(
                queries.select_summaries,
                statuses=statuses,
                parent_run=parent_run,
                limit=max(0, limit),
                stale_after=self.lease.stale_after,
            ),
        )

    async def show(self, agent_id: str, *, tail: int | None = None) -> AgentDetail | None:
        """One agent in full: definition, transcript (its last `tail` messages), reports."""
        agent_id = parse_agent_id(agent_id)
        return await self._read(
            partial(
                queries.select_detail,
                agent_id=agent_id,
                tail=tail,
                stale_after=self.lease.stale_after,
            ),
        )

    async def spawn_settings(self, agent_id: str) -> SpawnSettings | None:
        """How to start the agent's child again, if it was stored (`None` also for an agent
        created by a version of tether that did not store it)."""
        agent_id = parse_agent_id(agent_id)
        return await self._read(partial(queries.select_spawn, agent_id=agent_id))

    async def transcript(self, agent_id: str) -> list[ChatMessage]:
        """The stored transcript, in order: what a cold resume replays."""
        agent_id = parse_agent_id(agent_id)
        messages, _ = await self._read(partial(queries.select_transcript, agent_id=agent_id))
        return messages

    async def close_agent(self, agent_id: str) -> AgentSummary | Busy | Unavailable:
        """Close a session nobody is running; it stays listed and cannot be activated again."""
        agent_id = parse_agent_id(agent_id)
        if agent_id in self._active:
            return await self._busy_here(agent_id)
        return await self._write(
            partial(queries.close_agent, agent_id=agent_id, stale_after=self.lease.stale_after),
        )

    # -- activations ---------------------------------------------------------------------------

    async def acquire(self, agent_id: str, *, wait: float = 0.0) -> Activation | Busy | Unavailable:
        """Take the agent's activation, waiting up to `wait` seconds for a holder to let go.

        `BadAgentId` if `agent_id` is not an id. See the module docstring for the rules.
        """
        agent_id = parse_agent_id(agent_id)
        deadline = anyio.current_time() + max(0.0, wait)
        slot = self._slots.get(agent_id)
        if slot is None:
            slot = self._slots[agent_id] = _Slot(anyio.Semaphore(1))
        slot.users += 1
        holding = handed_over = False
        try:
            if wait <= 0:
                try:
                    slot.semaphore.acquire_nowait()
                    holding = True
                except anyio.WouldBlock:
                    return await self._busy_here(agent_id)
            else:
                with anyio.move_on_after(wait):
                    await slot.semaphore.acquire()
                    holding = True
                if not holding:
                    return await self._busy_here(agent_id)
            slot.taken_at = anyio.current_time()
            delay = self.lease.poll_min
            while True:
                token = secrets.token_hex(16)
                outcome = await self._write(
                    partial(
                        queries.acquire,
                        agent_id=agent_id,
                        token=token,
                        stale_after=self.lease.stale_after,
                        live_here=frozenset(_live_tokens),
                    ),
                )
                if isinstance(outcome, queries.Granted):
                    # No checkpoint from here to the return: the activation is registered (and
                    # so released by close) before a cancellation can reach the caller.
                    activation = Activation(
                        self,
                        agent_id,
                        token,
                        acquired_at=outcome.acquired_at,
                        took_over=outcome.took_over,
                    )
                    self._active[agent_id] = activation
                    assert self._tg is not None
                    self._tg.start_soon(self._beat, activation, name=f"heartbeat {agent_id}")
                    handed_over = True
                    return activation
                left = deadline - anyio.current_time()
                if isinstance(outcome, Unavailable) or left <= 0:
                    return outcome
                await anyio.sleep(min(left, delay * (0.5 + secrets.randbelow(1000) / 1000)))
                delay = min(delay * 2, self.lease.poll_max)
        finally:
            if not handed_over:
                if holding:
                    slot.semaphore.release()
                self._unref(agent_id, slot)

    async def _busy_here(self, agent_id: str) -> Busy:
        """Busy, because another task of this process holds (or is taking) the activation."""
        activation = self._active.get(agent_id)
        now = anyio.current_time()
        if activation is not None and not activation.lost.is_set():
            since, age = activation.acquired_at, now - activation.last_heartbeat
        else:
            # Another task here is still acquiring it, perhaps waiting for another process to
            # let go, or still letting go of an activation whose lease another process took:
            # name that process if it holds the lease.
            summary = await self._read(
                partial(
                    queries.select_summary, agent_id=agent_id, stale_after=self.lease.stale_after
                )
            )
            if summary is not None and summary.holder is not None:
                return Busy(agent_id=agent_id, holder=summary.holder)
            slot = self._slots.get(agent_id)
            since = time.time() - (now - slot.taken_at if slot else 0.0)
            age = 0.0
        holder = Holder(pid=os.getpid(), since=since, heartbeat_age=max(0.0, age), state="alive")
        return Busy(agent_id=agent_id, holder=holder)

    def _unref(self, agent_id: str, slot: _Slot) -> None:
        slot.users -= 1
        if slot.users == 0 and self._slots.get(agent_id) is slot:
            del self._slots[agent_id]

    def _forget(self, activation: Activation) -> None:
        """Called once, when `activation` is released: free its slot for the next in line."""
        if self._active.get(activation.agent_id) is activation:
            del self._active[activation.agent_id]
        slot = self._slots.get(activation.agent_id)
        if slot is not None:
            slot.semaphore.release()
            self._unref(activation.agent_id, slot)

    async def _beat(self, activation: Activation) -> None:
        with activation._beat_scope:
            while True:
                await anyio.sleep(self.lease.interval)
                try:
                    await activation.heartbeat()
                except LeaseLost:
                    return  # marked lost by the write itself
                except SessionError as exc:
                    # A missed heartbeat (a full disk, a database locked past every retry) is
                    # not the end of the activation: the next one may land, and the bound
                    # allows for a few. Whoever runs the agent is told.
                    self._trouble(activation.agent_id, f"its lease could not be renewed: {exc}")
                except Exception as exc:  # a bug: logged whole, and the loop goes on
                    log.exception("agent %s: heartbeat failed", activation.agent_id)
                    self._trouble(activation.agent_id, f"its lease could not be renewed: {exc!r}")
