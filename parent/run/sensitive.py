"""Files the user's own tools run on their own, watched by the parent: which they are, a small
snapshot of them before and after a run, and what changed, with its content.

Theory of operation
-------------------
A sandboxed child may write anything in its workspace, and some files there are code the
user's tools will run later, outside every sandbox, without the user asking for it: a git hook
runs on the user's next `git checkout`, a `core.fsmonitor` command in `.git/config` on their
next `git status`, `.envrc` when they `cd` in (direnv), `package.json` scripts on `npm
install`. `PLACES` names them (docs/delegation.md has the table and why each is there). Ordinary
source files are not in it: running the project is running its code, which is what a
verifier reads; these are the files that run when the user does something else.

`take(root)` records each place that exists at the workspace root, without following a
symbolic link anywhere (every directory on the way is opened `O_NOFOLLOW` from the one before):
for a file, what `lstat` says (a rewrite is caught by ctime, as in the delegation's
snapshot); for a directory place (`.git/hooks`, `.vscode`, ...), every entry under it, at most
`MAX_TREE_ENTRIES` (past that the place counts as changed every time: it cannot be compared);
for a file of which only a part runs (`package.json`'s `scripts`, `pyproject.toml`'s build
hooks), its bytes too, so a change elsewhere in it is not a sensitive one. The repository's
`.git` directory contributes the files git runs or takes commands from (`config`, `hooks/`,
`info/attributes`, `config.worktree`) and the same for each submodule's git directory under
`.git/modules` (found by `tether.contain.gitdirs`, as the sandbox's plan finds what it
guards); git never runs `hooks/*.sample`, so those are left out. The directory the
repository's `core.hooksPath` names, when it lies inside the workspace, is watched as its
hooks. A `.git` that is not a directory (a worktree's or submodule's `gitdir:` pointer, a
link) is itself watched.

Cost: a small root (one directory block) is listed once and only the places it holds are
looked up — a few dozen `lstat`s and two small reads when they exist; a larger root is asked
place by place, one `faccessat` for each missing place. A run's two snapshots and their
comparison take about 0.02 ms in an empty workspace and 0.25 ms in a project with a repository
(`python -m benchmarks.snapshot_cost --watch`), so it is taken for every run with a workspace
(before the run, or a follow-up, and when its result is built), not only for delegated ones.

`changes(before, after, root)` lists what was added, modified or deleted, each with what it
holds now (`CONTENT_BYTES` of it, `TOTAL_CONTENT_BYTES` over one list: the bound on what a
result carries), read by the parent the same careful way. A hostile child can change a file
between the snapshot and the read: the content is what was there when the parent looked, and
the change is listed either way.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.contain import gitdirs
from tether.protocol.messages import SensitiveChange

CONTENT_BYTES = 4096
"""The most of one file's content a change carries."""
TOTAL_CONTENT_BYTES = 64 * 1024
"""The most content one list of changes carries (past it, changes are listed without)."""
MAX_TREE_ENTRIES = 200
"""Entries recorded under one directory place; past that it is not compared entry by entry."""
PART_BYTES = 1024 * 1024
"""The largest file of which only a part is compared; a larger one is compared whole."""

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _package_scripts(data: bytes) -> str | None:
    """npm, yarn and pnpm run `scripts` on install (`preinstall`, `install`, `postinstall`,
    `prepare`) and by name; the rest of `package.json` is data."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    return json.dumps({"scripts": doc.get("scripts")}, indent=1, sort_keys=True)


_BUILD_KEYS = frozenset({"hooks", "build", "scripts", "cmdclass"})


def _build_hooks(data: bytes) -> str | None:
    """A build frontend (`pip install .`) runs the `[build-system]` backend, from the
    workspace itself when `backend-path` says so, and the backend runs the hooks and commands
    its `[tool.*]` tables name (hatch's `build.hooks`, poetry's and pdm's `build`, pdm's
    `scripts`, setuptools' `cmdclass`)."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    kept: dict[str, Any] = {"build-system": doc.get("build-system")}

    def visit(table: Any, path: str, depth: int) -> None:
        if not isinstance(table, dict) or depth > 5:
            return
        for key, value in table.items():
            where = f"{path}.{key}"
            if key in _BUILD_KEYS:
                kept[where] = value
            else:
                visit(value, where, depth + 1)

    visit(doc.get("tool"), "tool", 0)
    return json.dumps(kept, indent=1, sort_keys=True, default=str)


@dataclass(frozen=True)
class Place:
    path: str
    """Relative to the workspace (or, inside `GIT_PLACES`, to a git directory)."""
    runs: str
    """What runs it, and when."""
    tree: bool = False
    """A directory: every entry under it counts."""
    part: Callable[[bytes], str | None] | None = None
    """Only this part of the file counts (`None` from it: not parsable, compared whole)."""


PLACES: tuple[Place, ...] = (
    Place(".gitmodules", "git: submodule URLs and paths, used by `git submodule update`"),
    Place(".gitconfig", "git: read when a repository's config includes it (`include.path`)"),
    Place(".envrc", "direnv: sourced by the user's shell on `cd` (once allowed)"),
    Place(".vscode", "VS Code: tasks that run on folder open, settings naming programs", True),
    Place(".idea", "JetBrains IDEs: run configurations, startup tasks, tool paths", True),
    Place(".devcontainer", "dev containers: commands run when the container is created", True),
    Place("package.json", "npm, yarn, pnpm: lifecycle scripts on install", part=_package_scripts),
    Place(".npmrc", "npm: settings such as `script-shell` and `node-options`"),
    Place(".yarnrc.yml", "yarn: `yarnPath` names the program yarn runs"),
    Place("Makefile", "make: its targets' recipes"),
    Place("makefile", "make: its targets' recipes"),
    Place("GNUmakefile", "make: its targets' recipes"),
    Place(".pre-commit-config.yaml", "pre-commit: hooks run by git commit once installed"),
    Place(".husky", "husky: git hooks (core.hooksPath points here)", True),
    Place(
        "pyproject.toml",
        "pip and build frontends: the build backend and its hooks",
        part=_build_hooks,
    ),
    *(
        Place(name, "the user's shell, when the workspace is their home directory")
        for name in (".bashrc", ".bash_profile", ".profile", ".zshrc", ".zshenv", ".zprofile")
    ),
    Place(".config/git/config", "git: the user's own config, when the workspace is their home"),
)
"""What the parent watches at the workspace root (besides the git directory)."""

GIT_PLACES: tuple[Place, ...] = (
    Place("config", "git: core.fsmonitor, core.pager, core.sshCommand, aliases, filters"),
    Place("config.worktree", "git: per-worktree config, the same commands as config"),
    Place("hooks", "git: hooks run on checkout, commit, merge, push", True),
    Place("info/attributes", "git: which filter and diff drivers run on which files"),
)
"""What the parent watches in a git directory (`.git`, and each under `.git/modules`)."""


def place_of(path: str) -> Place | None:
    """The watched place a workspace-relative path is, or lies in (a directory place), if any:
    how a layered run's change set marks what the user's own tools run (`FileChange.runs`)."""
    for place in PLACES:
        if path == place.path or (place.tree and path.startswith(place.path + "/")):
            return place
    return None


GIT_POINTER = "git: a pointer to the git directory (`gitdir:`) git uses here"

Kind = Literal["file", "symlink", "other"]


@dataclass(frozen=True)
class Seen:
    """One watched entry as the parent saw it."""

    runs: str
    kind: Kind
    meta: tuple[int, ...]
    """mode, size, mtime, ctime, inode (ctime: nothing a process can call sets it back)."""
    target: str | None = None
    """A symbolic link's target."""
    data: bytes | None = None
    """The bytes of a file of which only a part counts (`Place.part`)."""
    part: Callable[[bytes], str | None] | None = field(default=None, compare=False)
    uncomparable: bool = False
    """A directory place past `MAX_TREE_ENTRIES`: it cannot be compared, so it always differs."""


@dataclass(frozen=True)
class Watch:
    """The watched places of one workspace at one moment: relative path → what was seen."""

    entries: dict[str, Seen] = field(default_factory=dict)


def take(root: str | os.PathLike[str], *, nested_git: Iterable[str] = ()) -> Watch:
    """Record every watched place under the workspace `root` (see the module docstring);
    `nested_git`: more `.git` entries (relative paths) to record the git places of, as the
    root's (a walk of the whole workspace finds nested repositories)."""
    try:
        fd = os.open(os.fspath(root), _DIR)
    except OSError:
        return Watch()
    entries: dict[str, Seen] = {}
    try:
        names = _listing(fd)
        for place in PLACES:
            if names is None or place.path.split("/", 1)[0] in names:
                _record(fd, place.path, place, place.path, entries)
        for rel in (".git", *nested_git):
            if names is None or rel.split("/", 1)[0] in names:
                _git(fd, rel, entries)
    finally:
        os.close(fd)
    return Watch(entries)


LISTED_BYTES = 4096
"""A workspace root whose directory is at most this large (one block: up to a hundred-odd
entries on ext4, about two hundred on tmpfs) is listed once, and only the places it holds are
looked up: a follow-up takes two snapshots on its path, and most places are missing. A larger
root is asked place by place (its listing would cost more than the lookups)."""


def _listing(fd: int) -> frozenset[str] | None:
    """The names at a small root (see `LISTED_BYTES`), or `None`: look every place up."""
    try:
        if os.fstat(fd).st_size > LISTED_BYTES:
            return None
        return frozenset(os.listdir(fd))
    except OSError:
        return None


def _git(root_fd: int, rel: str, entries: dict[str, Seen]) -> None:
    """The `.git` at `rel`: a git directory's places and its submodules', or, for anything
    else there (a `gitdir:` file, a link), the entry itself."""
    st = gitdirs.lstat_at(root_fd, rel)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):  # what it points at decides the repository git uses
        _record(root_fd, rel, Place(rel, GIT_POINTER), rel, entries)
        return
    for git in gitdirs.git_entries(root_fd, rel):
        for place in GIT_PLACES:
            _record(root_fd, f"{git}/{place.path}", place, f"{git}/{place.path}", entries)
    hooks = _hooks_path(root_fd, rel)
    if hooks is not None:
        _record(root_fd, hooks, Place(hooks, HOOKS_PATH, tree=True), hooks, entries)


HOOKS_PATH = "git: hooks, from the directory core.hooksPath names"
_HOOKS_PATH = re.compile(rb"^\s*hookspath\s*=\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)


def _hooks_path(root_fd: int, git: str) -> str | None:
    """The workspace directory the repository's `core.hooksPath` names (husky and projects
    that keep their hooks in the tree: `.githooks`), relative to the workspace, when it lies
    inside it: git runs the hooks there instead of `.git/hooks`."""
    fd = gitdirs.open_dir(root_fd, git)
    if fd is None:
        return None
    try:
        data = _read(fd, "config", PART_BYTES) or b""
    finally:
        os.close(fd)
    found = _HOOKS_PATH.findall(data)
    if not found:
        return None
    value = found[-1].decode("utf-8", errors="replace").strip('"')
    if not value or value.startswith("~") or os.path.isabs(value):
        return None  # outside the workspace: not the child's to write
    rel = os.path.normpath(value)  # relative to the working tree, the workspace root here
    inside_git = rel == ".git" or rel.startswith(".git/")  # `.git/hooks` is watched already
    return None if rel == "." or rel.startswith("..") or inside_git else rel


def _record(root_fd: int, rel: str, place: Place, name: str, entries: dict[str, Seen]) -> None:
    parent, _, leaf = rel.rpartition("/")
    if not parent:
        # Most places sit at the root: looked up from the root's own descriptor (no copy of
        # it to make and close; a follow-up takes two snapshots on its path).
        _record_at(root_fd, leaf, place, name, entries)
        return
    dir_fd = gitdirs.open_dir(root_fd, parent)
    if dir_fd is None:
        return
    try:
        _record_at(dir_fd, leaf, place, name, entries)
    finally:
        os.close(dir_fd)


def _record_at(dir_fd: int, leaf: str, place: Place, name: str, entries: dict[str, Seen]) -> None:
    # Asked first whether it exists at all: a missing place costs one `faccessat` and no
    # exception (a failed `lstat` raises one), and most places are missing.
    if not os.access(leaf, os.F_OK, dir_fd=dir_fd, follow_symlinks=False):
        return
    try:
        st = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        if place.tree:
            _tree(dir_fd, leaf, name, place, entries)
        return
    entries[name] = _seen(dir_fd, leaf, st, place)


def _tree(dir_fd: int, leaf: str, name: str, place: Place, entries: dict[str, Seen]) -> None:
    found: dict[str, Seen] = {}
    stack: list[tuple[int | None, str]] = [(gitdirs.open_dir(dir_fd, leaf), name)]
    while stack:
        fd, prefix = stack.pop()
        if fd is None:
            continue
        try:
            listed = sorted(os.scandir(fd), key=lambda e: e.name)
        except OSError:
            listed = []
        try:
            for e in listed:
                if place.path == "hooks" and e.name.endswith(".sample"):
                    continue  # git never runs these; a rename to a hook's name is a new entry
                try:
                    st = os.stat(e.name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append((gitdirs.open_dir(fd, e.name), f"{prefix}/{e.name}"))
                    continue
                if len(found) >= MAX_TREE_ENTRIES:
                    for other, _ in stack:
                        if other is not None:
                            os.close(other)
                    stack.clear()
                    entries[name] = Seen(place.runs, "other", (), uncomparable=True)
                    return
                found[f"{prefix}/{e.name}"] = _seen(fd, e.name, st, place)
        finally:
            os.close(fd)
    entries.update(found)


def _seen(dir_fd: int, leaf: str, st: os.stat_result, place: Place) -> Seen:
    meta = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if stat.S_ISLNK(st.st_mode):
        try:
            target: str | None = os.readlink(leaf, dir_fd=dir_fd)
        except OSError:
            target = None
        return Seen(place.runs, "symlink", meta, target=target)
    if not stat.S_ISREG(st.st_mode):
        return Seen(place.runs, "other", meta)
    data = None
    if place.part is not None and st.st_size <= PART_BYTES:
        data = _read(dir_fd, leaf, PART_BYTES)
    return Seen(place.runs, "file", meta, data=data, part=place.part)


def _read(dir_fd: int, leaf: str, limit: int) -> bytes | None:
    """At most `limit` bytes of a regular file, opened without following a link; `None` when
    it is not one (a FIFO swapped in never blocks the parent: `O_NONBLOCK`, then `fstat`)."""
    try:
        fd = os.open(leaf, _FILE, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


# --- what changed ---------------------------------------------------------------------------------


def _differs(old: Seen, new: Seen) -> bool:
    """Whether a watched entry changed: not when `lstat` says nothing did (ctime included, so
    no rewrite hides); for a file of which only a part counts, when that part differs."""
    if old.uncomparable or new.uncomparable:
        return True  # a place too large to compare is always reported
    if (old.kind, old.meta, old.target) == (new.kind, new.meta, new.target):
        return False
    if old.part is not None and old.data is not None and new.data is not None:
        if old.data == new.data:
            return False
        before, after = old.part(old.data), old.part(new.data)
        return (before if before is not None else old.data) != (
            after if after is not None else new.data
        )
    return True


def changes(before: Watch, after: Watch, root: str | os.PathLike[str]) -> list[SensitiveChange]:
    """What changed between two snapshots of the workspace `root`, in path order, each with
    what it holds now (bounded: see `CONTENT_BYTES`, `TOTAL_CONTENT_BYTES`)."""
    old, new = before.entries, after.entries
    found: list[tuple[str, Literal["added", "modified", "deleted"], Seen]] = []
    for path in sorted(old.keys() | new.keys()):
        if path not in new:
            found.append((path, "deleted", old[path]))
        elif path not in old:
            found.append((path, "added", new[path]))
        elif _differs(old[path], new[path]):
            found.append((path, "modified", new[path]))
    if not found:
        return []
    budget = TOTAL_CONTENT_BYTES
    out: list[SensitiveChange] = []
    try:
        root_fd: int | None = os.open(os.fspath(root), _DIR)
    except OSError:
        root_fd = None
    try:
        for path, change, seen in found:
            if change == "deleted":
                out.append(SensitiveChange(path=path, change=change, runs=seen.runs))
                continue
            content, truncated = _content(root_fd, path, seen, budget)
            budget -= len(content.encode("utf-8", errors="replace"))
            size = seen.meta[1] if seen.meta else 0
            out.append(
                SensitiveChange(
                    path=path,
                    change=change,
                    runs=seen.runs,
                    fs_type=seen.kind,
                    size=size,
                    executable=bool(seen.meta and seen.meta[0] & 0o111 and seen.kind == "file"),
                    content=content,
                    truncated=truncated,
                )
            )
    finally:
        if root_fd is not None:
            os.close(root_fd)
    return out


def _content(root_fd: int | None, path: str, seen: Seen, budget: int) -> tuple[str, bool]:
    """What `path` holds now, for a person or a verifier to read: (text, truncated)."""
    if seen.uncomparable:
        return f"(more than {MAX_TREE_ENTRIES} entries: not compared entry by entry)", False
    if seen.kind == "symlink":
        text = f"(a symbolic link to {seen.target!r})"
        return text, False
    if seen.kind != "file":
        return "(not a regular file)", False
    limit = max(0, min(CONTENT_BYTES, budget))
    if not limit:
        return "", True
    if seen.data is not None and seen.part is not None:
        part = seen.part(seen.data)
        data = part.encode() if part is not None else seen.data
    else:
        data = b""
        if root_fd is not None:
            parent, _, leaf = path.rpartition("/")
            fd = gitdirs.open_dir(root_fd, parent) if parent else os.dup(root_fd)
            if fd is not None:
                try:
                    data = _read(fd, leaf, limit + 1) or b""
                finally:
                    os.close(fd)
    if b"\0" in data[: limit + 1]:
        return f"(binary, {seen.meta[1]} bytes)", False
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit
