"""Opening a second store on the same database in one process must not drop the first one's
locks. POSIX record locks belong to the process, and closing any descriptor of a file releases
all of them; SQLite guards its own descriptors against this, so the store must never open and
close the database or its -wal/-shm files behind SQLite's back."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import anyio

from tether.parent.agents.sessions import DB_NAME, SessionStore
from tether.parent.agents.sessions.db import Database
from tether.parent.agents.sessions.paths import prepare_database

TRY_WRITE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
try:
    conn.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError as exc:
    print("locked" if "locked" in str(exc) else f"error {exc}")
else:
    print("got the write lock")
    conn.execute("ROLLBACK")
"""


def _other_process_tries_to_write(db: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", TRY_WRITE, str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


def test_a_second_store_opened_in_this_process_keeps_the_first_ones_write_lock(
    state: Path,
) -> None:
    db = Database(prepare_database(state))
    holding = threading.Event()
    done = threading.Event()

    def hold_the_write_lock(conn: sqlite3.Connection) -> None:
        holding.set()
        assert done.wait(60)

    writer = threading.Thread(target=db.write, args=(hold_the_write_lock,))
    writer.start()
    try:
        assert holding.wait(60)
        assert _other_process_tries_to_write(state / DB_NAME) == "locked"

        async def open_another() -> None:
            async with SessionStore(state) as store:
                await store.list_agents()

        anyio.run(open_another)
        # Still ours: the second store's opening did not release this process's locks.
        assert _other_process_tries_to_write(state / DB_NAME) == "locked"
    finally:
        done.set()
        writer.join(60)
        db.close()
