"""Where the session database lives, and keeping it private.

The state directory is `$XDG_STATE_HOME/tether` (an absolute `XDG_STATE_HOME` only, as the
XDG spec says), else `~/.local/state/tether`, unless the caller names one. Transcripts hold
whatever the agents read, so: every directory component we create is made 0700 (chmod after
mkdir, so the umask cannot widen it); the state directory itself must be ours and 0700 or
narrower, and the database a regular file of ours, 0600 or narrower — anything wider or
someone else's is refused with the `chmod` to run, never silently changed (what was readable
may already have been read). SQLite's `-wal`/`-shm` files take the database file's mode; any
we find wider are tightened. The database path is never opened outside SQLite (see
`_check_file`). Whatever the OS refuses (a full or read-only file system) is raised as the
store's exception (`diagnose.os_failure`).

The state never shares a place with a workspace (`workspace_problem`): a sub-agent writes its
workspace, and a store it could write is a session it could rewrite — its model (where the
user's key goes on the next resume), its transcript, another agent's. Whoever starts a run that
uses the store refuses a workspace that lies inside the state directory or holds it, the
default under HOME included; the sandbox is also denied every path of the store
(`store_paths`), whatever else it is granted.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from tether.parent.agents.sessions.diagnose import ELSEWHERE, os_failure
from tether.parent.agents.sessions.errors import StoreUnavailable

DB_NAME = "sessions.sqlite3"
SIDECARS = ("-wal", "-shm")


def default_state_dir(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    env = os.environ if env is None else env
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "tether"
    return (home or Path.home()) / ".local" / "state" / "tether"


def resolve_state_dir(state_dir: str | os.PathLike[str] | None) -> Path:
    return default_state_dir() if state_dir is None else Path(state_dir)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


DEFAULT_NOTE = " (the default: $XDG_STATE_HOME/tether, else ~/.local/state/tether)"


def workspace_problem(
    state_dir: str | os.PathLike[str],
    workspace: str | os.PathLike[str],
    *,
    default: bool = False,
) -> str | None:
    """Why the store in `state_dir` cannot serve a run whose workspace is `workspace` (one lies
    inside the other, compared as resolved paths), or `None` when they are apart. `default`:
    the state directory is the default one (said in the message, with how to move it)."""
    state = os.path.realpath(state_dir)
    ws = os.path.realpath(workspace)
    which = DEFAULT_NOTE if default else ""
    fix = (
        "keep them apart: a state directory outside the workspace (--state DIR, state_dir=, "
        "or XDG_STATE_HOME) or a workspace that does not hold it"
    )
    if _within(state, ws):
        where = "is" if state == ws else "lies inside"
        return (
            f"the session store's directory {state}{which} {where} the workspace {ws}: a "
            "sub-agent working there could rewrite its stored session (its model, where the "
            f"next resume sends your API key; its transcript); {fix}"
        )
    if _within(ws, state):
        return (
            f"the workspace {ws} lies inside the session store's directory {state}{which}: a "
            f"sub-agent working there could rewrite the stored sessions; {fix}"
        )
    return None


def check_apart(
    state_dir: str | os.PathLike[str] | None, workspace: str | os.PathLike[str]
) -> Path:
    """The state directory `state_dir` means (`None`: the default); raises `ValueError` (bad
    usage) when it and `workspace` overlap (see `workspace_problem`)."""
    path = resolve_state_dir(state_dir)
    problem = workspace_problem(path, workspace, default=state_dir is None)
    if problem is not None:
        raise ValueError(problem)
    return path


def store_paths(state_dir: str | os.PathLike[str]) -> tuple[str, ...]:
    """Every path the store is reached by: its directory as given (made absolute) and
    resolved; the database and SQLite's files beside it lie inside."""
    given = os.path.abspath(state_dir)
    return tuple(dict.fromkeys((given, os.path.realpath(given))))


def ensure_private_dir(path: Path) -> None:
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
            os.chmod(d, 0o700)
        except FileExistsError:
            continue  # another process made it first
        except OSError as exc:
            raise os_failure(exc, path / DB_NAME, f"creating {d}") from None
    if not path.is_dir():
        raise StoreUnavailable(f"the state directory {path} is not a directory; {ELSEWHERE}")
    st = os.stat(path)
    if st.st_uid != os.geteuid():
        raise StoreUnavailable(
            f"the state directory {path} belongs to uid {st.st_uid}, not to this process "
            f"(uid {os.geteuid()}); point tether at a state directory of your own (--state DIR, "
            "state_dir=)"
        )
    if st.st_mode & 0o077:
        raise StoreUnavailable(
            f"the state directory {path} is open to others (mode {stat.S_IMODE(st.st_mode):04o}"
            f"; transcripts hold whatever the agents read): run `chmod 700 {path}`, {ELSEWHERE}"
        )


def _check_file(path: Path, *, tighten: bool) -> bool:
    """Check an existing file is a regular file of ours, 0600 or narrower (`tighten`: make it
    so instead of refusing); `False` if it is absent.

    Only `lstat` and `chmod` by path, never `open`: POSIX record locks belong to the process,
    and closing any descriptor of a file releases all of them, so opening and closing the
    database or its -wal/-shm files here would silently drop the locks a connection of this
    process holds (SQLite guards only its own descriptors against that).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise os_failure(exc, path, "looking at it") from None
    if stat.S_ISLNK(st.st_mode):
        raise StoreUnavailable(
            f"{path} is a symlink; the session database must be a real file: move the link "
            f"away, {ELSEWHERE}"
        )
    if not stat.S_ISREG(st.st_mode):
        raise StoreUnavailable(f"{path} is not a regular file: move it away, {ELSEWHERE}")
    if st.st_uid != os.geteuid():
        raise StoreUnavailable(
            f"{path} belongs to uid {st.st_uid}, not to this process (uid {os.geteuid()}): run "
            f"tether as its owner, or `chown {os.geteuid()} {path}` if it is yours, {ELSEWHERE}"
        )
    if st.st_mode & 0o077:
        if not tighten:
            raise StoreUnavailable(
                f"{path} is open to others (mode {stat.S_IMODE(st.st_mode):04o}; transcripts "
                f"hold whatever the agents read): run `chmod 600 {path}`, {ELSEWHERE}"
            )
        try:
            os.chmod(path, 0o600)
        except OSError as exc:
            raise os_failure(exc, path, "making it private") from None
    return True


def prepare_database(state_dir: Path) -> Path:
    """Make the state directory private and check the database file is; the database's path."""
    ensure_private_dir(state_dir)
    db = state_dir / DB_NAME
    if not _check_file(db, tighten=False):
        try:
            fd = os.open(
                db, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except FileExistsError:
            _check_file(db, tighten=False)  # another process created it first
        except OSError as exc:
            raise os_failure(exc, db, "creating the session database") from None
        else:
            # A new inode nobody can hold a lock on yet: closing it here is harmless.
            try:
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
    for suffix in SIDECARS:
        # SQLite's own files, made with the database's mode: a wider one was widened by hand.
        _check_file(Path(f"{db}{suffix}"), tighten=True)
    return db
