"""The state directory: where it is by default, that what the store creates is private, and
that it never shares a place with a workspace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.agents.sessions import DB_NAME, SessionStore, StoreUnavailable, default_state_dir
from tether.parent.agents.sessions.paths import (
    check_apart,
    prepare_database,
    store_paths,
    workspace_problem,
)


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


# --- the state directory never shares a place with a workspace --------------------------------

SEGMENT = st.sampled_from(["a", "b", "ab", "a.b", "state", "ws"])


@given(st.lists(SEGMENT, max_size=4), st.lists(SEGMENT, max_size=4))
def test_a_store_and_a_workspace_are_refused_exactly_when_one_lies_inside_the_other(
    state: list[str], ws: list[str]
) -> None:
    root = "/nonexistent-tether-root"
    state_dir = os.path.join(root, *state)
    workspace = os.path.join(root, *ws)
    nested = state[: len(ws)] == ws or ws[: len(state)] == state
    problem = workspace_problem(state_dir, workspace)
    assert (problem is not None) == nested
    if problem is not None:
        assert state_dir in problem and workspace in problem


def test_the_default_store_under_home_is_refused_for_a_workspace_that_is_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    with pytest.raises(ValueError) as refused:
        check_apart(None, tmp_path)
    default = tmp_path / ".local/state/tether"
    assert str(refused.value).startswith(
        f"the session store's directory {default} (the default: $XDG_STATE_HOME/tether, else "
        f"~/.local/state/tether) lies inside the workspace {tmp_path}: "
    )
    assert check_apart(tmp_path / "elsewhere", tmp_path / "ws") == tmp_path / "elsewhere"


def test_paths_are_compared_resolved_so_a_symlink_does_not_hide_the_store(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "state").mkdir(parents=True)
    (tmp_path / "door").symlink_to(ws / "state")
    problem = workspace_problem(tmp_path / "door", ws)
    assert problem is not None and f"{ws / 'state'} lies inside the workspace {ws}" in problem
    assert store_paths(tmp_path / "door") == (str(tmp_path / "door"), str(ws / "state"))
