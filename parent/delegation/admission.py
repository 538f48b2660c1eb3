"""Admission control: a cap on concurrent sub-agents that queues instead of failing, and a
token budget for the whole tree.

`Gate(limit)` admits up to `limit` holders at once; the rest wait first-in first-out, and each
waiter is told its position whenever it changes (1 = next). A waiter that is cancelled leaves
the queue, and the ones behind it move up. One event loop owns a gate; it needs no lock.

`TreeBudget(total)` counts the tokens of every sub-agent of the tree: runs report their
running figures (`report`, cumulative, so a repeated report never double-counts) and their
final ones (`settle`). A spawn is refused once the budget is spent; stopping a running
sub-agent that passes it is the runner's job, with `exceeded()` to ask.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio


@dataclass(eq=False)
class _Waiter:
    on_position: Callable[[int], None]
    granted: anyio.Event = field(default_factory=anyio.Event)


class Gate:
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
    def __init__(self, total: int | None = None) -> None:
        if total is not None and total < 1:
            raise ValueError(f"a token budget must be at least 1, got {total}")
        self.total = total
        self._settled = 0
        self._live: dict[str, int] = {}

    @property
    def spent(self) -> int:
        return self._settled + sum(self._live.values())

    @property
    def remaining(self) -> int | None:
        return None if self.total is None else max(0, self.total - self.spent)

    def exceeded(self) -> bool:
        """True once the tree has used its whole budget."""
        return self.total is not None and self.spent >= self.total

    def report(self, run: str, tokens_so_far: int) -> None:
        """A running sub-agent's cumulative count so far."""
        self._live[run] = max(tokens_so_far, self._live.get(run, 0))

    def settle(self, run: str, tokens: int) -> None:
        """A finished sub-agent's final count; replaces what it reported while running."""
        self._live.pop(run, None)
        self._settled += tokens
