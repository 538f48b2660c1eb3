"""The blocking SQLite layer: connections, pragmas, short transactions, retries on a busy lock.

Theory of operation
-------------------
`Database` is thread-safe and blocking; the async store calls it from worker threads
(`anyio.to_thread`, under its own capacity limiter). It keeps a pool of connections, each
opened with `check_same_thread=False` and used by one thread at a time (a connection is checked
out for one call), so readers run in parallel; WAL lets them read while a writer commits.

Writes go through `write(fn)`: `BEGIN IMMEDIATE` (take the database's write lock up front, so a
transaction never has to upgrade from read to write and hit SQLITE_BUSY_SNAPSHOT, which no busy
handler can wait out), `fn(conn)`, `COMMIT`; any exception rolls back. Within this process the
writers queue on a `threading.Lock` first, so they never spin in SQLite's busy handler against
one another; across processes SQLite's lock and `busy_timeout` arbitrate, and a transaction that
still meets a busy or locked database (a long checkpoint, WAL recovery after a crash) is retried
whole a few times with jittered backoff before `StoreBusy` is raised.

Durability: `journal_mode=WAL` with `synchronous=FULL` (the default here). A transaction is in
the WAL file, through `write(2)`, before COMMIT returns under any `synchronous` setting, so a
process killed afterwards (SIGKILL included) loses nothing: the next opener recovers from the
WAL. What FULL adds is an fsync of the WAL at every commit, so a commit also survives an OS
crash or a power cut; under NORMAL the WAL is synced only at checkpoints, and after a power
loss the last commits may roll back (the database stays consistent either way). A commit here
is a model turn, a report, a heartbeat or a lease change — seconds apart — so the fsync costs
nothing that matters (scripts/bench-sessions measures it); `synchronous="normal"` is available
for callers that prefer speed to power-loss durability.

Trouble with the storage (a full disk, a read-only mount, a damaged file) is raised as the
store's own exception (`diagnose.py`: `StoreFull`, `StoreReadOnly`, `StoreCorrupt`,
`StoreUnavailable`), one line naming the file and what to do, never as `sqlite3.Error`. The
transaction that met it was rolled back whole (SQLite's atomic commit), so what was stored
before it is intact; a connection that could not even roll back is closed, never reused.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

from tether.parent.agents.sessions.diagnose import sqlite_failure
from tether.parent.agents.sessions.errors import StoreBusy, StoreUnavailable
from tether.parent.agents.sessions.schema import (
    MIGRATIONS,
    Migration,
    check_order,
    migrate_step,
    too_new,
    user_version,
)

T = TypeVar("T")
Synchronous = Literal["full", "normal"]

_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_JOURNAL_SIZE_LIMIT = 64 << 20
"""After a checkpoint the WAL file is truncated back to this size, so one large transcript write
does not leave a large file behind."""


def is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY_CODES
    text = str(exc)
    return "locked" in text or "busy" in text


class Database:
    """A thread-safe handle on one session database file (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        synchronous: Synchronous = "full",
        busy_timeout: float = 10.0,
        retries: int = 4,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise ValueError(f"synchronous must be 'full' or 'normal', got {synchronous!r}")
        check_order(migrations)
        self.path = path
        self.synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._retries = retries
        self._pool_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._closed = False
        try:
            self._migrate(migrations)
        except BaseException:
            self.close()
            raise

    # -- connections --------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # one thread at a time, handed over through the pool
            cached_statements=64,
        )
        try:
            conn.row_factory = sqlite3.Row
            mode = self._retrying(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            if str(mode).lower() != "wal":
                raise StoreUnavailable(
                    f"{self.path}: SQLite refused WAL mode (journal_mode is {mode!r}); the state "
                    "directory must be on a local, writable filesystem"
                )
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA journal_size_limit={_JOURNAL_SIZE_LIMIT}")
        except BaseException:
            _close(conn)
            raise
        return conn

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._pool_lock:
            if self._closed:
                raise StoreUnavailable("the session store is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
            with self._pool_lock:
                self._all.append(conn)
        try:
            yield conn
        finally:
            # A connection still in a transaction could not roll back (its file went away
            # under it, say): it is closed, never handed to the next caller half-done.
            broken = conn.in_transaction
            with self._pool_lock:
                if self._closed or broken:
                    _close(conn)
                    if broken and conn in self._all:
                        self._all.remove(conn)
                else:
                    self._idle.append(conn)

    @contextmanager
    def _storage(self) -> Iterator[None]:
        """SQLite's errors about the storage raised as the store's own (see the module
        docstring); any other goes on as itself."""
        try:
            yield
        except sqlite3.Error as exc:
            failure = sqlite_failure(exc, self.path)
            if failure is None:
                raise
            raise failure from None

    def close(self) -> None:
        """Close every connection not in use (one in use is closed when it comes back)."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)

    # -- transactions -------------------------------------------------------------------------

    def _retrying(self, op: Callable[[], T]) -> T:
        delay = 0.01
        for attempt in range(self._retries + 1):
            try:
                return op()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                if attempt == self._retries:
                    raise StoreBusy(
                        f"{self.path} stayed locked by other processes through "
                        f"{self._retries + 1} tries of {self._busy_timeout:g} s each: {exc}"
                    ) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in one write transaction; committed before this returns."""
        with self._storage(), self._write_lock, self._connection() as conn:

            def attempt() -> T:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    _roll_back(conn)
                    raise
                return result

            return self._retrying(attempt)

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in one read transaction: one consistent snapshot for all its queries."""
        with self._storage(), self._connection() as conn:

            def attempt() -> T:
                conn.execute("BEGIN")
                try:
                    result = fn(conn)
                except BaseException:
                    _roll_back(conn)
                    raise
                conn.execute("COMMIT")
                return result

            return self._retrying(attempt)

    # -- schema -------------------------------------------------------------------------------

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        # Look at the version before any of our pragmas can touch a newer tether's database.
        with self._storage():
            probe = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
            try:
                found = self._retrying(lambda: user_version(probe))
            finally:
                probe.close()
        if found > len(migrations):
            raise too_new(found, len(migrations))
        # Up to date: opening takes no write lock. Otherwise each step re-reads the version
        # under the write lock, so racing openers apply every step once.
        while found < len(migrations) and self.write(lambda c: migrate_step(c, migrations)):
            pass

    def version(self) -> int:
        return self.read(user_version)


def _roll_back(conn: sqlite3.Connection) -> None:
    """Roll back what is open, if SQLite has not already (it does itself on a full disk). A
    rollback that fails leaves the connection in its transaction: it is closed, not reused."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _close(conn: sqlite3.Connection) -> None:
    """Close a connection; one that fails to (its last checkpoint met a full disk, say) is
    gone anyway, and the WAL keeps what it committed."""
    try:
        conn.close()
    except sqlite3.Error:
        pass
