"""File reads and writes the parent does for a foreign agent, confined to the workspace.

An ACP agent asks the client (the parent) to read and write files (`fs/read_text_file`,
`fs/write_text_file`). The parent runs with more authority than the agent (often root, always
outside its sandbox), so every path goes through tether's one confined path walk
(`tether.contain.confined`, shared with the child's tools and the parent's evidence): resolved
one component at a time from an open descriptor of the root, never by a path string, refusing
`..` above the root, absolute paths that do not spell it, symlinks leading out, swaps between
check and use, NUL bytes, over-long paths and names, and device nodes; the final file is opened
with `O_NOFOLLOW`, and everything but a regular file is refused.

Writes also refuse a file with more than one hard link (writing it would change a file outside
the workspace that shares its inode), check that after opening the descriptor (so no swap can
slip in between), and are refused in explore mode by the caller. Reads and writes are bounded
(`MAX_READ_BYTES`, `MAX_WRITE_BYTES`). Reads of a hard-linked file are served: a link the agent
made names a file it could already read (the kernel's `protected_hardlinks`), and one that was
there before the run was put there by the workspace's owner.

Every refusal is a `FileRefused` whose message names the reason, fit to show the agent (this
module words the walk's refusals for it).
"""

from __future__ import annotations

import errno
import os
import stat

from tether.contain.confined import (
    NAME_MAX,
    PATH_MAX,
    ConfinedRoot,
    Landing,
    Refused,
    Why,
    iso_mtime,
)
from tether.protocol.messages import Artifact

MAX_READ_BYTES = 8 * 1024 * 1024
"""The largest file served to `fs/read_text_file` (before `line`/`limit` select from it)."""
MAX_WRITE_BYTES = 8 * 1024 * 1024
"""The largest content `fs/write_text_file` writes."""


class FileRefused(Exception):
    """The parent will not do this file operation for the agent; the message says why."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing
        """The file (or a directory on the way) does not exist."""


class ConfinedFiles:
    """Text file I/O under one workspace root, safe against a hostile agent's paths."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._confined = ConfinedRoot(root, word=_word)
        self.root = self._confined.root
        """The root, resolved."""

    # --- operations ---------------------------------------------------------------------------

    def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """The file's text (from 1-based `line`, at most `limit` lines), or `FileRefused`."""
        if line is not None and line < 1:
            raise FileRefused(f"line must be 1 or more (got {line})")
        if limit is not None and limit < 0:
            raise FileRefused(f"limit must not be negative (got {limit})")
        with self._locate(path, make_parents=False) as landing:
            fd = _open(landing, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            _require_regular(path, st)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as f:
            if st.st_size > MAX_READ_BYTES:
                raise FileRefused(
                    f"{path} is {st.st_size} bytes; the parent serves files up to "
                    f"{MAX_READ_BYTES} bytes"
                )
            data = f.read(MAX_READ_BYTES + 1)
        if len(data) > MAX_READ_BYTES:
            raise FileRefused(f"{path} grew past {MAX_READ_BYTES} bytes while it was read")
        if b"\0" in data:
            raise FileRefused(f"{path} is a binary file; only text files are served")
        text = data.decode("utf-8", errors="replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = (line or 1) - 1
        end = len(lines) if limit is None else start + limit
        return "".join(lines[start:end])

    def write_text(self, path: str, content: str) -> None:
        """Create or replace a regular file with `content`, or `FileRefused`."""
        data = content.encode("utf-8", errors="surrogatepass")
        if len(data) > MAX_WRITE_BYTES:
            raise FileRefused(
                f"the content is {len(data)} bytes; the parent writes files up to "
                f"{MAX_WRITE_BYTES} bytes"
            )
        with self._locate(path, make_parents=True) as landing:
            if landing.name == ".":
                raise FileRefused(f"{path} is a directory")
            fd = _open(landing, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            _require_regular(path, st)
            if st.st_nlink > 1:
                raise FileRefused(
                    f"{path} has {st.st_nlink} hard links; writing it would change a file "
                    "outside the workspace too"
                )
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def describe(self, path: str) -> Artifact | None:
        """An artifact for the regular file at `path`, or `None` if there is none now."""
        try:
            landing = self._locate(path, make_parents=False)
        except FileRefused:
            return None
        with landing:
            st = landing.lstat()
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        return Artifact(path=path, size=st.st_size, fs_type="file", modified_at=iso_mtime(st))

    def _locate(self, path: str, *, make_parents: bool) -> Landing:
        try:
            return self._confined.locate(path, make_parents=make_parents)
        except OSError as exc:
            raise _refusal(path, exc) from None


def _open(landing: Landing, flags: int) -> int:
    try:
        return landing.open(flags)
    except OSError as exc:
        raise _refusal(landing.given, exc) from None


def _word(r: Refused) -> FileRefused:
    """The walk's refusal as the agent is told it."""
    match r.why:
        case Why.NUL:
            return FileRefused("the path contains a NUL byte")
        case Why.UNENCODABLE:
            return FileRefused("the path cannot be encoded as a file name")
        case Why.TOO_LONG:
            return FileRefused(f"the path is longer than {PATH_MAX - 1} bytes")
        case Why.NAME_TOO_LONG:
            return FileRefused(f"{r.path}: a name is longer than {NAME_MAX} bytes")
        case Why.ABSOLUTE_OUTSIDE:
            return FileRefused(f"the path {r.path} is outside the workspace {r.root}")
        case Why.CLIMBS:
            return FileRefused(f"{r.path}: `..` climbs above the workspace root")
        case Why.LINK_OUTSIDE:
            return FileRefused(
                f"{r.path} leads through a symlink that is outside the workspace {r.root}"
            )
        case Why.LOOP:
            return FileRefused(f"{r.path}: too many levels of symbolic links")
        case Why.MISSING:
            return FileRefused(f"{r.path}: no such directory {r.name!r}", missing=True)
        case Why.NOT_A_DIRECTORY:
            return FileRefused(f"{r.path}: {r.name!r} is not a directory")
        case Why.REPLACED:
            return FileRefused(f"{r.path}: {r.name!r} was replaced while the path was resolved")
        case Why.BECAME_SYMLINK:
            return FileRefused(f"{r.path} became a symlink while it was opened; refused")
        case Why.DEVICE | Why.SPECIAL:
            return FileRefused(f"{r.path} is not a regular file")
        case Why.ABSENT | Why.DANGLING:
            return FileRefused(f"{r.path} does not exist", missing=True)


def _require_regular(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise FileRefused(f"{path} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path} is not a regular file")


def _refusal(path: str, exc: OSError) -> FileRefused:
    if exc.errno == errno.ELOOP:
        return FileRefused(f"{path} became a symlink while it was opened; refused")
    if exc.errno == errno.ENOENT:
        return FileRefused(f"{path} does not exist", missing=True)
    if exc.errno == errno.EISDIR:
        return FileRefused(f"{path} is a directory")
    if exc.errno == errno.ENXIO:
        return FileRefused(f"{path} is not a regular file")
    return FileRefused(f"{path}: {exc.strerror or exc}")
