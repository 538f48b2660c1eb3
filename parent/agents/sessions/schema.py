"""The database schema: an ordered list of migrations, the version in `PRAGMA user_version`.

Migration N takes a database from version N-1 to N. Each runs in its own `BEGIN IMMEDIATE`
transaction together with the `user_version` bump (the version lives in the database header,
which is written in the same transaction), so a migration is applied whole or not at all, and
two processes opening a fresh database at once apply it once: the second re-reads the version
after it gets the write lock and finds nothing left to do. A database whose version is past
the last migration was written by a newer tether and is refused (`SchemaTooNew`), never
written to.

Rules for a new migration: append it (never edit a released one), keep it to SQL an old SQLite
understands (no STRICT tables, no RETURNING), and do not use `executescript`, which commits
the open transaction first. `python -m tether.parent.agents.sessions schema` prints the resulting
schema; docs/sessions.md carries it and a test keeps the two equal.

Timestamps are Unix seconds (REAL) from `time.time()`; `heartbeat_mono` is `time.monotonic()`
of the holder, comparable within one boot (`owner_boot`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.parent.agents.sessions.errors import SchemaTooNew


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[sqlite3.Connection], None]


def statements(*sql: str) -> Callable[[sqlite3.Connection], None]:
    """A migration step that executes each statement in turn (inside the caller's transaction)."""

    def apply(conn: sqlite3.Connection) -> None:
        for statement in sql:
            conn.execute(statement)

    return apply


V1 = Migration(
    1,
    "agents, their transcripts (a row per message), reports and activation leases",
    statements(
        """
        CREATE TABLE agents (
            id                    TEXT PRIMARY KEY,
            agent_type            TEXT NOT NULL,
            provider              TEXT NOT NULL,
            definition            BLOB NOT NULL,
            label                 TEXT NOT NULL DEFAULT '',
            workspace             TEXT NOT NULL DEFAULT '',
            parent_run            TEXT,
            status                TEXT NOT NULL,
            question              TEXT,
            last_summary          TEXT NOT NULL DEFAULT '',
            input_tokens          INTEGER NOT NULL DEFAULT 0,
            output_tokens         INTEGER NOT NULL DEFAULT 0,
            next_seq              INTEGER NOT NULL DEFAULT 0,
            message_count         INTEGER NOT NULL DEFAULT 0,
            transcript_bytes      INTEGER NOT NULL DEFAULT 0,
            next_report           INTEGER NOT NULL DEFAULT 0,
            reports_dropped       INTEGER NOT NULL DEFAULT 0,
            activations           INTEGER NOT NULL DEFAULT 0,
            created_at            REAL NOT NULL,
            updated_at            REAL NOT NULL,
            activation_started_at REAL,
            activation_ended_at   REAL
        )
        """,
        "CREATE INDEX agents_by_status ON agents (status, updated_at)",
        "CREATE INDEX agents_by_parent_run ON agents (parent_run, updated_at)",
        """
        CREATE TABLE messages (
            agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
            seq      INTEGER NOT NULL,
            body     BLOB NOT NULL,
            PRIMARY KEY (agent_id, seq)
        )
        """,
        """
        CREATE TABLE reports (
            agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
            seq      INTEGER NOT NULL,
            at       REAL NOT NULL,
            text     TEXT NOT NULL,
            PRIMARY KEY (agent_id, seq)
        )
        """,
        """
        CREATE TABLE leases (
            agent_id       TEXT PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
            token          TEXT NOT NULL,
            owner_pid      INTEGER NOT NULL,
            owner_start    INTEGER NOT NULL,
            owner_boot     TEXT NOT NULL,
            owner_pidns    TEXT NOT NULL,
            acquired_at    REAL NOT NULL,
            heartbeat_wall REAL NOT NULL,
            heartbeat_mono REAL NOT NULL
        )
        """,
    ),
)

V2 = Migration(
    2,
    "agents.spawn: how to start the agent's child again (cold resume in any process)",
    # Nullable and written only when known, so code reading a v1 row finds NULL: "not stored".
    statements("ALTER TABLE agents ADD COLUMN spawn BLOB"),
)

MIGRATIONS: tuple[Migration, ...] = (V1, V2)
SCHEMA_VERSION = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def check_order(migrations: Sequence[Migration]) -> None:
    for i, step in enumerate(migrations, start=1):
        if step.version != i:
            raise ValueError(f"migration {i} is numbered {step.version}: versions run 1, 2, …")


def too_new(found: int, known: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"the session database is at schema version {found}, written by a newer tether; this "
        f"one knows versions up to {known}. Upgrade tether, or point it at another state "
        "directory."
    )


def migrate_step(conn: sqlite3.Connection, migrations: Sequence[Migration]) -> bool:
    """Apply the next migration, if any is due, inside the caller's write transaction.

    Returns whether there may be more to do. Raises `SchemaTooNew` for a newer database.
    """
    found = user_version(conn)
    if found > len(migrations):
        raise too_new(found, len(migrations))
    if found == len(migrations):
        return False
    step = migrations[found]
    step.apply(conn)
    # PRAGMA takes no parameters; the version is an int from our own table.
    conn.execute(f"PRAGMA user_version = {int(step.version)}")
    return step.version < len(migrations)


def describe(conn: sqlite3.Connection) -> str:
    """The schema as SQL, normalised (one space between tokens, one statement a line), for the
    docs and the test that keeps them in step."""
    rows = conn.execute(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
        "ORDER BY CASE type WHEN 'table' THEN 0 ELSE 1 END, name"
    ).fetchall()
    out = [f"PRAGMA user_version = {user_version(conn)};"]
    for (sql,) in rows:
        out.append(_pretty(sql))
    return "\n".join(out) + "\n"


def _pretty(sql: str) -> str:
    """One column a line for a table, one line for an index."""
    flat = " ".join(sql.split())
    head, paren, body = flat.partition("(")
    if not head.upper().startswith("CREATE TABLE") or not paren:
        return flat + ";"
    body = body.rstrip()
    assert body.endswith(")")
    columns = _split_top_level(body[:-1])
    return head.rstrip() + " (\n" + ",\n".join("    " + c.strip() for c in columns) + "\n);"


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def build() -> sqlite3.Connection:
    """An in-memory database with every migration applied."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    more = True
    while more:
        conn.execute("BEGIN IMMEDIATE")
        more = migrate_step(conn, MIGRATIONS)
        conn.execute("COMMIT")
    return conn
