"""Trouble with the storage under the session store, as one line a person can act on.

SQLite reports a disk's trouble as `sqlite3.Error` with an error code, the OS as `OSError` with
an errno. The store turns each into one of its own exceptions — `StoreFull`, `StoreReadOnly`,
`StoreCorrupt`, else `StoreUnavailable` — whose message is one line naming the file, what is
wrong and what to do, so nobody above the store (the supervisor, the CLI) meets a library's
exception or prints a traceback for a full disk. An error that is not the storage's (a bug in a
query, say) is not translated: it goes on as itself. The database layer and the path checks
both come here, so there is one wording per kind of trouble.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from tether.parent.agents.sessions.errors import (
    SessionError,
    StoreCorrupt,
    StoreFull,
    StoreReadOnly,
    StoreUnavailable,
)

# SQLite's primary result codes (the low byte of an extended code).
_PERM, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN = 3, 8, 10, 11, 13, 14
_NOLFS, _AUTH, _NOTADB = 22, 23, 26

ELSEWHERE = "or point tether at another state directory (--state DIR, state_dir=)"


def full(path: Path, detail: str) -> StoreFull:
    return StoreFull(
        f"{path}: the file system is full ({detail}); nothing of the change was stored, and "
        f"what was stored before is intact: free some space there and retry, {ELSEWHERE}"
    )


def read_only(path: Path, detail: str) -> StoreReadOnly:
    return StoreReadOnly(
        f"{path}: the session store cannot be written ({detail}); SQLite writes beside the "
        f"database even to read it: make {path.parent} and the files in it writable by uid "
        f"{os.geteuid()} (a read-only mount must be remounted read-write), {ELSEWHERE}"
    )


def corrupt(path: Path, detail: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"{path}: the session database is damaged ({detail}); move it aside together with "
        f"its -wal and -shm files (tether then starts an empty one) or restore it from a "
        f"backup, {ELSEWHERE}"
    )


def unavailable(path: Path, detail: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"{path}: the session store cannot be used ({detail}); check that the disk and "
        f"{path.parent} are healthy and local, then retry, {ELSEWHERE}"
    )


def sqlite_failure(exc: sqlite3.Error, path: Path) -> SessionError | None:
    """The store's exception for `exc`, or `None` when it is not the storage's trouble."""
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    name = getattr(exc, "sqlite_errorname", None)
    detail = f"{text}, {name}" if name else text
    primary = code & 0xFF if isinstance(code, int) else _guess(text)
    if primary == _FULL:
        return full(path, detail)
    if primary in (_CORRUPT, _NOTADB):
        return corrupt(path, detail)
    if primary in (_READONLY, _PERM, _AUTH):
        return read_only(path, detail)
    if primary == _CANTOPEN:
        return read_only(path, detail) if not writable_place(path) else unavailable(path, detail)
    if primary in (_IOERR, _NOLFS):
        if not writable_place(path):
            return read_only(path, detail)
        return unavailable(path, detail)
    return None


def os_failure(exc: OSError, path: Path, doing: str) -> StoreUnavailable:
    """The store's exception for an `OSError` met while `doing` something to `path`."""
    detail = f"{doing}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return full(path, detail)
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return read_only(path, detail)
    return unavailable(path, detail)


def writable_place(path: Path) -> bool:
    """Whether the database's directory (and the file, if it exists) may be written: not on a
    read-only mount, and writable by us."""
    place = path.parent
    try:
        if os.statvfs(place).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return True  # cannot tell: say what SQLite said
    if not os.access(place, os.W_OK):
        return False
    return not (path.exists() and not os.access(path, os.W_OK))


def _guess(text: str) -> int | None:
    """The primary code from SQLite's message, for an exception that carries no code."""
    for needle, primary in (
        ("disk is full", _FULL),
        ("not a database", _NOTADB),
        ("malformed", _CORRUPT),
        ("readonly", _READONLY),
        ("unable to open", _CANTOPEN),
        ("disk i/o error", _IOERR),
    ):
        if needle in text.lower():
            return primary
    return None
