"""File reads and writes the parent does for a foreign agent, confined to the workspace.

An ACP agent asks the client (the parent) to read and write files (`fs/read_text_file`,
`fs/write_text_file`). The parent runs with more authority than the agent (often root, always
outside its sandbox), so every path is resolved the way the kernel would, one component at a
time from an open descriptor of the root (an `openat` walk), and never by a path string:

* each directory on the way is opened with `O_NOFOLLOW | O_DIRECTORY` relative to the one
  before it, so a component swapped for a symlink after it was inspected fails the open instead
  of leading elsewhere; the final file is opened with `O_NOFOLLOW` too;
* symlinks met on the way are followed by the walk itself: a relative target is spliced into
  the remaining components, an absolute one must spell the root as its prefix, and a `..` that
  would climb above the root is refused, so no link can lead out;
* NUL bytes and over-long paths or names are refused, and so is everything but a regular file.

Writes also refuse a file with more than one hard link (writing it would change a file outside
the workspace that shares its inode), check that after opening the descriptor (so no swap can
slip in between), and are refused in explore mode by the caller. Reads and writes are bounded
(`MAX_READ_BYTES`, `MAX_WRITE_BYTES`). Reads of a hard-linked file are served: a link the agent
made names a file it could already read (the kernel's `protected_hardlinks`), and one that was
there before the run was put there by the workspace's owner.

Every refusal is a `FileRefused` whose message names the reason, fit to show the agent.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import stat
from collections import deque
from pathlib import Path

from tether.protocol.messages import Artifact

MAX_READ_BYTES = 8 * 1024 * 1024
"""The largest file served to `fs/read_text_file` (before `line`/`limit` select from it)."""
MAX_WRITE_BYTES = 8 * 1024 * 1024
"""The largest content `fs/write_text_file` writes."""
PATH_MAX = 4096
NAME_MAX = 255
MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class FileRefused(Exception):
    """The parent will not do this file operation for the agent; the message says why."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing
        """The file (or a directory on the way) does not exist."""


class ConfinedFiles:
    """Text file I/O under one workspace root, safe against a hostile agent's paths."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"workspace {self.root} is not a directory")

    # --- operations ---------------------------------------------------------------------------

    def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """The file's text (from 1-based `line`, at most `limit` lines), or `FileRefused`."""
        if line is not None and line < 1:
            raise FileRefused(f"line must be 1 or more (got {line})")
        if limit is not None and limit < 0:
            raise FileRefused(f"limit must not be negative (got {limit})")
        dir_fd, name = self._walk(path, make_parents=False)
        try:
            try:
                fd = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
                )
            except OSError as exc:
                raise _refusal(path, exc) from None
        finally:
            os.close(dir_fd)
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
        dir_fd, name = self._walk(path, make_parents=True)
        try:
            if name == ".":
                raise FileRefused(f"{path} is a directory")
            try:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                    0o644,
                    dir_fd=dir_fd,
                )
            except OSError as exc:
                raise _refusal(path, exc) from None
        finally:
            os.close(dir_fd)
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
            dir_fd, name = self._walk(path, make_parents=False)
        except FileRefused:
            return None
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(dir_fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        modified = dt.datetime.fromtimestamp(st.st_mtime, dt.UTC).isoformat()
        return Artifact(path=path, size=st.st_size, fs_type="file", modified_at=modified)

    # --- the walk -----------------------------------------------------------------------------

    def _below_root(self, path: str, what: str) -> list[str]:
        parts = [c for c in path.split("/") if c not in ("", ".")]
        root = list(self.root.parts[1:])
        if parts[: len(root)] != root:
            raise FileRefused(f"{what} is outside the workspace {self.root}")
        return parts[len(root) :]

    def _walk(self, path: str, *, make_parents: bool) -> tuple[int, str]:
        """An open descriptor of the directory `path` lands in, and the final name in it (never
        a symlink at the time of the walk; `"."` for the directory itself)."""
        if "\0" in path:
            raise FileRefused("the path contains a NUL byte")
        if len(os.fsencode(path)) >= PATH_MAX:
            raise FileRefused(f"the path is longer than {PATH_MAX - 1} bytes")
        if os.path.isabs(path):
            pending = deque(self._below_root(path, f"the path {path}"))
        else:
            pending = deque(path.split("/"))
        stack = [os.open(self.root, _DIR_FLAGS)]
        links = 0
        try:
            while pending:
                comp = pending.popleft()
                if comp in ("", "."):
                    continue
                if comp == "..":
                    if len(stack) == 1:
                        raise FileRefused(f"{path}: `..` climbs above the workspace root")
                    os.close(stack.pop())
                    continue
                if len(os.fsencode(comp)) > NAME_MAX:
                    raise FileRefused(f"{path}: a name is longer than {NAME_MAX} bytes")
                last = all(c in ("", ".") for c in pending)
                here = stack[-1]
                try:
                    st = os.stat(comp, dir_fd=here, follow_symlinks=False)
                except FileNotFoundError:
                    if last:
                        return self._landed(stack, comp)
                    if not make_parents:
                        raise FileRefused(
                            f"{path}: no such directory {comp!r}", missing=True
                        ) from None
                    os.mkdir(comp, 0o755, dir_fd=here)
                    st = os.stat(comp, dir_fd=here, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise FileRefused(f"{path}: too many levels of symbolic links")
                    target = os.readlink(comp, dir_fd=here)
                    if os.path.isabs(target):
                        inside = self._below_root(target, f"{path} leads through a symlink that")
                        for fd in stack[1:]:
                            os.close(fd)
                        del stack[1:]
                        pending.extendleft(reversed(inside))
                    else:
                        pending.extendleft(reversed(target.split("/")))
                    continue
                if last:
                    return self._landed(stack, comp)
                if not stat.S_ISDIR(st.st_mode):
                    raise FileRefused(f"{path}: {comp!r} is not a directory")
                try:
                    stack.append(os.open(comp, _DIR_FLAGS, dir_fd=here))
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise FileRefused(
                            f"{path}: {comp!r} was replaced while the path was resolved"
                        ) from None
                    raise
            return self._landed(stack, ".")
        except OSError as exc:
            for fd in stack:
                os.close(fd)
            raise _refusal(path, exc) from None
        except BaseException:
            for fd in stack:
                os.close(fd)
            raise

    @staticmethod
    def _landed(stack: list[int], name: str) -> tuple[int, str]:
        for fd in stack[:-1]:
            os.close(fd)
        fd = stack[-1]
        stack.clear()
        return fd, name


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
