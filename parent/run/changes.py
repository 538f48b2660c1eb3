"""A layered run's change set, computed by the parent from the layer — never the child's word.

Theory of operation
-------------------
`compute(layer)` walks what the layer holds with tether's confined walk
(`tether.contain.confined.descend`: descriptor-relative, never through a link) and compares it
with the layer's base (`Layer.base`, what `lstat` said of the workspace when the layer was
made). Where to look:

- an overlay (`overlay`, `overlay-userns`): `upper/` holds only what the child wrote. A file or
  link there is new or changed; a character device 0:0 is a whiteout (the base's entry there,
  and everything under it, deleted); a directory marked opaque (`trusted.overlay.opaque` as
  root, `user.overlay.opaque` in a user namespace: the overlay's own namespace, which the child
  cannot write through it) replaced the base's directory of that name (what the base had in it
  and the layer has not, deleted);
- a copy (`reflink`, `copy`): the whole tree; an entry whose `lstat` still matches the copy's
  own record (`Layer.copied`: ctime and inode included, which no process sets back) was not
  touched; what the copy lost was deleted.

The parent is the one reading a tree the child wrote, so every entry is judged on its own and
one that could lead anywhere is refused by itself (`ChangeSet.refused`, the rest kept):

- a device node (other than a whiteout, in an overlay), a FIFO or a socket: never content;
- a symbolic link that is absolute or climbs out of the workspace (`..` past its root);
- a regular file with more links than the layer holds names for: a hard link to a file outside
  the layer, whose content is not the child's to give;
- an overlay entry carrying a redirect or metacopy xattr (the layer is mounted with both off:
  such an entry was not made through it);
- anything under a repository's `.git`: what the child did to the repository (a commit, its
  config, its hooks) is discarded with the layer, never applied.

Every changed path then gets what it is now and was in the base: type, permission bits
(setuid, setgid and sticky never carried), a link's target, a file's SHA-256 and, for UTF-8
text, a unified diff (bounded: `LayerLimits.max_file_diff_bytes` a file, `max_diff_bytes` a
change set, past which diffs are left out with a note). The base's content is read from the
overlay's frozen base (`Layer.frozen`), else from the workspace only while it still holds the
base's entry (same `lstat`); when it changed since the layer was made, `base_sha256` stays
`null`, which applying reports as a conflict. A deleted file whose content reappears under a
new name of the same type is a rename. Past `max_change_files` paths or `max_change_bytes` of
content, the change set is refused as a whole (`ChangesTooLarge`: the run fails
`changes_too_large`, its layer is discarded).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from tether.contain.confined import descend
from tether.contain.gitdirs import open_dir
from tether.parent.process.layers import Layer, LayerLimits, Meta, is_git
from tether.parent.run import sensitive
from tether.protocol.messages import ChangeKind, ChangeSet, FileChange, SkippedPath

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _xattr_prefix(method: str) -> str:
    """The namespace of the overlay's own xattrs: `trusted.` as root, `user.` in a user
    namespace (`userxattr`); the other namespace is the child's to write, and means nothing."""
    return "user.overlay." if method == "overlay-userns" else "trusted.overlay."


HARD_LINK = "a hard link to a file outside the layer (refused by the parent)"
GIT_LEFT_OUT = "the repository's own files (.git) are never part of a change set"


class ChangesTooLarge(Exception):
    """The change set is past a bound (`LayerLimits`); the message says which."""


@dataclass
class _Now:
    """One changed entry as the layer holds it."""

    kind: str
    mode: int
    size: int
    target: str | None = None
    sha256: str | None = None
    data: bytes | None = None
    """A text-diffable file's content."""


@dataclass
class _Walk:
    touched: dict[str, _Now | None] = field(default_factory=dict)
    """Relative path → what the layer holds (`None`: deleted in the layer)."""
    refused: list[SkippedPath] = field(default_factory=list)
    links: dict[tuple[int, int], tuple[int, int, list[str]]] = field(default_factory=dict)
    """(dev, ino) of regular files → (st_nlink, names seen, their paths)."""


def compute(layer: Layer, limits: LayerLimits | None = None) -> ChangeSet:
    """The change set of `layer` (see the module docstring); raises `ChangesTooLarge`, or
    `OSError` when the layer itself cannot be read."""
    limits = limits or LayerLimits()
    walk = _Walk()
    plan = layer.plan
    top = os.open(plan.upper, _DIR)
    try:
        if plan.overlay:
            _overlay(top, layer, walk, limits)
        else:
            _copy(top, layer, walk, limits)
    finally:
        os.close(top)
    _hard_links(walk)
    changes, total = _changes(layer, walk, limits)
    return ChangeSet(
        workspace=plan.workspace,
        layer=plan.root,
        method=plan.method,
        changes=changes,
        refused=sorted(walk.refused, key=lambda r: r.path),
        files=len(changes),
        bytes=total,
    )


# --- what the layer holds -------------------------------------------------------------------


def _entries(top: int, walk: _Walk) -> Iterator[tuple[str, int, str, os.stat_result]]:
    """(relative path, holding dir fd, name, lstat) of every entry the layer holds, but the
    repository's `.git` (refused once, as a whole) and what cannot be read (refused)."""
    seen_git = False

    def unreadable(rel: str, exc: OSError) -> None:
        walk.refused.append(
            SkippedPath(path=rel, reason=f"cannot be read by the parent: {exc.strerror or exc}")
        )

    for entry in descend(top, on_error=unreadable):
        if is_git(entry.rel):
            if not seen_git:
                seen_git = True
                walk.refused.append(SkippedPath(path=entry.rel, reason=GIT_LEFT_OUT))
            continue
        try:
            st = os.stat(entry.name, dir_fd=entry.dir_fd, follow_symlinks=False)
        except OSError as exc:
            unreadable(entry.rel, exc)
            continue
        yield entry.rel, entry.dir_fd, entry.name, st


def _overlay(top: int, layer: Layer, walk: _Walk, limits: LayerLimits) -> None:
    base = layer.base
    prefix = _xattr_prefix(layer.method)
    for rel, fd, name, st in _entries(top, walk):
        mode = st.st_mode
        if stat.S_ISCHR(mode) and st.st_rdev == 0:
            _delete_under(rel, base, walk, keep=None)  # a whiteout
            continue
        bad = _xattr_problem(fd, name, prefix)
        if bad is not None:
            walk.refused.append(SkippedPath(path=rel, reason=bad))
            continue
        if stat.S_ISDIR(mode):
            if _opaque(fd, name, prefix):
                _delete_under(rel, base, walk, keep=rel, self_too=False)
            old = base.get(rel)
            if old is None or old.kind != "directory" or old.mode != stat.S_IMODE(mode):
                walk.touched[rel] = _Now("directory", stat.S_IMODE(mode), 0)
            continue
        now = _read(rel, fd, name, st, walk, limits)
        if now is not None:
            walk.touched[rel] = now


def _copy(top: int, layer: Layer, walk: _Walk, limits: LayerLimits) -> None:
    copied = layer.copied or {}
    present: set[str] = set()
    for rel, fd, name, st in _entries(top, walk):
        present.add(rel)
        if stat.S_ISDIR(st.st_mode):
            old = layer.base.get(rel)
            if old is None or old.kind != "directory" or old.mode != stat.S_IMODE(st.st_mode):
                walk.touched[rel] = _Now("directory", stat.S_IMODE(st.st_mode), 0)
            continue
        was = copied.get(rel)
        if was is not None and _same(was, Meta.of(st)):
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                _count_link(rel, st, walk)
            continue  # untouched since it was copied
        now = _read(rel, fd, name, st, walk, limits)
        if now is not None:
            walk.touched[rel] = now
    for rel in layer.base:
        if rel not in present:
            walk.touched[rel] = None


def _same(a: Meta, b: Meta) -> bool:
    return (a.kind, a.mode, a.size, a.mtime_ns, a.ctime_ns, a.ino) == (
        b.kind,
        b.mode,
        b.size,
        b.mtime_ns,
        b.ctime_ns,
        b.ino,
    )


def _delete_under(
    rel: str, base: dict[str, Meta], walk: _Walk, *, keep: str | None, self_too: bool = True
) -> None:
    """The base's `rel` (with `self_too`) and everything under it, deleted (what the layer
    puts back under an opaque directory is found by the walk, which overrides this)."""
    prefix = rel + "/"
    for path in base:
        if (self_too and path == rel) or path.startswith(prefix):
            walk.touched.setdefault(path, None)


def _xattr_problem(fd: int, name: str, prefix: str) -> str | None:
    try:
        names = os.listxattr(f"/proc/self/fd/{fd}/{name}", follow_symlinks=False)
    except OSError:
        return None
    for forbidden in (f"{prefix}redirect", f"{prefix}metacopy"):
        if forbidden in names:
            return (
                f"carries {forbidden}, which the layer is mounted without: it was not made "
                "through the layer (refused by the parent)"
            )
    return None


def _opaque(fd: int, name: str, prefix: str) -> bool:
    try:
        return (
            os.getxattr(f"/proc/self/fd/{fd}/{name}", f"{prefix}opaque", follow_symlinks=False)
            == b"y"
        )
    except OSError:
        return False


def _read(
    rel: str, fd: int, name: str, st: os.stat_result, walk: _Walk, limits: LayerLimits
) -> _Now | None:
    """What the layer holds at `rel` (a file or a link), or `None` (refused, with why)."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        target = os.readlink(name, dir_fd=fd)
        why = _link_problem(rel, target)
        if why is not None:
            walk.refused.append(SkippedPath(path=rel, reason=why))
            return None
        return _Now("symlink", 0o777, len(os.fsencode(target)), target=target)
    if not stat.S_ISREG(mode):
        what = "a device node" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a FIFO or socket"
        walk.refused.append(
            SkippedPath(
                path=rel, reason=f"{what}: never part of a change set (refused by the parent)"
            )
        )
        return None
    if st.st_nlink > 1:
        _count_link(rel, st, walk)
    try:
        digest, data = _hash(os.open(name, _FILE, dir_fd=fd), st, limits)
    except OSError as exc:
        walk.refused.append(
            SkippedPath(path=rel, reason=f"cannot be read by the parent: {exc.strerror or exc}")
        )
        return None
    return _Now("file", stat.S_IMODE(mode) & 0o777, st.st_size, sha256=digest, data=data)


def _count_link(rel: str, st: os.stat_result, walk: _Walk) -> None:
    key = (st.st_dev, st.st_ino)
    nlink, seen, paths = walk.links.get(key, (st.st_nlink, 0, []))
    walk.links[key] = (nlink, seen + 1, [*paths, rel])


def _hard_links(walk: _Walk) -> None:
    """A file with more links than names in the layer shares its inode with a file outside:
    refused, every name of it."""
    for nlink, seen, paths in walk.links.values():
        if nlink > seen:
            for rel in paths:
                walk.touched.pop(rel, None)
                walk.refused.append(SkippedPath(path=rel, reason=HARD_LINK))


def _link_problem(rel: str, target: str) -> str | None:
    if target.startswith("/"):
        return "an absolute symbolic link: it leads outside the workspace (refused by the parent)"
    depth = rel.count("/")
    for part in target.split("/"):
        if part in ("", "."):
            continue
        depth += -1 if part == ".." else 1
        if depth < 0:
            return "a symbolic link that climbs out of the workspace (refused by the parent)"
    return None


def _hash(fd: int, st: os.stat_result, limits: LayerLimits) -> tuple[str, bytes | None]:
    """The file's SHA-256, and its bytes when it may get a diff."""
    try:
        if os.fstat(fd).st_ino != st.st_ino:
            raise OSError("it was replaced while it was read")
        h = hashlib.sha256()
        keep = st.st_size <= limits.max_file_diff_bytes
        kept: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            if keep:
                kept.append(chunk)
        return h.hexdigest(), b"".join(kept) if keep else None
    finally:
        os.close(fd)


# --- the changes --------------------------------------------------------------------------


def _base_now(
    workspace_fd: int, rel: str, was: Meta, limits: LayerLimits, *, check: bool = True
) -> _Now | None:
    """The base's entry at `rel`, read from the workspace while it still is the base's (same
    `lstat`; `check=False`: from a frozen base, which is); `None` when the workspace changed
    there since the layer was made."""
    parent, _, name = rel.rpartition("/")
    fd = open_dir(workspace_fd, parent)  # one component at a time, never through a link
    if fd is None:
        return None
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        if check and not _same(was, Meta.of(st)):
            return None
        if was.kind == "symlink":
            return _Now("symlink", 0o777, st.st_size, target=os.readlink(name, dir_fd=fd))
        if was.kind != "file":
            return _Now(was.kind, was.mode, 0)
        digest, data = _hash(os.open(name, _FILE, dir_fd=fd), st, limits)
        return _Now("file", was.mode & 0o777, st.st_size, sha256=digest, data=data)
    except OSError:
        return None
    finally:
        os.close(fd)


def _changes(layer: Layer, walk: _Walk, limits: LayerLimits) -> tuple[list[FileChange], int]:
    base = layer.base
    budget = [limits.max_diff_bytes]
    out: dict[str, FileChange] = {}
    total = 0
    # The base's content: a frozen layer's own base, else the workspace while it still holds
    # the base's entry.
    frozen = layer.frozen and os.path.isdir(layer.plan.base)
    ws = os.open(layer.plan.base if frozen else layer.plan.workspace, _DIR & ~os.O_NOFOLLOW)
    try:
        for rel in sorted(walk.touched):
            now = walk.touched[rel]
            was = base.get(rel)
            if now is None and was is None:
                continue  # made and removed again inside the layer
            old = _base_now(ws, rel, was, limits, check=not frozen) if was is not None else None
            change = _change(rel, now, was, old, budget, limits)
            if change is None:
                continue
            out[rel] = change
            if now is not None and now.kind != "directory":
                total += now.size
            if len(out) > limits.max_change_files:
                raise ChangesTooLarge(
                    f"the change set holds more than {limits.max_change_files} changed paths"
                )
            if total > limits.max_change_bytes:
                raise ChangesTooLarge(
                    f"the change set holds more than {limits.max_change_bytes} bytes of content"
                )
    finally:
        os.close(ws)
    return _renames(out), total


def _change(
    rel: str,
    now: _Now | None,
    was: Meta | None,
    old: _Now | None,
    budget: list[int],
    limits: LayerLimits,
) -> FileChange | None:
    place = sensitive.place_of(rel)
    runs = place.runs if place is not None else None
    if now is None:
        assert was is not None
        kind = was.kind if was.kind in ("file", "directory", "symlink") else "file"
        return FileChange(
            path=rel,
            change="deleted",
            fs_type=kind,  # type: ignore[arg-type]
            base_fs_type=kind,  # type: ignore[arg-type]
            base_mode=was.mode & 0o777,
            base_target=was.target,
            base_sha256=old.sha256 if old is not None else None,
            runs=runs,
            note="" if old is not None else BASE_CHANGED,
        )
    if was is not None and old is not None and _equal(now, old):
        return None  # written back as it was (a copy-up, a touch)
    change: ChangeKind = "added" if was is None else "modified"
    diff, binary, note = _diff(rel, now, old if was is not None else None, budget, limits)
    if was is not None and old is None:
        note = BASE_CHANGED
    return FileChange(
        path=rel,
        change=change,
        fs_type=now.kind,  # type: ignore[arg-type]
        base_fs_type=_base_type(was),
        mode=now.mode,
        base_mode=None if was is None else was.mode & 0o777,
        target=now.target,
        base_target=None if was is None else was.target,
        size=now.size,
        sha256=now.sha256,
        base_sha256=old.sha256 if old is not None else None,
        binary=binary,
        diff=diff,
        runs=runs,
        note=note,
    )


def _base_type(was: Meta | None) -> Literal["file", "directory", "symlink"] | None:
    if was is None:
        return None
    if was.kind in ("directory", "symlink"):
        return was.kind  # type: ignore[return-value]
    return "file"


BASE_CHANGED = "the workspace changed here since the layer's base: applying it is a conflict"


def _equal(now: _Now, old: _Now) -> bool:
    return (now.kind, now.mode, now.target, now.sha256) == (
        old.kind,
        old.mode,
        old.target,
        old.sha256,
    )


def _text(data: bytes | None) -> str | None:
    if data is None or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _diff(
    rel: str, now: _Now, old: _Now | None, budget: list[int], limits: LayerLimits
) -> tuple[str | None, bool, str]:
    if now.kind != "file":
        return None, False, ""
    new_text = _text(now.data)
    if new_text is None:
        if now.data is None and now.size > limits.max_file_diff_bytes:
            return None, False, f"larger than {limits.max_file_diff_bytes} bytes: no diff"
        return None, True, ""
    old_text = "" if old is None or old.kind != "file" else _text(old.data)
    if old_text is None:
        return None, False, "the base's content is binary or too large: no diff"
    text = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile="/dev/null" if old is None else f"a/{rel}",
            tofile=f"b/{rel}",
        )
    )
    size = len(text.encode())
    if size > budget[0]:
        return None, False, "the change set's diffs are past their limit: no diff"
    budget[0] -= size
    return text, False, ""


def _renames(changes: dict[str, FileChange]) -> list[FileChange]:
    """A deleted file or link whose content (or target) was added under another name is
    a rename."""
    gone: dict[tuple[str, str | None], list[str]] = {}
    for c in changes.values():
        if c.change == "deleted" and (
            (c.fs_type == "file" and c.base_sha256) or c.fs_type == "symlink"
        ):
            key = (c.fs_type, c.base_sha256 if c.fs_type == "file" else c.base_target)
            gone.setdefault(key, []).append(c.path)
    out = dict(changes)
    for c in changes.values():
        if c.change != "added" or c.fs_type not in ("file", "symlink"):
            continue
        key = (c.fs_type, c.sha256 if c.fs_type == "file" else c.target)
        names = gone.get(key)
        if not names:
            continue
        old = out.pop(names.pop(0))
        out[c.path] = FileChange(
            path=c.path,
            change="renamed",
            fs_type=c.fs_type,
            old_path=old.path,
            mode=c.mode,
            base_mode=old.base_mode,
            target=c.target,
            base_target=old.base_target,
            size=c.size,
            sha256=c.sha256,
            base_sha256=old.base_sha256,
            base_fs_type=old.base_fs_type,
            binary=c.binary,
            runs=c.runs or old.runs,
        )
    return sorted(out.values(), key=lambda c: c.path)
