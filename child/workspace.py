"""Workspace confinement: every path a tool touches resolves to somewhere under the root.

The file tools go through `Workspace.locate`, which resolves a path the way the kernel would,
but one component at a time from an open descriptor of the root (an `openat` walk):

* every directory on the way is opened with `O_NOFOLLOW | O_DIRECTORY` relative to the one
  before it, so a symlink swapped in after it was inspected makes the open fail instead of
  leading elsewhere; the caller opens the final component with `O_NOFOLLOW` too;
* symlinks are followed by the walk itself: a relative target is spliced into the remaining
  components, an absolute one must name a place under the root (lexically), and a `..` that
  would climb above the root is refused, so no link can lead out;
* absolute paths must spell the root as a prefix (`/proc/self/root/...`, `/proc/self/cwd/...`
  and friends do not), NUL bytes and over-long paths or names are refused with their reason.

Every refusal is an `OutsideWorkspace` or `BadPath` whose message names the reason; tools turn
them into error results. `complete` uses `describe` to turn claimed paths into artifacts or
skipped entries.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import stat
from collections import deque
from pathlib import Path
from types import TracebackType

from tether.protocol.messages import Artifact, FsType, SkippedPath


class OutsideWorkspace(Exception):
    """A path resolved to somewhere outside the workspace root."""


class BadPath(ValueError):
    """A path that cannot name anything: NUL bytes, too long, a symlink loop."""


PATH_MAX = 4096
NAME_MAX = 255
MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Located:
    """Where a path landed: an open descriptor of its directory and the final name in it.

    `name` is never a symlink at the time of the walk (links are followed by the walk) and may
    not exist; `"."` means the directory itself. Open it with `dir_fd=self.dir_fd` and
    `O_NOFOLLOW`. `path` is the absolute path it corresponds to, for messages and results.
    Close it (or use it as a context manager) to release the descriptor.
    """

    __slots__ = ("dir_fd", "name", "path")

    def __init__(self, dir_fd: int, name: str, path: Path) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self.path = path

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Located:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def lstat(self) -> os.stat_result | None:
        """The final component's `lstat`, or `None` if it does not exist."""
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open(self, flags: int, mode: int = 0o644) -> int:
        """Open the final component without following a symlink swapped in since the walk."""
        try:
            return os.open(
                self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.dir_fd
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OutsideWorkspace(
                    f"{self.path} became a symlink while it was being opened; refused"
                ) from None
            raise


class Workspace:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        # os.path rather than Path.resolve/is_dir: the same calls, a third of the cost per run.
        real = os.path.realpath(root, strict=True)
        if not os.path.isdir(real):
            raise NotADirectoryError(f"workspace {real} is not a directory")
        self.root = Path(real)
        self.root_text = real
        """`root` as a string."""

    def _absolute(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.root / p

    def _inside(self, p: Path) -> bool:
        return p == self.root or p.is_relative_to(self.root)

    # --- the walk -------------------------------------------------------------------------------

    def _root_relative(self, path: str, what: str) -> list[str]:
        """The components of an absolute `path` below the root, or `OutsideWorkspace`."""
        parts = [c for c in path.split("/") if c not in ("", ".")]
        root = list(self.root.parts[1:])
        if parts[: len(root)] != root:
            raise OutsideWorkspace(f"{what} is outside the workspace {self.root}")
        return parts[len(root) :]

    def locate(self, path: str, *, make_parents: bool = False) -> Located:
        """Walk `path` from the root; see the module docstring. With `make_parents`, missing
        directories on the way are created (inside the root, by the same walk)."""
        if "\0" in path:
            raise BadPath(f"the path {path!r} contains a NUL byte")
        if len(os.fsencode(path)) >= PATH_MAX:
            raise BadPath(
                f"the path is too long ({len(os.fsencode(path))} bytes; the limit "
                f"is {PATH_MAX - 1})"
            )
        if os.path.isabs(path):
            pending = deque(self._root_relative(path, f"the absolute path {path}"))
        else:
            pending = deque(path.split("/"))
        root_fd = os.open(self.root, _DIR_FLAGS)
        stack: list[tuple[int, str]] = [(root_fd, "")]
        links = 0
        try:
            while pending:
                comp = pending.popleft()
                if comp in ("", "."):
                    continue
                if comp == "..":
                    if len(stack) == 1:
                        raise OutsideWorkspace(
                            f"{path}: `..` climbs above the workspace root {self.root}"
                        )
                    os.close(stack.pop()[0])
                    continue
                if len(os.fsencode(comp)) > NAME_MAX:
                    raise BadPath(
                        f"{path}: the name {comp[:40]!r}... is longer than {NAME_MAX} bytes"
                    )
                last = all(c in ("", ".") for c in pending)
                here = stack[-1][0]
                where = self._join(stack, comp)
                try:
                    st = os.stat(comp, dir_fd=here, follow_symlinks=False)
                except FileNotFoundError:
                    if last:
                        return self._located(stack, comp)
                    if not make_parents:
                        raise FileNotFoundError(
                            errno.ENOENT, f"no such directory: {where}"
                        ) from None
                    os.mkdir(comp, 0o755, dir_fd=here)
                    st = os.stat(comp, dir_fd=here, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise BadPath(f"{path}: too many levels of symbolic links")
                    target = os.readlink(comp, dir_fd=here)
                    if os.path.isabs(target):
                        inside = self._root_relative(
                            target, f"{where} is a symlink to {target}, which"
                        )
                        for fd, _ in stack[1:]:
                            os.close(fd)
                        del stack[1:]
                        pending.extendleft(reversed(inside))
                    else:
                        pending.extendleft(reversed(target.split("/")))
                    continue
                if last:
                    return self._located(stack, comp)
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, f"not a directory: {where}")
                try:
                    fd = os.open(comp, _DIR_FLAGS, dir_fd=here)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise OutsideWorkspace(
                            f"{where} was replaced (by a symlink?) while the path was resolved"
                        ) from None
                    raise
                stack.append((fd, comp))
            return self._located(stack, ".")
        except BaseException:
            for fd, _ in stack:
                os.close(fd)
            raise

    def _join(self, stack: list[tuple[int, str]], name: str) -> Path:
        return self.root.joinpath(*(n for _, n in stack[1:]), name)

    def _located(self, stack: list[tuple[int, str]], name: str) -> Located:
        names = [n for _, n in stack[1:]]
        path = self.root.joinpath(*names, name) if name != "." else self.root.joinpath(*names)
        for fd, _ in stack[:-1]:
            os.close(fd)
        fd = stack[-1][0]
        stack.clear()
        return Located(fd, name, path)

    def resolve(self, path: str) -> Path:
        """The fully resolved path, or `OutsideWorkspace` if it leaves the root."""
        resolved = self._absolute(path).resolve()
        if not self._inside(resolved):
            raise OutsideWorkspace(f"{path} is outside the workspace {self.root}")
        return resolved

    def describe(self, path: str) -> Artifact | SkippedPath:
        """An `Artifact` for an existing path under the root, else why it was skipped.

        The artifact keeps the path itself (its parent resolved) rather than its target, so a
        symlink is reported as a symlink; the target must still be inside the root.
        """
        raw = self._absolute(path)
        try:
            # `..` as the last part must be resolved too, or the check below would be lexical.
            if raw.name in ("", ".", ".."):
                located = raw.resolve()
            else:
                located = raw.parent.resolve() / raw.name
        except (OSError, RuntimeError) as exc:
            return SkippedPath(path=path, reason=f"cannot resolve: {exc}")
        if not self._inside(located) or not self._inside(located.resolve()):
            return SkippedPath(path=path, reason="outside the workspace")
        try:
            st = os.lstat(located)
            if stat.S_ISLNK(st.st_mode):
                os.stat(located)  # a dangling link is not a deliverable
        except FileNotFoundError:
            return SkippedPath(path=path, reason="does not exist")
        except OSError as exc:
            return SkippedPath(path=path, reason=f"cannot stat: {exc.strerror or exc}")
        fs_type: FsType
        if stat.S_ISLNK(st.st_mode):
            fs_type = "symlink"
        elif stat.S_ISDIR(st.st_mode):
            fs_type = "directory"
        elif stat.S_ISREG(st.st_mode):
            fs_type = "file"
        else:
            return SkippedPath(path=path, reason="not a regular file, directory or symlink")
        modified = dt.datetime.fromtimestamp(st.st_mtime, dt.UTC).isoformat()
        return Artifact(path=str(located), size=st.st_size, fs_type=fs_type, modified_at=modified)
