"""Which files a build sub-agent changed, measured by the parent: a snapshot of the workspace
before the run, one after, and their difference. The child's own word is never used.

A snapshot records, for every file and symlink under the root, what `lstat` says (type, size,
mtime, ctime, inode, mode) and a symlink's target. A file counts as modified when any of them
differs. ctime is the point: nothing a process can call sets it back (`utime` moves mtime, not
ctime), so a child that rewrites a file and restores its mtime is still caught; a file replaced
by rename gets a new inode. The price of reading metadata only: a file rewritten with identical
bytes counts as modified (it was written), and a plain `chmod` does too.

- Symlinks are recorded as links (their target text), never followed: a link out of the
  workspace does not pull the outside in, and a link loop cannot trap the walk.
- Directories count only through their entries (a directory's own mtime changes with any entry).
- `.git` (directory or worktree pointer file) is left out of the walk at any depth. Its
  contents are the repository's bookkeeping, not the workspace's files: `git status` alone
  rewrites the index, the object store can hold hundreds of thousands of files that would
  dominate the walk, and a verifier given `.git/index` as a "changed file" learns nothing.
  Changes to tracked files show up as the files themselves. What *in* a git directory git
  runs or takes commands from (its config, hooks, attributes) is watched all the same, with
  the other files the user's own tools run (`tether.parent.run.sensitive`): the workspace
  root's places, and the git places of every `.git` the walk meets deeper down (a nested
  repository). The diff lists their changes, with content, as `sensitive`.
- Cost: one `lstat` per entry and one `scandir` per directory, no file is read; a 10 000-file
  tree snapshots in about 50-65 ms on the project's shared 2-core machine, and two snapshots
  diff in about 13 ms (`python -m benchmarks.snapshot_cost`). `max_entries` bounds it: past
  that many entries the walk stops and the snapshot (and any diff with it) is marked
  incomplete, which the verifier policy treats as "possibly large", never as "small".
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from tether.parent.run import sensitive
from tether.protocol.messages import SensitiveChange

DEFAULT_EXCLUDE: frozenset[str] = frozenset({".git"})
DEFAULT_MAX_ENTRIES = 200_000

Kind = Literal["file", "symlink", "other"]


@dataclass(frozen=True)
class Entry:
    kind: Kind
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    mode: int
    target: str | None = None
    """A symlink's target, as written in the link."""


@dataclass(frozen=True)
class Snapshot:
    root: str
    entries: dict[str, Entry]
    """Relative path (with `/`) → what lstat said."""
    complete: bool = True
    """False when the walk stopped at `max_entries`."""
    unreadable: tuple[str, ...] = ()
    """Directories that could not be listed (their contents are unknown)."""
    seconds: float = 0.0
    watch: sensitive.Watch = field(default_factory=sensitive.Watch)
    """The files the user's own tools run (`sensitive.take`), nested repositories' included."""


@dataclass(frozen=True)
class WorkspaceDiff:
    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    complete: bool = True
    """False when either snapshot was incomplete or had an unreadable directory: more may have
    changed than is listed."""
    unreadable: tuple[str, ...] = field(default=())
    sensitive: tuple[SensitiveChange, ...] = ()
    """Changes to files the user's own tools run (`tether.parent.run.sensitive`), with their
    content; a path inside `.git` is listed here only."""

    @property
    def changed(self) -> tuple[str, ...]:
        """Every changed path, the sensitive ones included."""
        return tuple(sorted({*self.added, *self.modified, *self.deleted, *self._sensitive_paths}))

    @property
    def _sensitive_paths(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.sensitive)

    def __len__(self) -> int:
        return len(self.added) + len(self.modified) + len(self.deleted)

    def describe(self) -> str:
        """One line per changed path, marked `A`, `M` or `D`, for a verifier's prompt."""
        letter = {"added": "A", "modified": "M", "deleted": "D"}
        marks = {c.path: letter[c.change] for c in self.sensitive}
        marks.update({**dict.fromkeys(self.added, "A"), **dict.fromkeys(self.modified, "M")})
        marks.update(dict.fromkeys(self.deleted, "D"))
        lines = [f"{marks[p]} {p}" for p in sorted(marks)]
        if not self.complete:
            lines.append("(the workspace is larger than the snapshot limit: more may have changed)")
        return "\n".join(lines)


def take_snapshot(
    root: str | os.PathLike[str],
    *,
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> Snapshot:
    """Walk `root` without following symlinks and record every non-directory entry, and the
    files the user's own tools run (`Snapshot.watch`)."""
    started = time.perf_counter()
    top = os.fspath(root)
    skip = frozenset(exclude)
    entries: dict[str, Entry] = {}
    nested_git: list[str] = []
    unreadable: list[str] = []
    complete = True
    stack: list[tuple[str, str]] = [(top, "")]
    while stack and complete:
        path, rel = stack.pop()
        try:
            with os.scandir(path) as it:
                listed = list(it)
        except OSError:
            unreadable.append(rel or ".")
            continue
        for e in listed:
            if e.name == ".git" and rel:
                nested_git.append(f"{rel}/.git")  # a nested repository: git runs its hooks too
            if e.name in skip:
                continue
            name = f"{rel}/{e.name}" if rel else e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue  # gone between listing and lstat: it is not there now
            if stat.S_ISDIR(st.st_mode):
                stack.append((e.path, name))
                continue
            if len(entries) >= max_entries:
                complete = False
                break
            entries[name] = _entry(e.path, st)
    watch = sensitive.take(top, nested_git=nested_git)
    return Snapshot(
        root=top,
        entries=entries,
        complete=complete,
        unreadable=tuple(unreadable),
        seconds=time.perf_counter() - started,
        watch=watch,
    )


def _entry(path: str, st: os.stat_result) -> Entry:
    if stat.S_ISLNK(st.st_mode):
        try:
            target: str | None = os.readlink(path)
        except OSError:
            target = None
        kind: Kind = "symlink"
    else:
        target = None
        kind = "file" if stat.S_ISREG(st.st_mode) else "other"
    return Entry(
        kind=kind,
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        ino=st.st_ino,
        mode=st.st_mode,
        target=target,
    )


def diff(before: Snapshot, after: Snapshot) -> WorkspaceDiff:
    """What changed between two snapshots of the same root."""
    old, new = before.entries, after.entries
    return WorkspaceDiff(
        added=tuple(sorted(new.keys() - old.keys())),
        modified=tuple(sorted(p for p in old.keys() & new.keys() if old[p] != new[p])),
        deleted=tuple(sorted(old.keys() - new.keys())),
        # A directory that could not be listed hides its contents: say the diff may be partial.
        complete=before.complete and after.complete and not (before.unreadable or after.unreadable),
        unreadable=tuple(sorted({*before.unreadable, *after.unreadable})),
        sensitive=tuple(sensitive.changes(before.watch, after.watch, after.root)),
    )
