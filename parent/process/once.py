"""Answers a process finds out once per key, by a trial that may take tens of milliseconds:
the host's sandbox (`isolation.probe_host`) and what a layered run gets (`layers.support`).

Whichever threads ask at once, a key is tried once (`_lock`, taken for the trial); an event
loop asks without blocking (`get_off_loop`: the trial in a worker thread, the answer once known
without one); and a trial may be started ahead in a thread of its own (`start_in_thread`, the
lock taken before the thread starts, so every later `get` waits for that trial). A trial that
raises leaves no answer: the next `get` tries again, and raises what it raises.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

K = TypeVar("K")
V = TypeVar("V")


class TriedOnce(Generic[K, V]):
    def __init__(self, trial: Callable[[K], V]) -> None:
        self._trial = trial
        self.answers: dict[K, V] = {}
        """What the trials found, by key (tests set it anew to have the host tried again)."""
        self._lock = threading.Lock()

    def get(self, key: K) -> V:
        """The answer for `key`, tried now (in this thread) if none was found yet."""
        got = self.answers.get(key)
        if got is None:
            with self._lock:
                got = self._answer(key)
        return got

    async def get_off_loop(self, key: K) -> V:
        """`get`, its trial in a worker thread: it then holds up no other task of the loop."""
        got = self.answers.get(key)
        if got is not None:
            return got
        return await anyio.to_thread.run_sync(self.get, key)

    def start_in_thread(self, key: K, name: str) -> None:
        """Start `key`'s trial in a thread of its own (`name`) and return at once; nothing
        when the answer is known."""
        if key in self.answers:
            return
        self._lock.acquire()

        def trial() -> None:
            try:
                with contextlib.suppress(Exception):  # the next `get` tries again, and says why
                    self._answer(key)
            finally:
                self._lock.release()

        try:
            threading.Thread(target=trial, name=name).start()
        except BaseException:
            self._lock.release()
            raise

    def _answer(self, key: K) -> V:
        got = self.answers.get(key)
        if got is None:
            got = self.answers[key] = self._trial(key)
        return got
