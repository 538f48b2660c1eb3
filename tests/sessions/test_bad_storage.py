"""A store whose file is damaged, or owned by someone else, or open to others: the store raises
its own exception and the CLI prints one line naming the file and what to do (exit 4), never a
traceback, and nothing is written to the file on the way.

Full and read-only file systems need a mount of their own: `tests/agents/test_bad_disks.py`.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tether.parent.agents.sessions import (
    DB_NAME,
    SessionStore,
    StoreCorrupt,
    StoreUnavailable,
)

FIXTURE = Path(__file__).parent / "fixtures" / "sessions-v2.sqlite3"
EXIT_STORE = 4


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.parent.cli", "agents", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A state directory holding a database with three agents in it."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    shutil.copyfile(FIXTURE, state / DB_NAME)
    (state / DB_NAME).chmod(0o600)
    return state


def _agent_id(state: Path) -> str:
    conn = sqlite3.connect(state / DB_NAME)
    try:
        return str(conn.execute("SELECT id FROM agents ORDER BY id LIMIT 1").fetchone()[0])
    finally:
        conn.close()


def _root_page(state: Path, table: str) -> int:
    conn = sqlite3.connect(state / DB_NAME)
    try:
        row = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        return int(row.fetchone()[0])
    finally:
        conn.close()


def _damage(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)


def _page(state: Path, table: str) -> tuple[int, bytes]:
    """Where `table`'s root page starts, and garbage to write over its header."""
    return (_root_page(state, table) - 1) * 4096, b"\xa5" * 64


def _one_line_error(got: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert got.returncode == EXIT_STORE, (got.returncode, got.stdout, got.stderr)
    assert got.stdout == ""
    assert "Traceback" not in got.stderr
    lines = got.stderr.splitlines()
    assert len(lines) == 1, got.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


Damage = Callable[[Path], None]

HEADER_DAMAGE: dict[str, Damage] = {
    "the magic string": lambda state: _damage(state / DB_NAME, 0, b"XQLite"),
    "the page size": lambda state: _damage(state / DB_NAME, 16, b"\x00\x03"),
    "the format bytes": lambda state: _damage(state / DB_NAME, 18, b"\x07\x07"),
}


@pytest.mark.parametrize("where", list(HEADER_DAMAGE))
def test_a_damaged_header_is_one_line_naming_the_file_for_list_show_and_send(
    stored: Path, where: str
) -> None:
    agent_id = _agent_id(stored)
    HEADER_DAMAGE[where](stored)
    before = (stored / DB_NAME).read_bytes()
    db = str(stored / DB_NAME)
    for args in (
        ("list", "--state", str(stored)),
        ("show", agent_id, "--state", str(stored)),
        ("send", agent_id, "hello", "--state", str(stored), "--model", "scripted:x.json"),
    ):
        line = _one_line_error(tether(*args), db, "is damaged", "move it aside")
        assert line.startswith("tether: ")
    assert (stored / DB_NAME).read_bytes() == before  # nothing was written to it

    async def open_() -> None:
        async with SessionStore(stored):
            pass

    with pytest.raises(StoreCorrupt, match="file is not a database"):
        anyio.run(open_)


def test_a_damaged_page_is_one_line_when_it_is_read_and_the_rest_stays_readable(
    stored: Path,
) -> None:
    agent_id = _agent_id(stored)
    offset, garbage = _page(stored, "messages")
    _damage(stored / DB_NAME, offset, garbage)
    listed = tether("list", "--state", str(stored))
    assert listed.returncode == 0 and agent_id in listed.stdout  # the agents' page is whole
    shown = tether("show", agent_id, "--state", str(stored))
    _one_line_error(shown, str(stored / DB_NAME), "malformed", "restore it from a backup")

    async def read() -> None:
        async with SessionStore(stored) as store:
            assert await store.get(agent_id) is not None
            with pytest.raises(StoreCorrupt, match="malformed"):
                await store.transcript(agent_id)

    anyio.run(read)


def test_a_damaged_agents_page_makes_list_one_line_too(stored: Path) -> None:
    offset, garbage = _page(stored, "agents")
    _damage(stored / DB_NAME, offset, garbage)
    _one_line_error(tether("list", "--state", str(stored)), str(stored / DB_NAME), "damaged")


def test_a_store_open_to_others_is_one_line_with_the_chmod_to_run(stored: Path) -> None:
    os.chmod(stored / DB_NAME, 0o640)
    line = _one_line_error(tether("list", "--state", str(stored)), str(stored / DB_NAME))
    assert f"chmod 600 {stored / DB_NAME}" in line
    os.chmod(stored / DB_NAME, 0o600)
    os.chmod(stored, 0o750)
    line = _one_line_error(tether("list", "--state", str(stored)), str(stored))
    assert f"chmod 700 {stored}" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_store_owned_by_someone_else_is_one_line_naming_the_owner(stored: Path) -> None:
    agent_id = _agent_id(stored)
    os.chown(stored / DB_NAME, 4321, 4321)
    for args in (("list",), ("show", agent_id), ("send", agent_id, "hi", "--model", "x:y")):
        line = _one_line_error(tether(*args, "--state", str(stored)), str(stored / DB_NAME))
        assert "belongs to uid 4321" in line
    os.chown(stored / DB_NAME, 0, 0)
    os.chown(stored, 4321, 4321)
    _one_line_error(tether("list", "--state", str(stored)), "belongs to uid 4321")


def test_a_store_error_is_a_store_unavailable_for_callers_that_catch_the_documented_one(
    stored: Path,
) -> None:
    _damage(stored / DB_NAME, 0, b"XQLite")

    async def open_() -> None:
        async with SessionStore(stored):
            pass

    with pytest.raises(StoreUnavailable):
        anyio.run(open_)
