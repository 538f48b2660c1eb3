"""Layered workspaces, the parent's side: which way this host makes a layer, and the layer
directory itself.

Theory of operation
-------------------
A layered run (`workspace_mode="layered"`) sees its workspace through a copy-on-write layer of
its own. The parent decides how when the run is planned (`choose`), makes the layer just before
the child is spawned (`make`) and keeps it, in a directory of its own under `layers_dir()`
(mode 0700), until the run's change set is applied or discarded (`Layer.discard`). The ways,
strongest first:

- `overlay`: a root supervisor's sandboxed child mounts an overlay over the workspace in its
  private mount namespace (`tether.contain.layer`): the workspace is the read-only lower
  layer, `upper/` (owned by the sandbox uid, inside the parent's 0700 directory) takes every
  write;
- `overlay-userns`: without root, the same overlay in a user namespace of the child's own,
  where the kernel allows an unprivileged overlay;
- `reflink`: otherwise (no sandbox here, a launcher or a provider that drives its own process)
  the parent copies the workspace into `tree/` and the child works there, each file a reflink
  (`FICLONE`) where the file system shares blocks between files;
- `copy`: the same with plain copies, refused past `LayerLimits.max_copy_bytes` (and
  `max_copy_entries`), so a layer never fills a disk by surprise.

Which of the overlays this host gets is found by trying it once per process (`support()`: a
throwaway sandboxed child with a layer runs `/bin/true`, as the sandbox's own probe does);
`TETHER_LAYER_METHOD=reflink|copy` caps it, to exercise the copies on a host with overlays.

The layer's base is the workspace when the layer is made: `Layer.base` records what `lstat`
says of every entry then (the repository's `.git` left out), which the change set is measured
against (`tether.parent.run.changes`); a copy also records its own tree as copied
(`Layer.copied`), so what the child touched is told by ctime and inode, never by its word.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from tether.contain.confined import Entry, descend
from tether.parent.process.once import TriedOnce
from tether.protocol.messages import LayerMethod

FORCE_ENV = "TETHER_LAYER_METHOD"
FICLONE = 0x40049409
OVERLAYS: tuple[LayerMethod, ...] = ("overlay", "overlay-userns")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LayerError(Exception):
    """A layer could not be made (the workspace is past the copy bound, the disk is full, ...);
    the run does not start, its result says why."""


@dataclass(frozen=True)
class LayerLimits:
    """Bounds on a layer and on what it gives back."""

    max_copy_bytes: int = 512 * 1024 * 1024
    """The largest workspace a plain copy is made of (reflinks and overlays copy nothing)."""
    max_copy_entries: int = 200_000
    max_change_files: int = 20_000
    """Changed paths past which a change set is refused (`changes_too_large`)."""
    max_change_bytes: int = 256 * 1024 * 1024
    """Content bytes of changed files past which a change set is refused."""
    max_diff_bytes: int = 8 * 1024 * 1024
    """Unified diff text one change set carries; past it, diffs are left out (`note`)."""
    max_file_diff_bytes: int = 1024 * 1024
    """A text file larger than this gets no diff (size and hashes only)."""

    def __post_init__(self) -> None:
        for name in (
            "max_copy_bytes",
            "max_copy_entries",
            "max_change_files",
            "max_change_bytes",
            "max_diff_bytes",
            "max_file_diff_bytes",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")


@dataclass(frozen=True, slots=True)
class Meta:
    """What `lstat` said of one entry."""

    kind: str
    """`file`, `directory`, `symlink` or `other`."""
    mode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    target: str | None = None

    @classmethod
    def of(cls, st: os.stat_result, target: str | None = None) -> Meta:
        return cls(
            _kind(st.st_mode),
            stat.S_IMODE(st.st_mode),
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_ino,
            target,
        )


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


Manifest = dict[str, Meta]
"""Relative path (`/`-separated) → what `lstat` said of it."""


def is_git(rel: str) -> bool:
    """A path inside (or naming) a repository's `.git`, at any depth: never part of a layer's
    base or change set."""
    return ".git" in rel.split("/")


def manifest(root: str) -> Manifest:
    """Every entry under `root` but `.git` ones, walked without following a link
    (`confined.descend`)."""
    fd = os.open(root, _DIR & ~os.O_NOFOLLOW)
    try:
        return {rel: meta for rel, meta in _entries(fd)}
    finally:
        os.close(fd)


def _entries(fd: int) -> Iterator[tuple[str, Meta]]:
    for entry in descend(fd):
        if is_git(entry.rel):
            continue
        try:
            st = os.stat(entry.name, dir_fd=entry.dir_fd, follow_symlinks=False)
        except OSError:
            continue  # gone between the listing and the lstat
        target = None
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(entry.name, dir_fd=entry.dir_fd)
            except OSError:
                continue
        yield entry.rel, Meta.of(st, target)


@dataclass(frozen=True)
class LayerPlan:
    """How a run's layer is to be made, decided when the run is planned (nothing made yet)."""

    method: LayerMethod
    workspace: str
    """The base: the run's workspace, absolute and resolved."""
    root: str
    """The layer's directory (made by `make`)."""
    owner: tuple[int, int] | None = None
    """An overlay's `upper/` and `work/` are made owned by this (uid, gid): a root
    supervisor's sandbox uid."""

    @property
    def overlay(self) -> bool:
        return self.method in OVERLAYS

    @property
    def upper(self) -> str:
        """Where the layer holds what the child wrote: the overlay's upper layer, or the copy."""
        return os.path.join(self.root, "upper" if self.overlay else "tree")

    @property
    def base(self) -> str:
        """An overlay's frozen base: the workspace as hard links (the overlay's lower layer)."""
        return os.path.join(self.root, "base")

    @property
    def child_workspace(self) -> str:
        """The workspace path the child is given: the workspace itself under an overlay, the
        copy otherwise."""
        return self.workspace if self.overlay else self.upper


@dataclass
class Layer:
    """A made layer (see the module docstring)."""

    plan: LayerPlan
    base: Manifest
    """The workspace when the layer was made."""
    copied: Manifest | None = None
    """A copy's tree as it was copied (`None` for an overlay)."""
    frozen: bool = False
    """An overlay over its frozen base (`LayerPlan.base`), not over the live workspace."""
    discarded: bool = field(default=False)

    @property
    def root(self) -> str:
        return self.plan.root

    @property
    def method(self) -> LayerMethod:
        return self.plan.method

    def rebase(self, paths: list[str]) -> None:
        """The workspace now holds `paths` as this layer does (its change set was applied): the
        base takes them as the workspace has them, so the next change set leaves them out."""
        fd = os.open(self.plan.workspace, _DIR & ~os.O_NOFOLLOW)
        try:
            for rel in paths:
                parent, _, name = rel.rpartition("/")
                try:
                    where = os.open(parent or ".", _DIR, dir_fd=fd) if parent else os.dup(fd)
                except OSError:
                    self.base.pop(rel, None)
                    continue
                try:
                    st = os.stat(name, dir_fd=where, follow_symlinks=False)
                    target = os.readlink(name, dir_fd=where) if stat.S_ISLNK(st.st_mode) else None
                    self.base[rel] = Meta.of(st, target)
                except OSError:
                    self.base.pop(rel, None)
                finally:
                    os.close(where)
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Remove the layer's directory (idempotent)."""
        if not self.discarded:
            self.discarded = True
            remove(self.plan.root)


def remove(root: str) -> None:
    """Remove a layer directory, whatever modes the child left on what it made there."""

    def unlock(func: object, path: str, exc: object) -> None:
        try:
            parent = os.path.dirname(path)
            os.chmod(parent, 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass

    shutil.rmtree(root, onerror=unlock)


# --- where layers live, and which way this host makes them ------------------------------------


def layers_dir(configured: str | None = None) -> str:
    """The directory layers are made in: `configured`, or `$TMPDIR/tether-layers-UID`, made
    mode 0700 and required to be this user's own real directory (never a link someone left)."""
    path = configured or os.path.join(tempfile.gettempdir(), f"tether-layers-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise LayerError(f"{path} is not a directory of this user's own: layers cannot be made")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


@dataclass(frozen=True)
class Support:
    """Which layer this host gives a run."""

    overlay: LayerMethod | None
    """`overlay` or `overlay-userns` when a sandboxed local child gets one, else `None`."""
    why_not: str | None
    """Why there is no overlay here."""
    reflink: bool
    """The layers directory's file system shares blocks between copies (`FICLONE`)."""
    forced: str | None = None

    @property
    def copy(self) -> LayerMethod:
        return "reflink" if self.reflink else "copy"


def _support(forced: str, abi: str) -> Support:
    """`abi`: the host probe's own forcing (`TETHER_LANDLOCK_ABI`), part of the answer's key
    (`_supported`) as it is of the probe's."""
    from tether.parent.process.isolation import probe_host, trial_layer

    reflink = _reflinks(layers_dir())
    if forced in ("reflink", "copy"):
        return Support(None, f"{FORCE_ENV}={forced}", reflink and forced == "reflink", forced)
    host = probe_host()
    if host.why_not is not None:
        return Support(None, f"no sandbox here ({host.why_not})", reflink)
    if "overlay" not in _filesystems():
        return Support(None, "the kernel has no overlay file system", reflink)
    why = trial_layer(host)
    method: LayerMethod = "overlay" if host.root else "overlay-userns"
    if why is not None:
        return Support(None, why, reflink)
    return Support(method, None, reflink)


_supported: TriedOnce[tuple[str, str], Support] = TriedOnce(lambda key: _support(*key))
"""What `support()` found, by (`TETHER_LAYER_METHOD`, `TETHER_LANDLOCK_ABI`)."""


def _key() -> tuple[str, str]:
    return os.environ.get(FORCE_ENV, ""), os.environ.get("TETHER_LANDLOCK_ABI", "")


def support() -> Support:
    """What this host gives a layered run, tried once per process (per `TETHER_LAYER_METHOD`
    and `TETHER_LANDLOCK_ABI`)."""
    return _supported.get(_key())


async def support_off_loop() -> Support:
    """`support()`, its first time in a worker thread: the trial child with an overlay it runs
    (tens of milliseconds) then holds up no other task of the event loop."""
    return await _supported.get_off_loop(_key())


def _filesystems() -> str:
    try:
        with open("/proc/filesystems") as f:
            return f.read()
    except OSError:
        return ""


def _reflinks(directory: str) -> bool:
    """Whether two files in `directory` can share blocks."""
    try:
        with (
            tempfile.TemporaryFile(dir=directory) as src,
            tempfile.TemporaryFile(dir=directory) as dst,
        ):
            src.write(b"x" * 4096)
            src.flush()
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return True
    except OSError:
        return False


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _reflinks_between(workspace: str, directory: str) -> bool:
    """Whether a copy of `workspace` in `directory` can be made of reflinks: one file system,
    which shares blocks between files (tried once per directory)."""
    try:
        if os.stat(workspace).st_dev != os.stat(directory).st_dev:
            return False
    except OSError:
        return False
    return _reflinks_cached(directory)


@functools.cache
def _reflinks_cached(directory: str) -> bool:
    return _reflinks(directory)


def choose(
    workspace: str,
    run_id: str,
    *,
    overlay_ok: bool,
    owner: tuple[int, int] | None = None,
    directory: str | None = None,
) -> LayerPlan:
    """The layer of one run: an overlay when `overlay_ok` (a sandboxed child this host's
    trampoline or zygote starts locally) and the host gives one, else a copy. Pure but for the
    probe (`support`) and the layers directory. Raises `ValueError` when the layers directory
    and the workspace lie one in the other."""
    found = support()
    base = layers_dir(directory)
    real = os.path.realpath(base)
    if _within(real, workspace) or _within(workspace, real):
        raise ValueError(
            f"the layers directory {real} and the workspace {workspace} must lie apart (a layer "
            "inside its own workspace would be the child's to reach): use another layers_dir"
        )
    copy: LayerMethod = "reflink" if _reflinks_between(workspace, base) else "copy"
    method: LayerMethod = found.overlay if overlay_ok and found.overlay else copy
    root = os.path.join(base, f"{run_id}-{os.urandom(4).hex()}")
    return LayerPlan(method, workspace, root, owner if method == "overlay" else None)


# --- making a layer -------------------------------------------------------------------------


def make(plan: LayerPlan, limits: LayerLimits | None = None) -> Layer:
    """Make the layer `plan` names: its directory, the base's manifest and, for a copy, the
    copy. Raises `LayerError` (nothing is left behind)."""
    limits = limits or LayerLimits()
    try:
        os.mkdir(plan.root, 0o700)
    except OSError as exc:
        raise LayerError(f"cannot make the layer directory {plan.root}: {exc.strerror}") from exc
    try:
        if plan.overlay:
            for sub in ("upper", "work"):
                path = os.path.join(plan.root, sub)
                os.mkdir(path, 0o755)
                if plan.owner is not None:
                    os.chown(path, *plan.owner)
            try:
                base, _ = _copy(plan.workspace, plan.base, "link", limits)
                return Layer(plan, base, frozen=True)
            except _Unlinkable:
                remove(plan.base)
                return Layer(plan, manifest(plan.workspace))
        how = "reflink" if plan.method == "reflink" else "copy"
        base, copied = _copy(plan.workspace, plan.upper, how, limits)
        return Layer(plan, base, copied)
    except BaseException as exc:
        remove(plan.root)
        if isinstance(exc, OSError):
            raise LayerError(f"the layer could not be made: {exc}") from exc
        raise


class _Unlinkable(Exception):
    """The workspace and the layer directory are on different file systems: no hard link."""


def _copy(src: str, dst: str, how: str, limits: LayerLimits) -> tuple[Manifest, Manifest]:
    """Copy the workspace `src` to `dst` (its `.git` too: the child's tools use it), bounded;
    the base's manifest and the copy's, `.git` left out of both. `how`: `copy`, `reflink`, or
    `link` (an overlay's frozen base: every file a hard link, directories and links made anew
    and owned as the workspace's; raises `_Unlinkable` across file systems)."""
    reflink, link = how == "reflink", how == "link"
    root = os.geteuid() == 0
    base: Manifest = {}
    copied: Manifest = {}
    total = entries = 0
    dirs: list[tuple[str, int]] = []
    top = os.open(src, _DIR & ~os.O_NOFOLLOW)
    os.mkdir(dst, 0o700)
    out_top = os.open(dst, _DIR)
    opened: dict[str, int] = {"": out_top}
    try:
        top_st = os.fstat(top)
        if link and root:
            os.fchown(out_top, top_st.st_uid, top_st.st_gid)
        dirs.append(("", stat.S_IMODE(top_st.st_mode)))
        for entry in descend(top, limit=limits.max_copy_entries + 1, skip=frozenset()):
            entries += 1
            if entries > limits.max_copy_entries:
                raise LayerError(
                    f"the workspace has more than {limits.max_copy_entries} entries, the most "
                    "a layer copies"
                )
            parent, _, name = entry.rel.rpartition("/")
            out = opened.get(parent)
            if out is None:
                continue  # under something that was not copied
            st = os.stat(entry.name, dir_fd=entry.dir_fd, follow_symlinks=False)
            git = is_git(entry.rel)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(name, 0o700, dir_fd=out)
                if link and root:
                    os.chown(name, st.st_uid, st.st_gid, dir_fd=out)
                opened[entry.rel] = os.open(name, _DIR, dir_fd=out)
                dirs.append((entry.rel, stat.S_IMODE(st.st_mode)))
                if not git:
                    base[entry.rel] = Meta.of(st)
                continue
            if stat.S_ISLNK(st.st_mode):
                target = _symlink(entry, out, name, st, owned=link and root)
                if not git:
                    base[entry.rel] = Meta.of(st, target)
                    copied[entry.rel] = Meta.of(
                        os.stat(name, dir_fd=out, follow_symlinks=False), target
                    )
                continue
            if not stat.S_ISREG(st.st_mode):
                continue  # a device node, a FIFO, a socket: never copied
            if link and _hard_link(entry, out, name):
                if not git:
                    base[entry.rel] = Meta.of(st)
                continue
            if not reflink:
                total = _bounded(total, st.st_size, limits)
            cloned = _copy_file(entry.open(os.O_RDONLY | os.O_NONBLOCK), out, name, st, reflink)
            if reflink and not cloned:
                total = _bounded(total, st.st_size, limits)  # copied after all: it counts
            if link and root:
                os.chown(name, st.st_uid, st.st_gid, dir_fd=out, follow_symlinks=False)
            if not git:
                base[entry.rel] = Meta.of(st)
                copied[entry.rel] = Meta.of(os.stat(name, dir_fd=out, follow_symlinks=False))
        # Modes last, innermost first: a read-only directory still took its entries.
        for rel, mode in reversed(dirs):
            os.chmod(opened[rel], mode)
            if rel and not is_git(rel):
                copied[rel] = Meta.of(os.fstat(opened[rel]))
        return base, copied
    finally:
        os.close(top)
        for fd in opened.values():
            os.close(fd)


def _symlink(entry: Entry, out: int, name: str, st: os.stat_result, *, owned: bool) -> str:
    """The link made anew in the copy (`owned`: owned as the workspace's); its target."""
    target = os.readlink(entry.name, dir_fd=entry.dir_fd)
    os.symlink(target, name, dir_fd=out)
    if owned:
        os.chown(name, st.st_uid, st.st_gid, dir_fd=out, follow_symlinks=False)
    return target


def _hard_link(entry: Entry, out: int, name: str) -> bool:
    """A frozen base's hard link to the workspace's file; `False` when it is not ours to link
    (protected_hardlinks): it is then copied, within the bound. Raises `_Unlinkable` across
    file systems."""
    try:
        os.link(entry.name, name, src_dir_fd=entry.dir_fd, dst_dir_fd=out)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise _Unlinkable() from None
        if exc.errno not in (errno.EPERM, errno.EACCES, errno.EMLINK):
            raise
        return False
    return True


def _copy_bytes(src: int, dst: int, size: int) -> None:
    """In the kernel: `copy_file_range` (across file systems that refuse it, `sendfile`)."""
    left, fallback = size, False
    while left > 0:
        chunk = min(left, 1 << 30)
        if not fallback:
            try:
                sent = os.copy_file_range(src, dst, chunk)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                fallback = True
                continue
        else:
            sent = os.sendfile(dst, src, None, chunk)
        if sent == 0:
            break
        left -= sent


def _bounded(total: int, size: int, limits: LayerLimits) -> int:
    total += size
    if total > limits.max_copy_bytes:
        raise LayerError(
            f"the workspace holds more than {limits.max_copy_bytes} bytes, the most a plain "
            "copy of it may be (this host makes no overlay or reflink for it)"
        )
    return total


def _copy_file(src: int, out: int, name: str, st: os.stat_result, reflink: bool) -> bool:
    """Copy one file (a reflink when `reflink` and the file system takes one); whether it was
    a reflink."""
    try:
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=out)
        try:
            done = False
            if reflink:
                try:
                    fcntl.ioctl(dst, FICLONE, src)
                    done = True
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOTTY):
                        raise
            if not done:
                _copy_bytes(src, dst, st.st_size)
            os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o777)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            return done
        finally:
            os.close(dst)
    finally:
        os.close(src)
