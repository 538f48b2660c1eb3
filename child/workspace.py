"""Workspace confinement: every path a tool touches resolves to somewhere under the root.

Resolution follows symlinks and `..` before the check, so neither can lead outside. The file
tools to come (read_file, write_file, ...) go through `resolve`; `complete` uses `describe`
to turn claimed paths into artifacts or skipped entries.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

from tether.protocol.messages import Artifact, FsType, SkippedPath


class OutsideWorkspace(Exception):
    """A path resolved to somewhere outside the workspace root."""


class Workspace:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"workspace {self.root} is not a directory")

    def _absolute(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.root / p

    def _inside(self, p: Path) -> bool:
        return p == self.root or p.is_relative_to(self.root)

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
