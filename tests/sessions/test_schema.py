"""The schema is versioned: migrations run in order, each whole or not at all, once even when
several processes open a fresh database together; a newer database is refused untouched; and
docs/sessions.md shows the schema the code builds."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from tether.parent.agents.sessions import (
    DB_NAME,
    SCHEMA_VERSION,
    Activation,
    SchemaTooNew,
    SessionStore,
)
from tether.parent.agents.sessions.schema import (
    MIGRATIONS,
    V1,
    Migration,
    build,
    describe,
    statements,
)
from tether.protocol.messages import AgentDefinition, ChatMessage, Usage

DOC = Path(__file__).resolve().parents[2] / "docs" / "sessions.md"


def _add_model_column(conn: sqlite3.Connection) -> None:
    """A plausible v2: the agent's model as a column of its own (so `list` can show and filter
    it without decoding definitions), backfilled from each stored definition."""
    conn.execute("ALTER TABLE agents ADD COLUMN model TEXT")
    conn.execute("CREATE INDEX agents_by_model ON agents (model)")
    decode = msgspec.json.Decoder(AgentDefinition).decode
    rows = conn.execute("SELECT id, definition FROM agents").fetchall()
    for agent_id, blob in rows:
        conn.execute("UPDATE agents SET model = ? WHERE id = ?", (decode(blob).model, agent_id))


V2 = Migration(2, "agents.model, backfilled from the definition", _add_model_column)


def _version(state: Path) -> int:
    conn = sqlite3.connect(state / DB_NAME)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _columns(state: Path, table: str) -> list[str]:
    conn = sqlite3.connect(state / DB_NAME)
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def test_a_fresh_database_is_at_the_current_version(state: Path) -> None:
    async def open_() -> None:
        async with SessionStore(state):
            pass

    anyio.run(open_)
    assert _version(state) == SCHEMA_VERSION == len(MIGRATIONS)


def test_a_v1_database_migrates_to_v2_keeping_everything_it_held(state: Path) -> None:
    async def write_with_v1() -> str:
        async with SessionStore(state, migrations=(V1,)) as store:
            agent = await store.create_agent(AgentDefinition(type="explorer", model="m-large"))
            await store.create_agent(AgentDefinition())  # no model
            activation = await store.acquire(agent.id)
            assert isinstance(activation, Activation)
            await activation.append(
                [ChatMessage(role="user", content="hello")], Usage(input_tokens=3)
            )
            await activation.report("a finding")
            await activation.settle("needs_input", summary="s", question="q?")
            await activation.release()
            return agent.id

    agent_id = anyio.run(write_with_v1)
    assert _version(state) == 1 and "model" not in _columns(state, "agents")

    async def read_with_v2() -> None:
        async with SessionStore(state, migrations=(V1, V2)) as store:
            detail = await store.show(agent_id)
            assert detail is not None
            assert detail.summary.status == "needs_input" and detail.summary.question == "q?"
            assert [m.content for m in detail.transcript] == ["hello"]
            assert [r.text for r in detail.reports] == ["a finding"]
            assert detail.summary.usage == Usage(input_tokens=3)
            # And the migrated database works on: a new activation appends after the old turns.
            activation = await store.acquire(agent_id)
            assert isinstance(activation, Activation)
            await activation.append([ChatMessage(role="user", content="again")])
            await activation.release("idle")
            assert [m.content for m in await store.transcript(agent_id)] == ["hello", "again"]

    anyio.run(read_with_v2)
    assert _version(state) == 2
    conn = sqlite3.connect(state / DB_NAME)
    try:
        models = dict(conn.execute("SELECT id, model FROM agents").fetchall())
    finally:
        conn.close()
    assert models[agent_id] == "m-large"
    assert sorted(models.values(), key=str) == sorted(["m-large", None], key=str)


def test_a_migration_that_fails_leaves_the_database_at_its_old_version(state: Path) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE agents ADD COLUMN model TEXT")
        raise RuntimeError("the step broke half-way")

    async def open_with(*migrations: Migration) -> None:
        async with SessionStore(state, migrations=migrations):
            pass

    anyio.run(open_with, V1)
    with pytest.raises(RuntimeError, match="half-way"):
        anyio.run(open_with, V1, Migration(2, "broken", half_then_fail))
    assert _version(state) == 1
    assert "model" not in _columns(state, "agents")  # the ALTER was rolled back with it
    anyio.run(open_with, V1, V2)
    assert _version(state) == 2


def test_a_database_from_a_newer_tether_is_refused_and_left_untouched(state: Path) -> None:
    async def open_with(*migrations: Migration) -> None:
        async with SessionStore(state, migrations=migrations):
            pass

    anyio.run(open_with, V1, V2)
    before = (state / DB_NAME).read_bytes()
    with pytest.raises(SchemaTooNew, match=r"schema version 2.*knows versions up to 1"):
        anyio.run(open_with, V1)
    assert (state / DB_NAME).read_bytes() == before


def test_migrations_must_be_numbered_in_order(state: Path) -> None:
    async def open_with(*migrations: Migration) -> None:
        async with SessionStore(state, migrations=migrations):
            pass

    with pytest.raises(ValueError, match="versions run 1, 2"):
        anyio.run(open_with, V1, Migration(3, "skips 2", statements()))


def test_processes_opening_a_fresh_database_together_migrate_it_once(state: Path) -> None:
    code = (
        "import anyio, sys\n"
        "from tether.parent.agents.sessions import SessionStore\n"
        "async def main():\n"
        "    async with SessionStore(sys.argv[1]) as s:\n"
        "        await s.list_agents()\n"
        "anyio.run(main)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(state)], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    assert _version(state) == SCHEMA_VERSION


def test_docs_show_the_schema_the_code_builds() -> None:
    built = describe(build())
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^```sql\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert built in blocks, (
        "docs/sessions.md must carry the schema exactly as "
        "`python -m tether.parent.agents.sessions schema` prints it:\n" + built
    )
    printed = subprocess.run(
        [sys.executable, "-m", "tether.parent.agents.sessions", "schema"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == built


def test_a_v1_database_takes_the_real_v2_and_its_old_agents_have_no_spawn_settings(
    state: Path,
) -> None:
    from tether.parent.agents.sessions import SpawnSettings

    async def write_with_v1() -> str:
        async with SessionStore(state, migrations=(V1,)) as store:
            return (await store.create_agent(AgentDefinition(type="explorer"))).id

    old = anyio.run(write_with_v1)

    async def read_with_current() -> None:
        async with SessionStore(state) as store:
            assert await store.spawn_settings(old) is None
            new = await store.create_agent(AgentDefinition(), spawn=SpawnSettings(model="m"))
            stored = await store.spawn_settings(new.id)
            assert stored is not None and stored.model == "m"

    anyio.run(read_with_current)
    assert _version(state) == SCHEMA_VERSION == 2
    assert "spawn" in _columns(state, "agents")
