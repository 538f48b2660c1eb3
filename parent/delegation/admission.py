"""Admission control: a cap on concurrent sub-agents that queues instead of failing, and a
token budget for the whole tree.

`Slots(limit)` admits up to `limit` holders at once; the rest wait first-in first-out, and each
waiter is told its position whenever it changes (1 = next). A waiter that is cancelled leaves
the queue, and the ones behind it move up. One event loop owns a gate; it needs no lock.

`TreeBudget(total)` is the token budget of the whole tree: a `run.budget.Budget` (`pool`)
that every run of the tree — the orchestrator and each sub-agent — reserves its model turns
against, so turns sent together cannot pass it and it holds while runs go on. A runner that
runs its sub-agents without the parent's broker reports their usage instead (`report`,
cumulative, so a repeated report never double-counts; `settle`). A job is refused once the
budget is spent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio

from tether.parent.run.budget import Budget


@dataclass(eq=False)
class _Waiter:
    on_position: Callable[[int], None]
    granted: anyio.Event = field(default_factory=anyio.Event)


class Slots:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self.holders = 0
        self._queue: list[_Waiter] = []

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @contextlib.asynccontextmanager
    async def admitted(self, on_position: Callable[[int], None]) -> AsyncIterator[None]:
        """Hold one place for the body; while the gate is full, wait in line and report the
        position through `on_position` (not called at all when admitted at once)."""
        if self.holders < self.limit and not self._queue:
            self.holders += 1
        else:
            waiter = _Waiter(on_position)
            self._queue.append(waiter)
            _tell(waiter, len(self._queue))
            try:
                await waiter.granted.wait()
            except BaseException:
                if waiter.granted.is_set():
                    self._release()  # granted and cancelled at once: pass the place on
                else:
                    self._queue.remove(waiter)
                    self._renumber()
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self.holders -= 1
        if self._queue and self.holders < self.limit:
            head = self._queue.pop(0)
            self.holders += 1
            head.granted.set()
            self._renumber()

    def _renumber(self) -> None:
        for i, waiter in enumerate(self._queue, 1):
            _tell(waiter, i)


def _tell(waiter: _Waiter, position: int) -> None:
    try:
        waiter.on_position(position)
    except Exception:  # a listener's bug must not break admission
        pass


class TreeBudget:
    """The token budget of a whole delegation tree: a `run.budget.Budget` every run of the tree
    reserves its model turns against (`pool`, `None` without a total), so the brokers count it
    as the runs go; runners without a broker of the parent's report usage instead (`report`,
    `settle`), which is counted into the same pool."""

    LABEL = "the token budget of the whole delegation tree"

    def __init__(self, total: int | None = None) -> None:
        if total is not None and total < 1:
            raise ValueError(f"a token budget must be at least 1, got {total}")
        self.total = total
        self.pool = Budget(total, "tokens", self.LABEL) if total is not None else None
        self._unmetered = 0
        self._live: dict[str, int] = {}

    @property
    def spent(self) -> int:
        """Tokens counted so far: settled turns, and what runners without a broker reported."""
        return self.pool.settled if self.pool is not None else self._unmetered

    @property
    def remaining(self) -> int | None:
        return None if self.pool is None else self.pool.remaining

    def exceeded(self) -> bool:
        """True once the tree has used its whole budget."""
        return self.pool is not None and self.pool.spent

    def report(self, run: str, tokens_so_far: int) -> None:
        """A running sub-agent's cumulative count so far, from a runner the parent's brokers do
        not meter (counted once: a repeated report adds only what is new)."""
        seen = self._live.get(run, 0)
        if tokens_so_far > seen:
            self._live[run] = tokens_so_far
            self._count(tokens_so_far - seen)

    def settle(self, run: str, tokens: int, *, metered: bool) -> None:
        """A finished sub-agent's final count; `metered`: its turns were reserved against the
        pool by the parent's broker (already counted)."""
        seen = self._live.pop(run, 0)
        if not metered and tokens > seen:
            self._count(tokens - seen)

    def _count(self, tokens: int) -> None:
        self._unmetered += tokens
        if self.pool is not None:
            self.pool.count(tokens)
