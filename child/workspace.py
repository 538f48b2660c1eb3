"""Workspace confinement: every path a tool touches resolves to somewhere under the root.

The walk is tether's one confined path walk (`tether.contain.confined`, shared with the parent's
file system for foreign agents and its evidence): `Workspace.locate` resolves a path one
component at a time from an open descriptor of the root, refusing `..` above the root, absolute
paths that do not spell it, symlinks leading out, swaps between check and use, and device nodes.
This module words the walk's refusals for a tool's reader: an `OutsideWorkspace` or `BadPath`
whose message names the reason (tools turn them into error results), or the `OSError` a missing
or non-directory component gives. `complete` uses `describe` to turn claimed paths into
artifacts or skipped entries, by the same rules the parent checks them with.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from tether.contain.confined import (
    NAME_MAX,
    OUTSIDE,
    PATH_MAX,
    ConfinedRoot,
    Landing,
    Refused,
    Why,
)
from tether.protocol.messages import Artifact, SkippedPath


class OutsideWorkspace(Exception):
    """A path resolved to somewhere outside the workspace root."""


class BadPath(ValueError):
    """A path that cannot name anything: NUL bytes, too long, a symlink loop."""


class Workspace:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._confined = ConfinedRoot(root, word=_word)
        self.root_text = self._confined.root
        """The root, resolved, as a string."""
        self.root = Path(self.root_text)

    def locate(self, path: str, *, make_parents: bool = False) -> Landing:
        """Walk `path` from the root (see the module docstring). With `make_parents`, missing
        directories on the way are created (inside the root, by the same walk)."""
        return self._confined.locate(path, make_parents=make_parents)

    def describe(self, path: str) -> Artifact | SkippedPath:
        """An `Artifact` for an existing path under the root, else why it was skipped.

        The artifact keeps the path itself (its directories resolved) rather than its target,
        so a symlink is reported as a symlink; the target must still be inside the root.
        """
        try:
            found = self._confined.look(path)
        except Refused as refused:
            return SkippedPath(path=path, reason=_skip_reason(refused))
        except OSError as exc:
            return SkippedPath(path=path, reason=f"cannot stat: {exc.strerror or exc}")
        return Artifact(
            path=found.path,
            size=found.st.st_size,
            fs_type=found.kind,
            modified_at=found.modified_at,
        )


def _word(r: Refused) -> Exception:
    """The walk's refusal as the tools have always told it."""
    match r.why:
        case Why.NUL:
            return BadPath(f"the path {r.path!r} contains a NUL byte")
        case Why.UNENCODABLE:
            return BadPath(f"the path {r.path!r} cannot be encoded as a file name")
        case Why.TOO_LONG:
            return BadPath(
                f"the path is too long ({len(os.fsencode(r.path))} bytes; the limit "
                f"is {PATH_MAX - 1})"
            )
        case Why.NAME_TOO_LONG:
            return BadPath(f"{r.path}: the name {r.name[:40]!r}... is longer than {NAME_MAX} bytes")
        case Why.ABSOLUTE_OUTSIDE:
            return OutsideWorkspace(f"the absolute path {r.path} is outside the workspace {r.root}")
        case Why.CLIMBS:
            return OutsideWorkspace(f"{r.path}: `..` climbs above the workspace root {r.root}")
        case Why.LINK_OUTSIDE:
            return OutsideWorkspace(
                f"{r.where} is a symlink to {r.target}, which is outside the workspace {r.root}"
            )
        case Why.LOOP:
            return BadPath(f"{r.path}: too many levels of symbolic links")
        case Why.MISSING:
            return FileNotFoundError(errno.ENOENT, f"no such directory: {r.where}")
        case Why.NOT_A_DIRECTORY:
            return NotADirectoryError(errno.ENOTDIR, f"not a directory: {r.where}")
        case Why.REPLACED:
            return OutsideWorkspace(
                f"{r.where} was replaced (by a symlink?) while the path was resolved"
            )
        case Why.BECAME_SYMLINK:
            return OutsideWorkspace(
                f"{r.where} became a symlink while it was being opened; refused"
            )
        case Why.DEVICE:
            return BadPath(f"{r.path} is a device node; tools never open one")
        case Why.ABSENT | Why.DANGLING | Why.SPECIAL:  # `look` only, never worded
            return BadPath(f"{r.path}: {r.why.value}")


def _skip_reason(r: Refused) -> str:
    """Why `complete` skips a claimed path."""
    if r.why in OUTSIDE:
        return "outside the workspace"
    match r.why:
        case Why.ABSENT | Why.MISSING | Why.DANGLING:
            return "does not exist"
        case Why.SPECIAL:
            return "not a regular file, directory or symlink"
        case Why.NOT_A_DIRECTORY:
            return f"cannot stat: {os.strerror(errno.ENOTDIR)}"
        case _:
            return f"cannot resolve: {r}"
