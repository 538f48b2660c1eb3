"""A workspace's git directories: where git finds code to run on the user's next command.

Found by the parent twice — for a sandboxed child's plan (`Plan.git_guard`: what the sandbox
refuses to let the child write, `mounts.guard_git`) and for its watch of the files the user's
own tools run (`tether.parent.run.sensitive`) — and so found in one place:

- the workspace's `.git`: a directory (the repository), or a file (a worktree's or a
  submodule's `gitdir:` pointer, which decides which repository git uses here);
- each submodule's git directory under `.git/modules` (a submodule named `a/b` lives in
  `modules/a/b`; a directory holding `HEAD` is one), a few levels deep.

Every directory is opened `O_NOFOLLOW` from the one before: a link is never followed, so a
`.git` that is a symbolic link is reported as such and never looked into.

Only the standard library (this package runs in the trampoline).
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

MAX_DEPTH = 4
"""How deep submodules (and the directories a submodule's name makes) are looked for."""
MAX_NAMES = 200
"""Entries looked at in one directory of `.git/modules`."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(at: int, rel: str) -> int | None:
    """`rel` under the directory `at`, opened one component at a time, never through a link;
    `None` when it is not there (or not a directory all the way)."""
    fd = os.dup(at)
    for part in (p for p in rel.split("/") if p):
        if part in (".", ".."):
            os.close(fd)
            return None
        try:
            nxt = os.open(part, _DIR, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd


def lstat_at(at: int, rel: str) -> os.stat_result | None:
    """What `lstat` says of `rel` under `at` (no link followed on the way), or `None`."""
    parent, _, leaf = rel.rpartition("/")
    fd = open_dir(at, parent)
    if fd is None:
        return None
    try:
        return os.stat(leaf, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def submodule_dirs(root_fd: int, rel: str, depth: int = 0) -> Iterator[str]:
    """The git directories under `rel` (a `modules` directory), relative to `root_fd`."""
    fd = open_dir(root_fd, rel)
    if fd is None:
        return
    try:
        with os.scandir(fd) as it:
            names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        names = []
    finally:
        os.close(fd)
    for name in names[:MAX_NAMES]:
        sub = f"{rel}/{name}"
        if lstat_at(root_fd, f"{sub}/HEAD") is not None:
            yield sub
            if depth < MAX_DEPTH:
                yield from submodule_dirs(root_fd, f"{sub}/modules", depth + 1)
        elif depth < MAX_DEPTH:
            yield from submodule_dirs(root_fd, sub, depth + 1)


def git_entries(root_fd: int, rel: str = ".git") -> list[str]:
    """The `.git` at `rel` (a directory or a `gitdir:` file; a link or anything else is left
    out) and, for a directory, its submodules' git directories: relative paths, outermost
    first."""
    st = lstat_at(root_fd, rel)
    if st is None:
        return []
    if stat.S_ISREG(st.st_mode):
        return [rel]
    if not stat.S_ISDIR(st.st_mode):
        return []
    return [rel, *submodule_dirs(root_fd, f"{rel}/modules")]


def workspace_git_entries(workspace: str) -> list[str]:
    """`git_entries` of the workspace's own `.git` (empty when the workspace cannot be read)."""
    try:
        fd = os.open(workspace, _DIR & ~os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        return git_entries(fd)
    finally:
        os.close(fd)
