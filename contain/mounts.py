"""The sandbox's private mount namespace: what the child sees of the filesystem.

Theory of operation
-------------------
Run as root in the trampoline (or the zygote's forked child), before the uid changes:

1. `unshare(CLONE_NEWNS)` and every mount made a slave of the host's (`MS_REC|MS_SLAVE`):
   nothing mounted here ever propagates out; an unmount on the host still reaches in, so the
   sandbox never pins a host mount.
2. Detached clones (`open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)`) of everything the child must
   see again after step 4 (the workspace and the read grants that step 4 would hide), taken
   while they are still visible; read grants read-only. The workspace clone gets an
   idmapping (`mount_setattr`, `MOUNT_ATTR_IDMAP` with a user namespace mapping its on-disk
   owner to the sandbox uid) plus `nosuid,nodev`: the child owns what it finds there, and
   whatever it creates lands on disk owned by the workspace's real owner.
3. Every mount the child sees is made read-only (`mount_setattr(/, AT_RECURSIVE,
   MOUNT_ATTR_RDONLY)`): whatever the file modes say, nothing outside the workspace and the
   private temp dirs can be written, created, chmod-ed, chown-ed, touched or given xattrs
   (EROFS). Device files still work (a read-only mount does not stop I/O to a device).
4. Cover points get a fresh tmpfs: /tmp, /var/tmp and /dev/shm (private, mode 1777), and
   every directory on the way to a grant that the sandbox uid cannot traverse (mode 0755,
   empty), for instance /root, mode 0700, when the interpreter lives beneath it. Covering
   hides everything else there (/root/.ssh).
5. The clones are moved back to their own paths (mount points created in the tmpfs as
   needed), the workspace last, over itself when nothing covered it.
6. The workspace's git directories are guarded (`guard_git`, unless the run opted out): each
   becomes a mount of its own, cloned from the idmapped workspace (so it stays the child's to
   write, and cannot be renamed, removed or replaced: a mount point is busy), and its
   `config` and `hooks` are mounted read-only over themselves, so a write there fails with
   EROFS, and a rename over them (git writes `config.lock`, then renames it) with EBUSY. A
   supervisor without root does the same in a user namespace of its own (`user_namespace`),
   mapping only its own uid and gid.
7. Directories the child must never reach (`hide`: a session store's) get an empty read-only
   tmpfs of mode 000 over them, after everything else, so no clone or grant shows them again.

Sealed (`seal=True`, a plan with `local_sockets`): the child may `connect` to UNIX sockets, so
no socket bound outside the run may be reachable by path. Between steps 2 and 3 the view is
rebuilt from detached clones of every host mount, each *idmapped through a user namespace
that maps no owner a file has* (`unmapped_userns`): the kernel refuses a write-class permission
check on an inode whose owner the mount does not map (EACCES), and `connect` to a pathname
socket is such a check, so no host socket can be connected whatever its mode — while reads
keep the mode bits the sandbox uid had anyway (it owns nothing outside the workspace, and
is in no group). The clone of `/` becomes the root (`pivot_root`, the host's tree detached),
the others are attached at their paths; a mount that cannot be idmapped is kept only when it
can hold no live socket (a pseudo filesystem, `SOCKET_FREE`, or a read-only superblock,
where nothing can bind); any other stays unmapped, and the view counts as not sealed
(`Applied.unsealed` says why: the child then gets no `connect`). /dev becomes a
private tmpfs holding only the plan's device files and the /proc/self/fd links (the host's
/dev holds /dev/log and other sockets, and devtmpfs cannot be idmapped). The rebuilt tree is
private: a mount the host makes later never shows up inside. Sockets the run binds itself are
in the workspace (idmapped to the sandbox uid, step 2) or the private tmpfs dirs (step 4), so
they stay reachable; abstract sockets are Landlock's (scoped to the domain from ABI 6).

`layout()` decides steps 2, 4 and 5 from the grants and a traversal test, and `seal_plan()`
which host mounts are cloned and how; both are pure, so the rules are tested without mounting
anything.

Only the standard library (see `_sys.py`).
"""

from __future__ import annotations

import bisect
import ctypes
import os
import signal
import stat
from collections.abc import Callable, Iterable

from tether.contain import gitdirs
from tether.contain._sys import check, libc, syscall

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_SLAVE = 1 << 19
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x100000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
UNMAPPED_ID = 4_294_967_294
"""The one id the sealing user namespace maps (to itself): the highest valid uid, which no
file of a real system has, so every owner is unmapped on a sealed clone."""
SOCKET_FREE = frozenset(
    {
        "proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "bpf", "tracefs", "debugfs",
        "securityfs", "pstore", "configfs", "fusectl", "binfmt_misc", "nsfs", "efivarfs",
        "selinuxfs", "autofs", "rpc_pipefs",
    }
)  # fmt: skip
"""Filesystems that cannot be idmapped and need not be: the kernel's own, which make no
socket files (nothing can `bind` a path there)."""
DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
"""The symlinks of a private /dev (bash's process substitution uses /dev/fd)."""


SEAL_FAILED = "cannot seal the sandbox's view of the host"


class SealError(OSError):
    """The sealed view cannot be built at all (no root mount to clone): the sandbox does not
    start."""

    def __str__(self) -> str:
        return f"{SEAL_FAILED}: {self.strerror or super().__str__()}"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class _Roots:
    """A set of paths asked, for many paths, whether one of them holds the path (`holds`) or
    lies in it (`within`), as `_under` says, without a loop in Python: a forked child lays out
    its view from some sixty grants against each other and against every host mount, and the
    pairwise `_under` calls were ≈ 1 ms of each sandboxed spawn."""

    __slots__ = ("_exact", "_prefixes", "_sorted")

    def __init__(self, roots: Iterable[str] = ()) -> None:
        self._exact: set[str] = set()
        self._prefixes: tuple[str, ...] = ()
        self._sorted: list[str] | None = None
        for root in roots:
            self.add(root)

    def add(self, root: str) -> None:
        if root not in self._exact:
            self._exact.add(root)
            self._prefixes += (root.rstrip("/") + "/",)
            self._sorted = None

    def holds(self, path: str) -> bool:
        """Whether `path` is one of the roots or lies beneath one."""
        return path in self._exact or path.startswith(self._prefixes)

    def within(self, path: str) -> bool:
        """Whether one of the roots is `path` or lies beneath it."""
        if path in self._exact:
            return True
        if self._sorted is None:
            self._sorted = sorted(self._exact)
        prefix = path.rstrip("/") + "/"
        i = bisect.bisect_left(self._sorted, prefix)
        return i < len(self._sorted) and self._sorted[i].startswith(prefix)


class Layout:
    def __init__(
        self, covers: list[tuple[str, int]], restore: list[str], workspace: str | None
    ) -> None:
        self.covers = covers
        """Directories that get a fresh tmpfs, with its mode, outermost first."""
        self.restore = restore
        """Read grants to clone first and move back after covering, outermost first."""
        self.workspace = workspace
        """The workspace, mounted last (idmapped) at its own path."""

    def __repr__(self) -> str:
        return f"Layout(covers={self.covers!r}, restore={self.restore!r}, ws={self.workspace!r})"


def layout(
    reads: Iterable[str],
    workspace: str | None,
    traversable: Callable[[str], bool],
    private_tmp: Iterable[str] = PRIVATE_TMP,
) -> Layout:
    """Which tmpfs covers and which clones make `reads` and `workspace` visible at their own
    paths to a process for which `traversable(dir)` says whether it may search `dir`.

    A granted directory the process cannot search itself (a 0700 directory holding an agent
    file, a 0700 home) is never cloned back as it is, which would show it still closed: it is
    rebuilt like a closed ancestor, and only the grants inside it come back (the agent file
    the command names, the workspace beside it), never the rest of it."""
    searchable: dict[str, bool] = {}  # each directory asked about once (a stat each)

    def can_search(directory: str) -> bool:
        known = searchable.get(directory)
        if known is None:
            known = searchable[directory] = traversable(directory)
        return known

    covers: dict[str, int] = {d: 0o1777 for d in private_tmp}
    covered = _Roots(covers)
    grants = sorted({os.path.normpath(p) for p in reads}, key=lambda p: (p.count("/"), p))
    closed = {g for g in grants if g != workspace and not can_search(g)}
    everything = [*grants, *([workspace] if workspace else [])]
    for path in everything:
        if covered.holds(path):
            continue
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if covered.holds(ancestor):
                break
            if not can_search(ancestor):
                covers[ancestor] = 0o755
                covered.add(ancestor)
                break
    for path in closed:
        if not covered.holds(path):
            covers[path] = 0o755
            covered.add(path)
    ordered = sorted(covers, key=lambda c: (c.count("/"), c))
    outer = [c for c in ordered if not any(c != o and _under(c, o) for o in ordered)]
    outermost = _Roots(outer)
    restore: list[str] = []
    restored = _Roots()
    for path in grants:
        if path in closed:
            continue  # rebuilt: only the grants inside it come back
        if workspace and _under(path, workspace):
            continue  # visible through the workspace mount
        if restored.holds(path):
            continue  # inside a clone already
        if outermost.holds(path):
            restore.append(path)
            restored.add(path)
    return Layout([(c, covers[c]) for c in outer], restore, workspace)


def can_traverse(path: str, uid: int, gids: Iterable[int]) -> bool:
    """Whether `uid` (in `gids`) may search directory `path` by its mode bits (ACLs are not
    read: a directory an ACL opens is covered and rebuilt, which is harmless)."""
    try:
        st = os.stat(path)
    except OSError:
        return True  # nothing there to hide; the grant will simply be missing
    if not stat.S_ISDIR(st.st_mode):
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in set(gids):
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


class MountEntry:
    """One line of /proc/self/mountinfo: where, what filesystem, and whether its superblock
    is read-only (no socket can be bound on it, through any mount)."""

    __slots__ = ("fstype", "path", "read_only")

    def __init__(self, path: str, fstype: str, read_only: bool) -> None:
        self.path = path
        self.fstype = fstype
        self.read_only = read_only

    def __repr__(self) -> str:
        return f"MountEntry({self.path!r}, {self.fstype!r}, {self.read_only!r})"


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as `\\ooo`."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """The mounts of a mountinfo text, in its order (a later mount at a path is on top)."""
    entries = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        entries.append(MountEntry(_unescape(fields[4]), tail[0], "ro" in tail[2].split(",")))
    return entries


def seal_plan(
    entries: Iterable[MountEntry], needed: Iterable[str] | None = None
) -> tuple[MountEntry | None, list[MountEntry]]:
    """What a sealed view clones: the mount on top at `/`, and every other mount on top at its
    path, outermost first, except /dev and what lies beneath it (a private /dev replaces it);
    with `needed` (the paths the child is granted), only mounts that hold one of them or lie
    inside one: Landlock grants nothing in any other, so its mount point shows the empty
    directory beneath instead (and costs no clone at each spawn)."""
    top: dict[str, MountEntry] = {}
    for entry in entries:
        top.pop(entry.path, None)  # re-inserted last: the order of the mount on top
        top[entry.path] = entry
    root = top.pop("/", None)
    rest = [e for e in top.values() if not _under(e.path, "/dev")]
    if needed is not None:
        wanted = _Roots(needed)
        rest = [e for e in rest if wanted.within(e.path) or wanted.holds(e.path)]
    order = {e.path: i for i, e in enumerate(rest)}
    return root, sorted(rest, key=lambda e: (e.path.count("/"), order[e.path]))


def unmapped_userns() -> int:
    """An fd of a user namespace that maps only `UNMAPPED_ID`: idmapped through it, a mount
    shows every real owner as unmapped (see the module docstring)."""
    return idmap_userns(UNMAPPED_ID, UNMAPPED_ID, UNMAPPED_ID, UNMAPPED_ID)


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


def open_tree_clone(
    path: str, dir_fd: int = -100, *, follow: bool = True, recursive: bool = True
) -> int:
    """A detached clone of the mount tree at `path` (relative to `dir_fd`, the current
    directory by default), recursive unless `recursive=False`; `follow=False`: a final
    symbolic link is not followed."""
    return syscall(
        "open_tree",
        dir_fd,
        os.fsencode(path),
        OPEN_TREE_CLONE
        | OPEN_TREE_CLOEXEC
        | (AT_RECURSIVE if recursive else 0)
        | (0 if follow else AT_SYMLINK_NOFOLLOW),
    )


def set_attr(fd: int, attr_set: int, userns_fd: int = 0, path: str = "") -> None:
    """Set mount attributes recursively on the mount tree of `fd` (or of `path`, with
    `fd` = AT_FDCWD)."""
    attr = _MountAttr(attr_set, 0, 0, userns_fd)
    syscall(
        "mount_setattr",
        fd,
        os.fsencode(path),
        (0 if path else AT_EMPTY_PATH) | AT_RECURSIVE,
        ctypes.addressof(attr),
        ctypes.sizeof(attr),
    )


def _sealed_clone(entry: MountEntry, userns: int, unsealed: list[str]) -> int | None:
    """A detached, read-only clone of the mount on top at `entry.path`, idmapped through
    `userns` (or left unmapped when its filesystem cannot be and holds no socket; when it
    could hold one, left unmapped all the same, and why is added to `unsealed`); `None` when
    nothing is reachable there."""
    try:
        fd = open_tree_clone(entry.path, recursive=False)
    except OSError:
        return None  # not reachable from here (under a mount stacked over its parent)
    try:
        try:
            set_attr(fd, MOUNT_ATTR_IDMAP, userns)
        except OSError as exc:
            if entry.fstype not in SOCKET_FREE and not entry.read_only:
                unsealed.append(
                    f"the mount at {entry.path} ({entry.fstype}) cannot be idmapped "
                    f"({exc.strerror}), so a socket bound there would stay reachable"
                )
        set_attr(fd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _containing(entries: list[MountEntry], path: str) -> MountEntry:
    """The mount `path` lies on (the deepest mount point above it)."""
    return max((e for e in entries if _under(path, e.path)), key=lambda e: e.path.count("/"))


def _seal(
    userns: int,
    devices: Iterable[str],
    restore: Iterable[str],
    needed: Iterable[str] | None,
    unsealed: list[str],
) -> list[tuple[str, int]]:
    """Rebuild this (private, new) mount namespace's view from sealed clones of every host
    mount, with a private /dev (see the module docstring); returns sealed clones of the
    `restore` paths (and of mounts beneath them) for the caller to attach over its covers, in
    order, and adds to `unsealed` why a mount had to stay unmapped. Everything is cloned from
    the host's tree first: once sealed, not even root may enter a directory whose owner the
    view does not map. Raises `OSError`."""
    with open("/proc/self/mountinfo") as f:
        table = parse_mountinfo(f.read())
    root_entry, entries = seal_plan(table, needed)
    if root_entry is None:
        raise SealError("/proc/self/mountinfo names no mount at /")
    every = [root_entry, *seal_plan(table)[1]]
    clones: list[tuple[str, int]] = []
    kept: list[tuple[str, int]] = []
    try:
        root = _sealed_clone(root_entry, userns, unsealed)
        if root is None:
            raise SealError("/ cannot be cloned")
        for entry in entries:
            fd = _sealed_clone(entry, userns, unsealed)
            if fd is not None:
                clones.append((entry.path, fd))
        dev = [(d, open_tree_clone(d, recursive=False)) for d in devices if os.path.exists(d)]
        for path in restore:
            if not os.path.lexists(path):
                continue
            on = _containing(every, path)
            fd = _sealed_clone(MountEntry(path, on.fstype, on.read_only), userns, unsealed)
            if fd is not None:
                kept.append((path, fd))
            for inner in entries:
                if inner.path != path and _under(inner.path, path):
                    fd = _sealed_clone(inner, userns, unsealed)
                    if fd is not None:
                        kept.append((inner.path, fd))
        move_to(root, "/")
        os.fchdir(root)
        os.close(root)
        syscall("pivot_root", b".", b".")
        check(libc.umount2(b".", MNT_DETACH), "umount2 the host's root")
        os.chdir("/")
        for path, fd in clones:
            if os.path.lexists(path):  # not under a directory the view closes
                move_to(fd, path)
        if os.path.isdir("/dev"):
            mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755")
            for path, fd in dev:
                _make_mount_point(path, False)
                move_to(fd, path)
            for name, target in DEV_LINKS:
                os.symlink(target, f"/dev/{name}")
            os.mkdir("/dev/shm", 0o755)  # a mount point: step 4 covers it with the run's own
        clones += dev
        mount("none", "/", None, MS_REC | MS_PRIVATE)
        return kept
    except BaseException:
        for _, fd in kept:
            os.close(fd)
        raise
    finally:
        for _, fd in clones:
            os.close(fd)


def move_to(fd: int, path: str, dir_fd: int = -100) -> None:
    """Attach the detached mount `fd` at `path` (relative to `dir_fd`; a final symbolic link
    is not followed)."""
    syscall("move_mount", fd, b"", dir_fd, os.fsencode(path), MOVE_MOUNT_F_EMPTY_PATH)


def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    check(
        libc.mount(
            os.fsencode(source),
            os.fsencode(target),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def umount(target: str, flags: int = 0) -> None:
    check(libc.umount2(os.fsencode(target), ctypes.c_int(flags)), f"umount {target}")


def unshare(flags: int) -> None:
    check(libc.unshare(ctypes.c_int(flags)), "unshare")


def idmap_userns(inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int) -> int:
    """An fd of a new user namespace mapping `inside` (the on-disk owner) to `outside` (what
    the sandbox runs as): a helper process creates it, this process (root) writes its maps,
    and the helper is killed; the namespace lives on as long as the fd."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper: one thread, only system calls
        try:
            os.close(ready_r)
            os.close(go_w)
            unshare(CLONE_NEWUSER)
            os.write(ready_w, b"u")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(go_r)
    try:
        if os.read(ready_r, 1) != b"u":
            raise OSError("the helper could not create a user namespace")
        with open(f"/proc/{pid}/setgroups", "w") as f:
            f.write("deny")
        with open(f"/proc/{pid}/uid_map", "w") as f:
            f.write(f"{inside_uid} {outside_uid} 1\n")
        with open(f"/proc/{pid}/gid_map", "w") as f:
            f.write(f"{inside_gid} {outside_gid} 1\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(go_w)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


def _make_mount_point(path: str, directory: bool) -> None:
    """Create `path` (and missing parents, mode 0755): a directory, or an empty file to
    mount a file on."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    if directory:
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif not os.path.lexists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))


class Applied:
    def __init__(self) -> None:
        self.covers: list[str] = []
        self.restored: list[str] = []
        self.unsealed: list[str] = []
        """Why the view is not sealed (a mount that could hold a socket and cannot be
        idmapped); empty when it is, or when no seal was asked for."""
        self.hidden: list[str] = []


def private_namespace(
    plan: Layout,
    *,
    idmap: tuple[int, int, int, int] | None,
    userns: int | None = None,
    workspace_read_only: bool = False,
    protect: Iterable[str] = (),
    seal: bool = False,
    sealer: int | None = None,
    devices: Iterable[str] = (),
    needed: Iterable[str] | None = None,
    hide: Iterable[str] = (),
    layer: str | None = None,
) -> Applied:
    """Enter a private mount namespace laid out as `plan` (see the module docstring).
    `idmap` is (owner uid, sandbox uid, owner gid, sandbox gid) for the workspace, or `None`
    to bind it unmapped; `userns`: an fd of a user namespace with exactly that mapping, made
    ahead (the zygote keeps one per mapping; the caller still owns the fd), else one is made
    here; `workspace_read_only` mounts the workspace read-only too (a write grant on a private
    /tmp would otherwise reach a workspace under it); `protect`: directories inside the
    workspace mounted read-only over it; `seal`: no socket outside the workspace and the private
    temp dirs stays reachable (`sealer`: an fd of `unmapped_userns()` made ahead, else one is
    made here; `devices`: what the private /dev holds; `needed`: every path the child is
    granted, whose mounts alone are cloned, `None`: every mount); `hide`: directories covered
    last by an empty read-only mount (those the child's view still has); `layer`: a layered
    workspace's layer directory, the workspace then an overlay of it (`layer.over_clone`).
    Raises `OSError`."""
    made = made_sealer = None
    if idmap is not None and plan.workspace and userns is None:
        userns = made = idmap_userns(*idmap)
    elif idmap is None or not plan.workspace:
        userns = None
    try:
        if seal and sealer is None:
            sealer = made_sealer = unmapped_userns()
        unshare(CLONE_NEWNS)
        mount("none", "/", None, MS_REC | MS_SLAVE)
        guards = _guard_clones(plan, protect)
        ws_fd, layer_fd = _workspace_clones(plan, layer, userns, workspace_read_only)
        done = Applied()
        if seal and sealer is not None:
            clones = _seal(sealer, devices, plan.restore, needed, done.unsealed)
        else:
            clones = [(p, open_tree_clone(p)) for p in plan.restore if os.path.exists(p)]
            for _, fd in clones:
                set_attr(fd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        set_attr(-100, MOUNT_ATTR_RDONLY, path="/")
        for cover, mode in plan.covers:
            if not os.path.isdir(cover):
                continue
            mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o}")
            done.covers.append(cover)
        for path, fd in clones:
            _make_mount_point(path, stat.S_ISDIR(os.fstat(fd).st_mode))
            move_to(fd, path)
            os.close(fd)
            done.restored.append(path)
        if ws_fd is not None and plan.workspace:
            _mount_workspace(plan.workspace, ws_fd, layer_fd, workspace_read_only)
        # Over the workspace, outermost first, so an inner one is not hidden by an outer one.
        for path in sorted(guards, key=lambda p: (p.count("/"), p)):
            move_to(guards[path], path)
            os.close(guards[path])
            done.restored.append(path)
        _hide(hide, done)
        return done
    finally:
        for owned in (made, made_sealer):
            if owned is not None:
                os.close(owned)


def _guard_clones(plan: Layout, protect: Iterable[str]) -> dict[str, int]:
    """Read-only clones of the directories to protect inside the workspace, by path."""
    guards = {
        path: open_tree_clone(path)
        for path in protect
        if plan.workspace and _under(path, plan.workspace) and path != plan.workspace
        if os.path.isdir(path) and not os.path.islink(path)
    }
    for fd in guards.values():
        set_attr(fd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
    return guards


def _workspace_clones(
    plan: Layout, layer: str | None, userns: int | None, workspace_read_only: bool
) -> tuple[int | None, int | None]:
    """Clones of the workspace (id-mapped through `userns`, read-only if asked) and of its
    layer, taken before anything is covered; `None` for what there is none of."""
    ws_fd = layer_fd = None
    if plan.workspace and layer:
        layer_fd = open_tree_clone(layer)  # before /tmp, where it may lie, is covered
        set_attr(layer_fd, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
    if plan.workspace:
        # A layer's frozen base, when it has one, is what the child sees under its writes.
        frozen = f"{layer}/base" if layer else None
        ws_fd = open_tree_clone(frozen if frozen and os.path.isdir(frozen) else plan.workspace)
        set_attr(
            ws_fd,
            MOUNT_ATTR_NOSUID
            | MOUNT_ATTR_NODEV
            | (MOUNT_ATTR_IDMAP if userns else 0)
            | (MOUNT_ATTR_RDONLY if workspace_read_only else 0),
            userns or 0,
        )
    return ws_fd, layer_fd


def _mount_workspace(
    workspace: str, ws_fd: int, layer_fd: int | None, workspace_read_only: bool
) -> None:
    """The workspace's clone moved into place, or an overlay of it under its layer."""
    _make_mount_point(workspace, True)
    if layer_fd is None:
        move_to(ws_fd, workspace)
    else:
        overlay_from_clones(ws_fd, layer_fd, workspace, read_only=workspace_read_only)
        os.close(layer_fd)
    os.close(ws_fd)


def _hide(hide: Iterable[str], done: Applied) -> None:
    """Cover each directory to hide with an empty read-only mount, outermost first."""
    for path in sorted(set(hide), key=lambda p: (p.count("/"), p)):
        if os.path.isdir(path) and not os.path.islink(path):
            mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0")
            done.hidden.append(path)


# --- the git directories -----------------------------------------------------------------------

GIT_GUARDED = (("hooks", True), ("config", False))
"""What of a git directory is mounted read-only (name, is a directory): the hooks git runs,
and the config that names the commands it runs (core.fsmonitor, core.pager, core.hooksPath,
aliases, filters, core.sshCommand, ...)."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class GuardError(OSError):
    """A git entry to guard is not what the parent saw (a link, the wrong type)."""


def _parent_of(root: int, rel: str) -> tuple[int, str] | None:
    """The directory holding `rel` under `root`, opened without following a link (the
    workspace is the child's: never trusted), and the last component; `None`: not there."""
    where, _, leaf = rel.rpartition("/")
    fd = gitdirs.open_dir(root, where)
    return None if fd is None or not leaf else (fd, leaf)


def prepare_git(workspace: str, entries: Iterable[str]) -> None:
    """Give each git directory in `entries` the `hooks` directory and `config` file it lacks
    (owned as the git directory is), so there is something to mount read-only over: a
    repository made without them (`git init --template=`, some libraries) would otherwise let
    the child create them. Run on the host's view, before any namespace; raises `OSError`."""
    root = os.open(workspace, _DIR)
    try:
        for rel in entries:
            found = _parent_of(root, rel)
            if found is None:
                continue
            parent, leaf = found
            try:
                try:
                    git = os.open(leaf, _DIR | os.O_NOFOLLOW, dir_fd=parent)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # gone, or a `.git` file: nothing to make
                try:
                    st = os.fstat(git)
                    for name, directory in GIT_GUARDED:
                        try:
                            os.stat(name, dir_fd=git, follow_symlinks=False)
                            continue
                        except FileNotFoundError:
                            pass
                        try:
                            if directory:
                                os.mkdir(name, 0o755, dir_fd=git)
                            else:
                                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                os.close(os.open(name, flags | os.O_CLOEXEC, 0o644, dir_fd=git))
                        except PermissionError:
                            continue  # not the user's to write, so not the child's either
                        os.chown(name, st.st_uid, st.st_gid, dir_fd=git, follow_symlinks=False)
                finally:
                    os.close(git)
            finally:
                os.close(parent)
    finally:
        os.close(root)


def _bind(parent: int, leaf: str, *, read_only: bool, directory: bool, name: str) -> None:
    """Mount `leaf` (in the directory `parent`; `name`: its path in the workspace) over
    itself; a link or the wrong type is refused (`GuardError`), checked before the clone and
    on the clone itself (the child may swap it in between)."""

    def check(mode: int) -> None:
        if not (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):
            kind = "a directory" if directory else "a regular file"
            raise GuardError(
                f"the workspace's {name} is not {kind} (a symbolic link?), so the sandbox "
                "cannot keep the child from changing what git runs there; run with "
                "ChildConfig(allow_git_config=True) (--allow-git-config) to let it"
            )

    check(os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode)
    clone = open_tree_clone(leaf, parent, follow=False)
    try:
        check(os.fstat(clone).st_mode)
        if read_only:
            set_attr(clone, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        move_to(clone, leaf, parent)
    finally:
        os.close(clone)


def guard_git(workspace: str, entries: Iterable[str]) -> list[str]:
    """Guard each `.git` entry (relative to `workspace`, outermost first): a git directory is
    mounted over itself as it is (so it is a mount point: busy to rename or remove), then its
    `hooks` and `config` read-only over themselves; a `.git` file read-only. Must run where the
    workspace the child will see is already mounted. What was guarded; raises `OSError`
    (`GuardError` for an entry that is a link or of the wrong type)."""
    done: list[str] = []
    root = os.open(workspace, _DIR)
    try:
        for rel in sorted(entries, key=lambda p: (p.count("/"), p)):
            found = _parent_of(root, rel)
            if found is None:
                continue
            parent, leaf = found
            try:
                try:
                    st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone since the plan: nothing there for git to use
                if stat.S_ISREG(st.st_mode):
                    _bind(parent, leaf, read_only=True, directory=False, name=rel)
                    done.append(rel)
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    raise GuardError(f"{rel} is neither a git directory nor a `gitdir:` file")
                _bind(parent, leaf, read_only=False, directory=True, name=rel)
                git = os.open(leaf, _DIR | os.O_NOFOLLOW, dir_fd=parent)  # the new mount's root
                try:
                    for name, directory in GIT_GUARDED:
                        try:
                            _bind(
                                git,
                                name,
                                read_only=True,
                                directory=directory,
                                name=f"{rel}/{name}",
                            )
                        except FileNotFoundError:
                            continue  # `prepare_git` made both; a race removed one: not there
                        done.append(f"{rel}/{name}")
                finally:
                    os.close(git)
                done.append(rel)
            finally:
                os.close(parent)
    finally:
        os.close(root)
    return done


def user_namespace(uid: int, gid: int) -> None:
    """Without root: a user namespace of this process's own, mapping only `uid` and `gid` to
    themselves (files keep their owners; everyone else shows as the overflow id), and in it a
    private mount namespace whose mounts never propagate out, where `guard_git` can mount.
    The capabilities this gives inside are dropped before the child runs
    (`privileges.drop_namespace_capabilities`). Raises `OSError` (a host that forbids
    unprivileged user namespaces)."""
    unshare(CLONE_NEWUSER | CLONE_NEWNS)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1\n")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1\n")
    mount("none", "/", None, MS_REC | MS_SLAVE)


# --- a layered workspace (see `layer.py`) -----------------------------------------------------

OVERLAY_OPTIONS = "redirect_dir=nofollow,metacopy=off,index=off,xino=off"
LAYER_STAGE = "/tmp/.tether-layer"
"""Where a root supervisor's child attaches the layers while it mounts the overlay (its
private /tmp)."""


def overlay_options(lower: str, layer: str, *, read_only: bool, userxattr: bool) -> str:
    """The overlay's mount options for `lower` (the workspace) and the layer directory
    `layer` (its `upper` and `work`); read-only: the layer's `upper` as a second lower layer."""
    if read_only:
        opts = f"lowerdir={layer}/upper:{lower}"
    else:
        opts = f"lowerdir={lower},upperdir={layer}/upper,workdir={layer}/work"
    opts += f",{OVERLAY_OPTIONS}"
    if userxattr:
        opts += ",userxattr"
    return opts


def mount_overlay(target: str, opts: str, *, read_only: bool) -> None:
    flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
    mount("overlay", target, "overlay", flags, opts)


def overlay_from_clones(ws_fd: int, layer_fd: int, workspace: str, *, read_only: bool) -> None:
    """As root in the private mount namespace: the overlay at `workspace` (an existing mount
    point) from the detached clones `ws_fd` (the workspace, idmapped) and `layer_fd` (the layer
    directory), attached under `LAYER_STAGE` while it is mounted and detached again, so nothing
    in the child's view leads to the real workspace or the layer directory. The caller closes
    the fds. Raises `OSError`."""
    lower, layer = f"{LAYER_STAGE}/lower", f"{LAYER_STAGE}/layer"
    os.makedirs(lower, mode=0o700)
    os.makedirs(layer, mode=0o700)
    try:
        move_to(ws_fd, lower)
        move_to(layer_fd, layer)
        try:
            opts = overlay_options(lower, layer, read_only=read_only, userxattr=False)
            mount_overlay(workspace, opts, read_only=read_only)
        finally:
            for staged in (lower, layer):
                umount(staged, MNT_DETACH)
    finally:
        for staged in (lower, layer, LAYER_STAGE):
            try:
                os.rmdir(staged)
            except OSError:
                pass
