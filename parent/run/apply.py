"""Applying a layered run's change set to the workspace: all of it or nothing, each file
replaced atomically, never through a symbolic link, refused on conflict.

Theory of operation
-------------------
`apply(change_set)` runs under an exclusive `flock` of the workspace directory, so two
applies (two sub-agents, two processes) never interleave; the first one applied wins, and the
second finds its conflicts. In order:

1. check: every changed path is looked at in the workspace now, each directory on the way
   opened `O_NOFOLLOW` from the one before (a symbolic link or a file where the base had a
   directory is a conflict, never followed). What a change replaces or removes must still be
   the base's (a file's SHA-256, a link's target, a directory); an added path must be free.
   A path that already holds what the layer holds is left as it is. Any conflict refuses the
   whole change set, with both sides' content (`Conflict`); nothing is written;
2. stage: each new file or link is written under a temporary name in its directory (missing
   directories made), its content read from the layer and checked against the change set's
   SHA-256 (a layer changed since its change set was computed is refused), permission bits
   only (never setuid, setgid or sticky), and, as root, owned as what it replaces or its
   directory;
3. commit: each staged entry renamed over its path (atomic: a reader sees the old file or
   the new one), what it replaces kept under a backup name; removals renamed to backups;
   removed directories taken out last, innermost first. Any failure undoes every step taken,
   in reverse, so nothing is left half-applied; then the backups are removed.

A change whose base could not be read (`base_sha256` missing: the workspace had changed when
the change set was computed) is always a conflict.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

from tether.parent.run.changes import BASE_CHANGED
from tether.protocol.messages import ApplyOutcome, ApplyPolicy, ChangeSet, Conflict, FileChange

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
SHOWN_BYTES = 4096
"""The most of each side's content a conflict shows."""
_TAG = ".tether-apply-"


class _Conflicted(Exception):
    def __init__(self, conflict: Conflict) -> None:
        super().__init__(conflict.reason)
        self.conflict = conflict


@dataclass
class _Step:
    """One change of the commit phase and how to undo it."""

    dir_fd: int
    name: str
    staged: str | None = None
    """The staged entry's temporary name (a file or link to put in place)."""
    backup: str | None = None
    """Where what was at `name` went."""
    removed_dir: bool = False
    done: bool = False
    depth: int = 0
    dir_backup: bool = False
    """The backup is a directory (removed, or replaced by a file or link)."""


@dataclass
class _Plan:
    steps: list[_Step] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    made_dirs: list[tuple[int, str]] = field(default_factory=list)


def content_root(change_set: ChangeSet) -> str:
    """Where the layer holds the changed content (an overlay's `upper/`, a copy's `tree/`)."""
    sub = "upper" if change_set.method in ("overlay", "overlay-userns") else "tree"
    return os.path.join(change_set.layer, sub)


def apply(change_set: ChangeSet, *, policy: ApplyPolicy = "never") -> ApplyOutcome:
    """Apply `change_set` to its workspace (see the module docstring); never raises for what
    the workspace or the layer hold: a conflict or a failure is the outcome's `state`."""
    try:
        ws = os.open(change_set.workspace, _DIR & ~os.O_NOFOLLOW)
    except OSError as exc:
        return ApplyOutcome(
            state="failed", policy=policy, message=f"the workspace cannot be opened: {exc}"
        )
    try:
        fcntl.flock(ws, fcntl.LOCK_EX)
        try:
            return _apply(ws, change_set, policy)
        finally:
            fcntl.flock(ws, fcntl.LOCK_UN)
    finally:
        os.close(ws)


def _apply(ws: int, cs: ChangeSet, policy: ApplyPolicy) -> ApplyOutcome:
    if not cs.changes:
        return ApplyOutcome(state="applied", policy=policy, message="nothing to apply")
    try:
        layer = os.open(content_root(cs), _DIR)
    except OSError as exc:
        return ApplyOutcome(
            state="failed", policy=policy, message=f"the layer cannot be read: {exc.strerror}"
        )
    try:
        made = {c.path for c in cs.changes if c.fs_type == "directory" and c.change != "deleted"}
        conflicts = [c for c in (_check(ws, layer, change, made) for change in cs.changes) if c]
        if conflicts:
            return ApplyOutcome(
                state="conflict",
                policy=policy,
                message=f"{len(conflicts)} path(s) changed in the workspace since the layer's "
                "base; nothing was applied",
                conflicts=conflicts,
            )
        plan = _Plan()
        try:
            _stage(ws, layer, cs, plan)
            _commit(plan)
        except _Conflicted as exc:
            _undo(plan)
            return ApplyOutcome(
                state="conflict",
                policy=policy,
                message="the workspace changed while the change set was applied; every change "
                "made was undone",
                conflicts=[exc.conflict],
            )
        except OSError as exc:
            _undo(plan)
            return ApplyOutcome(
                state="failed",
                policy=policy,
                message=f"applying failed ({exc}); every change made was undone",
            )
        finally:
            _cleanup(plan)
        paths = sorted({p for c in cs.changes for p in (c.path, c.old_path) if p})
        return ApplyOutcome(state="applied", policy=policy, paths=paths)
    finally:
        os.close(layer)


# --- looking at the workspace ---------------------------------------------------------------


def _walk_dir(root: int, rel: str) -> int | str | None:
    """The directory `rel` under `root`, each component opened without following a link: its
    fd, `None` when missing, or why it cannot be (a link or a file on the way)."""
    fd = os.dup(root)
    for part in (p for p in rel.split("/") if p):
        try:
            nxt = os.open(part, _DIR, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno == errno.ENOENT:
                return None
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                return f"{part!r} on the way is a symbolic link or a file now"
            return f"cannot be opened: {exc.strerror}"
        os.close(fd)
        fd = nxt
    return fd


@dataclass
class _There:
    kind: str
    """`absent`, `file`, `directory`, `symlink`, `other`."""
    mode: int | None = None
    sha256: str | None = None
    target: str | None = None
    data: bytes | None = None


def _look(root: int, rel: str) -> _There | str:
    parent, _, name = rel.rpartition("/")
    fd = _walk_dir(root, parent)
    if isinstance(fd, str):
        return fd
    if fd is None:
        return _There("absent")
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return _There("absent")
        if stat.S_ISLNK(st.st_mode):
            return _There("symlink", target=os.readlink(name, dir_fd=fd))
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            return _There("directory", mode=mode)
        if not stat.S_ISREG(st.st_mode):
            return _There("other")
        digest, data = _read(os.open(name, _FILE, dir_fd=fd))
        return _There("file", mode=mode, sha256=digest, data=data)
    finally:
        os.close(fd)


def _read(fd: int) -> tuple[str, bytes]:
    try:
        h = hashlib.sha256()
        head = b""
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            if len(head) < SHOWN_BYTES:
                head += chunk[: SHOWN_BYTES - len(head)]
        return h.hexdigest(), head
    finally:
        os.close(fd)


def _shown(there: _There | str) -> str:
    if isinstance(there, str):
        return there
    if there.kind == "absent":
        return "(nothing)"
    if there.kind == "symlink":
        return f"(a symbolic link to {there.target!r})"
    if there.kind == "directory":
        return "(a directory)"
    if there.kind == "file":
        data = there.data or b""
        if b"\0" in data:
            return f"(binary, sha256 {there.sha256})"
        return data.decode("utf-8", "replace")
    return "(not a file, directory or link)"


def _matches(there: _There, kind: str, sha256: str | None, target: str | None) -> bool:
    if there.kind != kind:
        return False
    if kind == "file":
        return sha256 is not None and there.sha256 == sha256
    if kind == "symlink":
        return there.target == target
    return True


def _check(ws: int, layer: int, c: FileChange, made: set[str]) -> Conflict | None:
    """Whether the workspace still holds the base where `c` changes it (`made`: directories
    the change set makes, where a file of the base may be now)."""
    if c.note == BASE_CHANGED:
        return _conflict(ws, layer, c, c.path, BASE_CHANGED)
    where = [(c.old_path, "deleted")] if c.change == "renamed" and c.old_path else []
    where.append((c.path, c.change if c.change != "renamed" else "added"))
    for rel, role in where:
        there = _look(ws, rel)
        if isinstance(there, str) and _under_made(rel, made):
            there = _There("absent")  # under a file the change set turns into a directory
        if isinstance(there, str):
            return _conflict(ws, layer, c, rel, there)
        if role == "added":
            if there.kind == "absent" or _holds_new(there, c):
                continue
            if c.change == "modified":  # a type change: the base's entry is replaced
                continue
            return _conflict(ws, layer, c, rel, "the workspace has something there now")
        base_kind: str = c.fs_type
        if role == "modified":
            if _holds_new(there, c):
                continue
            base_kind = _base_kind(c)
        if role == "deleted" and there.kind == "absent":
            continue  # already gone
        target = c.base_target
        if not _matches(there, base_kind, c.base_sha256, target):
            return _conflict(ws, layer, c, rel, "the workspace changed here since the layer's base")
    return None


def _under_made(rel: str, made: set[str]) -> bool:
    parts = rel.split("/")
    return any("/".join(parts[:i]) in made for i in range(1, len(parts)))


def _base_kind(c: FileChange) -> str:
    return c.base_fs_type or c.fs_type


def _holds_new(there: _There, c: FileChange) -> bool:
    """The workspace already holds what the layer does (a mode included)."""
    if c.change == "deleted" or not _matches(there, c.fs_type, c.sha256, c.target):
        return False
    return c.fs_type == "symlink" or c.mode is None or there.mode == c.mode


def _conflict(ws: int, layer: int, c: FileChange, rel: str, reason: str) -> Conflict:
    mine = _look(layer, c.path) if c.change != "deleted" else _There("absent")
    return Conflict(
        path=rel,
        reason=reason,
        workspace=_shown(_look(ws, rel)),
        layer=_shown(mine),
    )


# --- staging and committing -----------------------------------------------------------------


def _dir_for(ws: int, rel: str, plan: _Plan) -> int:
    """The directory `rel` under the workspace, made (and noted) where missing; raises
    `_Conflicted` for a link or a file on the way."""
    fd = os.dup(ws)
    plan.fds.append(fd)
    for part in (p for p in rel.split("/") if p):
        try:
            nxt = os.open(part, _DIR, dir_fd=fd)
        except FileNotFoundError:
            os.mkdir(part, 0o755, dir_fd=fd)
            plan.made_dirs.append((fd, part))
            _own_like_parent(fd, part)
            nxt = os.open(part, _DIR, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise _Conflicted(
                    Conflict(path=rel, reason=f"{part!r} on the way is a link or a file now")
                ) from None
            raise
        plan.fds.append(nxt)
        fd = nxt
    return fd


def _own_like_parent(dir_fd: int, name: str) -> None:
    """As root, what tether writes is owned as its directory is (never root's by accident)."""
    if os.geteuid() != 0:
        return
    st = os.fstat(dir_fd)
    os.chown(name, st.st_uid, st.st_gid, dir_fd=dir_fd, follow_symlinks=False)


def _temp_name(name: str) -> str:
    return f"{_TAG}{os.urandom(6).hex()}-{name}"[:255]


def _stage(ws: int, layer: int, cs: ChangeSet, plan: _Plan) -> None:
    removals: list[tuple[int, int, str, bool]] = []
    for c in sorted(cs.changes, key=lambda c: (c.path.count("/"), c.path)):
        if c.change == "renamed" and c.old_path:
            parent, _, name = c.old_path.rpartition("/")
            removals.append((c.old_path.count("/"), _dir_for(ws, parent, plan), name, False))
        parent, _, name = c.path.rpartition("/")
        if c.change == "deleted":
            is_dir = c.fs_type == "directory"
            removals.append((c.path.count("/"), _dir_for(ws, parent, plan), name, is_dir))
            continue
        there = _look(ws, c.path)
        if not isinstance(there, str) and _holds_new(there, c) and c.fs_type != "directory":
            continue  # already there
        dir_fd = _dir_for(ws, parent, plan)
        if c.fs_type == "directory":
            _stage_dir(dir_fd, name, c, plan, c.path.count("/"))
            continue
        temp = _temp_name(name)
        step = _Step(dir_fd, name, staged=temp, depth=c.path.count("/"))
        plan.steps.append(step)
        if c.fs_type == "symlink":
            assert c.target is not None
            os.symlink(c.target, temp, dir_fd=dir_fd)
        else:
            _stage_file(layer, c, dir_fd, temp)
        _own(dir_fd, name, temp)
    # Removals after every write, innermost first (a directory after what was in it).
    for depth, dir_fd, name, is_dir in sorted(removals, key=lambda r: -r[0]):
        plan.steps.append(_Step(dir_fd, name, removed_dir=is_dir, depth=depth, dir_backup=is_dir))


def _stage_dir(dir_fd: int, name: str, c: FileChange, plan: _Plan, depth: int) -> None:
    mode = (c.mode or 0o755) & 0o777
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        os.chmod(name, mode, dir_fd=dir_fd)
        return
    if st is not None:
        # The base's file or link (checked) where the layer has a directory: moved aside, kept
        # to be put back if anything later fails.
        backup = _temp_name(name)
        os.rename(name, backup, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        plan.steps.append(_Step(dir_fd, name, backup=backup, done=True, depth=depth))
    os.mkdir(name, mode, dir_fd=dir_fd)
    plan.made_dirs.append((dir_fd, name))
    _own_like_parent(dir_fd, name)
    os.chmod(name, mode, dir_fd=dir_fd)


def _stage_file(layer: int, c: FileChange, dir_fd: int, temp: str) -> None:
    parent, _, name = c.path.rpartition("/")
    src_dir = _walk_dir(layer, parent)
    if not isinstance(src_dir, int):
        raise OSError(f"the layer no longer holds {c.path}")
    try:
        src = os.open(name, _FILE, dir_fd=src_dir)
    finally:
        os.close(src_dir)
    try:
        out = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
        try:
            h = hashlib.sha256()
            while chunk := os.read(src, 1 << 20):
                h.update(chunk)
                os.write(out, chunk)
            if h.hexdigest() != c.sha256:
                raise OSError(
                    f"the layer's {c.path} is not what its change set says (changed since)"
                )
            os.fchmod(out, (c.mode if c.mode is not None else 0o644) & 0o777)
            os.fsync(out)
        finally:
            os.close(out)
    finally:
        os.close(src)


def _own(dir_fd: int, name: str, temp: str) -> None:
    """As root: the staged entry owned as what it replaces, else as its directory."""
    if os.geteuid() != 0:
        return
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = os.fstat(dir_fd)
    os.chown(temp, st.st_uid, st.st_gid, dir_fd=dir_fd, follow_symlinks=False)


def _commit(plan: _Plan) -> None:
    for step in plan.steps:
        exists = _exists(step.dir_fd, step.name)
        if step.done:
            continue  # moved aside while staging
        if exists and step.staged is not None and _is_dir(step.dir_fd, step.name):
            # A type change (a directory where the layer has a file or link): moved aside, and
            # it must hold nothing the change set does not remove (checked below).
            step.backup = _temp_name(step.name)
            os.rename(step.name, step.backup, src_dir_fd=step.dir_fd, dst_dir_fd=step.dir_fd)
            step.dir_backup = True
            exists = False
        if exists and step.backup is None:
            step.backup = _temp_name(step.name)
            if step.staged is not None:
                # Kept by a second name: the staged entry then replaces it in one rename.
                os.link(
                    step.name,
                    step.backup,
                    src_dir_fd=step.dir_fd,
                    dst_dir_fd=step.dir_fd,
                    follow_symlinks=False,
                )
            else:
                os.rename(step.name, step.backup, src_dir_fd=step.dir_fd, dst_dir_fd=step.dir_fd)
        if step.staged is not None:
            os.rename(step.staged, step.name, src_dir_fd=step.dir_fd, dst_dir_fd=step.dir_fd)
            step.staged = None
        step.done = True
    # A removed directory must hold nothing but what this apply moved aside in it: anything
    # else is the workspace's own, new since the base (its removal is then a conflict).
    for step in plan.steps:
        if step.dir_backup and step.backup is not None:
            fd = _open_in(step.dir_fd, step.backup)
            try:
                with os.scandir(fd) as it:
                    foreign = [e.name for e in it if not e.name.startswith(_TAG)]
            finally:
                os.close(fd)
            if foreign:
                raise _Conflicted(
                    Conflict(
                        path=step.name,
                        reason="the workspace has new entries in a directory the change set "
                        f"removes ({', '.join(sorted(foreign)[:5])})",
                    )
                )


def _open_in(dir_fd: int, name: str) -> int:
    return os.open(name, _DIR, dir_fd=dir_fd)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _is_dir(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _undo(plan: _Plan) -> None:
    for step in reversed(plan.steps):
        with contextlib.suppress(OSError):
            if step.staged is not None:
                os.unlink(step.staged, dir_fd=step.dir_fd)
                step.staged = None
            if step.done and step.backup is not None:
                if _is_dir(step.dir_fd, step.name) and not step.dir_backup:
                    os.rmdir(step.name, dir_fd=step.dir_fd)  # made where the file was
                elif step.dir_backup and _exists(step.dir_fd, step.name):
                    os.unlink(step.name, dir_fd=step.dir_fd)  # the file put where it was
                os.rename(step.backup, step.name, src_dir_fd=step.dir_fd, dst_dir_fd=step.dir_fd)
                step.backup = None
            elif step.done and step.backup is None and not step.removed_dir:
                os.unlink(step.name, dir_fd=step.dir_fd)  # it was added
    for dir_fd, name in reversed(plan.made_dirs):
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=dir_fd)


def _cleanup(plan: _Plan) -> None:
    for step in plan.steps:
        with contextlib.suppress(OSError):
            if step.staged is not None:
                os.unlink(step.staged, dir_fd=step.dir_fd)
            if step.backup is not None and not step.dir_backup:
                os.unlink(step.backup, dir_fd=step.dir_fd)
    # Directories moved aside last, innermost first: what was in them is gone by now.
    for step in sorted(plan.steps, key=lambda s: -s.depth):
        with contextlib.suppress(OSError):
            if step.backup is not None and step.dir_backup:
                os.rmdir(step.backup, dir_fd=step.dir_fd)
    for fd in plan.fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def discard(change_set: ChangeSet) -> None:
    """Remove the layer directory a change set names (one this process does not keep: read
    from a result file). Only a directory of this user's own that holds a layer (`upper/` and
    `work/`, or `tree/`) directly under a `tether-layers-*` directory is removed, so a forged
    result cannot point it anywhere else. Raises `ValueError` otherwise."""
    root = os.path.realpath(change_set.layer)
    if not os.path.basename(os.path.dirname(root)).startswith("tether-layers-"):
        raise ValueError(f"{change_set.layer} is not a tether layer directory")
    if not os.path.isdir(content_root(change_set)) or os.stat(root).st_uid != os.geteuid():
        raise ValueError(f"{change_set.layer} holds no layer of this user's")
    from tether.parent.process.layers import remove

    remove(root)


def lines(outcome: ApplyOutcome) -> Iterator[str]:
    """The outcome for a person: a line, then one per conflict."""
    yield f"{outcome.state}: {outcome.message or ', '.join(outcome.paths) or 'nothing to apply'}"
    for c in outcome.conflicts:
        yield f"  conflict at {c.path}: {c.reason}"
