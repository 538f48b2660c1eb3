"""Every database an earlier tether wrote opens in this one with everything it held.

`fixtures/sessions-vN.sqlite3` is a database as version N of the schema stored it (written by
`fixtures/make_fixture.py` when version N was current, never rewritten); `expected.json` says
what is in it. Each is opened here by the current code — migrations applied in order — and by
the current code plus a plausible next migration, so a migration that loses or garbles a
column, or one that cannot run over real data, fails here.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from tether.parent.agents.sessions import (
    DB_NAME,
    SCHEMA_VERSION,
    Activation,
    SessionStore,
    SpawnSettings,
)
from tether.parent.agents.sessions.schema import MIGRATIONS, Migration, statements
from tether.protocol.messages import AgentDefinition, ChatMessage, Usage

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "expected.json").read_text())
DATABASES = sorted(FIXTURES.glob("sessions-v*.sqlite3"))


def _version_of(db: Path) -> int:
    return int(db.stem.rsplit("-v", 1)[1])


def test_the_current_schema_has_a_fixture_database() -> None:
    assert FIXTURES / f"sessions-v{SCHEMA_VERSION}.sqlite3" in DATABASES, (
        "a new migration needs its fixture: python tests/sessions/fixtures/make_fixture.py"
    )


def _state_with(db: Path, tmp: Path) -> Path:
    state = tmp / "state"
    state.mkdir(mode=0o700)
    shutil.copyfile(db, state / DB_NAME)
    (state / DB_NAME).chmod(0o600)
    return state


def _user_version(state: Path) -> int:
    conn = sqlite3.connect(state / DB_NAME)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


async def _check_everything(store: SessionStore, version: int) -> None:
    listed = {a.label: a for a in await store.list_agents()}
    assert set(listed) == {a["label"] for a in EXPECTED["agents"]}
    for want in EXPECTED["agents"]:
        got = listed[want["label"]]
        # A SIGKILLed holder cannot write `interrupted` down: it reads so.
        assert got.status == ("interrupted" if want["status"] == "running" else want["status"])
        assert got.stored_status == want["status"]
        assert got.question == want.get("question")
        assert got.last_summary == want["lastSummary"]
        assert got.usage == msgspec.convert(want["usage"], Usage)
        assert got.workspace == want["workspace"] and got.parent_run == want.get("parentRun")
        assert got.message_count == len(want["transcript"]) and got.activations == 1
        detail = await store.show(got.id)
        assert detail is not None
        assert detail.definition == msgspec.convert(want["definition"], AgentDefinition)
        assert detail.transcript == msgspec.convert(want["transcript"], list[ChatMessage])
        assert [r.text for r in detail.reports] == want.get("reports", [])
        spawn = await store.spawn_settings(got.id)
        if version >= 2 and want.get("spawn"):
            assert spawn == SpawnSettings(**want["spawn"])
        else:
            assert spawn is None
    # The dead holder's lease is taken over, and the session continues where it stopped.
    cut_off = listed["cut off by a SIGKILL"]
    activation = await store.acquire(cut_off.id)
    assert isinstance(activation, Activation)
    assert activation.took_over is not None and activation.took_over.why == "stale"
    more = [ChatMessage(role="tool", content="passed", tool_call_id="r1")]
    assert await activation.append(more) == len(EXPECTED["agents"][2]["transcript"]) + 1
    await activation.release("idle")


@pytest.mark.parametrize("db", DATABASES, ids=[d.name for d in DATABASES])
def test_an_earlier_database_opens_in_this_version_with_everything_it_held(
    db: Path, tmp_path: Path
) -> None:
    state = _state_with(db, tmp_path)
    assert _user_version(state) == _version_of(db)

    async def check() -> None:
        async with SessionStore(state) as store:
            await _check_everything(store, _version_of(db))

    anyio.run(check)
    assert _user_version(state) == SCHEMA_VERSION


def _add_pinned(conn: sqlite3.Connection) -> None:
    """A plausible next migration: a column with a value computed from every stored row."""
    conn.execute("ALTER TABLE agents ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE agents SET pinned = (status = 'needs_input')")


NEXT = Migration(SCHEMA_VERSION + 1, "agents.pinned (test only)", _add_pinned)


@pytest.mark.parametrize("db", DATABASES, ids=[d.name for d in DATABASES])
def test_an_earlier_database_takes_a_later_migration_too(db: Path, tmp_path: Path) -> None:
    state = _state_with(db, tmp_path)

    async def check() -> None:
        async with SessionStore(state, migrations=(*MIGRATIONS, NEXT)) as store:
            await _check_everything(store, _version_of(db))

    anyio.run(check)
    assert _user_version(state) == SCHEMA_VERSION + 1
    conn = sqlite3.connect(state / DB_NAME)
    try:
        pinned = dict(conn.execute("SELECT label, pinned FROM agents").fetchall())
    finally:
        conn.close()
    assert pinned == {
        "survey the repository": 0,
        "asks before deleting": 1,
        "cut off by a SIGKILL": 0,
    }


@pytest.mark.parametrize("db", DATABASES, ids=[d.name for d in DATABASES])
def test_a_later_migration_that_fails_leaves_an_earlier_database_as_it_was(
    db: Path, tmp_path: Path
) -> None:
    state = _state_with(db, tmp_path)
    broken = Migration(
        SCHEMA_VERSION + 1,
        "fails half-way (test only)",
        statements("ALTER TABLE agents ADD COLUMN half INTEGER", "SELECT * FROM no_such_table"),
    )

    async def open_broken() -> None:
        async with SessionStore(state, migrations=(*MIGRATIONS, broken)):
            pass

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        anyio.run(open_broken)
    assert _user_version(state) == SCHEMA_VERSION

    async def check() -> None:
        async with SessionStore(state) as store:
            await _check_everything(store, _version_of(db))

    anyio.run(check)
