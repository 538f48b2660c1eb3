"""The state directory: where it is by default, and that what the store creates is private."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest

from tether.parent.agents.sessions import DB_NAME, SessionStore, StoreUnavailable, default_state_dir
from tether.parent.agents.sessions.paths import prepare_database


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_default_state_directory_follows_xdg_state_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert default_state_dir({"XDG_STATE_HOME": "/x/state"}, home) == Path("/x/state/tether")
    assert default_state_dir({}, home) == home / ".local/state/tether"
    # The XDG spec says a relative value is invalid and must be ignored.
    assert default_state_dir({"XDG_STATE_HOME": "rel/state"}, home) == home / ".local/state/tether"
    assert default_state_dir({"XDG_STATE_HOME": ""}, home) == home / ".local/state/tether"


def test_the_store_opens_under_xdg_state_home_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))

    async def open_() -> Path:
        async with SessionStore() as store:
            return store.path

    assert anyio.run(open_) == tmp_path / "xdg" / "tether" / DB_NAME


def test_what_the_store_creates_is_private_whatever_the_umask(tmp_path: Path) -> None:
    state = tmp_path / "a" / "b" / "state"
    old = os.umask(0o002)
    try:

        async def use() -> None:
            async with SessionStore(state) as store:
                await store.list_agents()
                # While it is open SQLite's -wal and -shm files exist beside it.
                for suffix in ("-wal", "-shm"):
                    assert _mode(Path(f"{state / DB_NAME}{suffix}")) == 0o600

        anyio.run(use)
    finally:
        os.umask(old)
    for d in (tmp_path / "a", tmp_path / "a" / "b", state):
        assert _mode(d) == 0o700, d
    assert _mode(state / DB_NAME) == 0o600


def _open(state: Path) -> None:
    async def open_() -> None:
        async with SessionStore(state):
            pass

    anyio.run(open_)


def test_a_state_directory_open_to_others_is_refused_with_the_chmod_to_run_and_left_as_it_is(
    tmp_path: Path,
) -> None:
    state = tmp_path / "shared"
    state.mkdir()
    os.chmod(state, 0o755)
    with pytest.raises(StoreUnavailable) as refused:
        _open(state)
    message = str(refused.value)
    assert "\n" not in message
    assert f"the state directory {state} is open to others (mode 0755" in message
    assert f"run `chmod 700 {state}`" in message
    assert _mode(state) == 0o755 and not (state / DB_NAME).exists()


def test_a_database_file_open_to_others_is_refused_with_the_chmod_to_run_and_left_as_it_is(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    _open(state)
    db = state / DB_NAME
    os.chmod(db, 0o644)
    with pytest.raises(StoreUnavailable, match=r"is open to others \(mode 0644") as refused:
        _open(state)
    assert f"run `chmod 600 {db}`" in str(refused.value)
    assert _mode(db) == 0o644
    os.chmod(db, 0o600)
    _open(state)  # once it is private again, it opens


def test_a_sqlite_sidecar_widened_by_hand_is_tightened(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _open(state)
    wal = Path(f"{state / DB_NAME}-wal")
    wal.touch()
    os.chmod(wal, 0o644)
    assert prepare_database(state) == state / DB_NAME
    assert _mode(wal) == 0o600


def test_a_database_path_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.db"
    elsewhere.touch()
    (state / DB_NAME).symlink_to(elsewhere)

    async def open_() -> None:
        async with SessionStore(state):
            pass

    with pytest.raises(StoreUnavailable, match="is a symlink"):
        anyio.run(open_)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_database_file_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = state / DB_NAME
    db.touch(mode=0o600)
    os.chown(db, 12345, 12345)
    with pytest.raises(StoreUnavailable, match="belongs to uid 12345, not to this process") as no:
        _open(state)
    assert f"`chown {os.geteuid()} {db}`" in str(no.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_state_directory_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "theirs"
    state.mkdir(mode=0o700)
    os.chown(state, 12345, 12345)
    with pytest.raises(StoreUnavailable, match=f"{state} belongs to uid 12345"):
        _open(state)
    assert not (state / DB_NAME).exists()


def test_a_state_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("not a directory")

    async def open_() -> None:
        async with SessionStore(state):
            pass

    with pytest.raises(StoreUnavailable, match="not a directory"):
        anyio.run(open_)
