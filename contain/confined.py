"""The confined path walk: a path resolved under one root, never to anything outside it.

One walk for both sides: the child's file tools (`tether.child.workspace`), the files the parent
serves a foreign ACP agent (`tether.parent.providers.confined_fs`) and the parent's re-check of
a result's artifacts (`tether.parent.run.evidence`). Standard library only, so the child and the
parent may both import it.

`ConfinedRoot.locate` resolves a path the way the kernel would, but one component at a time from
an open descriptor of the root (an `openat` walk), never by handing a path string to the kernel:

* every directory on the way is opened with `O_PATH | O_DIRECTORY | O_NOFOLLOW` relative to the
  one before it, so the kernel never follows a symlink for the walk, even one swapped in a
  moment ago: a name that does not open as a directory is looked at (`lstat`), and a symlink is
  followed by the walk itself (one that is a directory after all was swapped in between:
  `Why.REPLACED`); the caller opens the final name through `Landing.open`, with `O_NOFOLLOW`
  too (`Why.BECAME_SYMLINK`);
* symlinks are followed by the walk itself: a relative target is spliced into the components
  still to walk, an absolute one must spell the root as its prefix (`Why.LINK_OUTSIDE`), and at
  most `MAX_SYMLINKS` are followed (`Why.LOOP`);
* `..` goes back to the directory the walk came from (after a symlink: the physical parent, as
  the kernel's does); above the root it is refused (`Why.CLIMBS`);
* an absolute path must spell the root as its prefix, lexically: `/proc/self/root/...`,
  `/proc/self/cwd/...` and other aliases are refused (`Why.ABSOLUTE_OUTSIDE`);
* NUL bytes, names that cannot be encoded, over-long paths and names are refused;
* a device node is never opened (`Why.DEVICE`): opening one can act on the device.

Directories are descended with `O_PATH`: like the kernel's own lookup, the walk needs only the
permission to search a directory, not to read it.

The walk says what happened: a `Refused` whose `why` names the rule, with where it applied. Each
user words it for its own reader through the `word` function it gives its `ConfinedRoot` (a
tool result, an ACP error, a skipped artifact's reason). `ConfinedRoot.look` tells what an
artifact at a path is (the final symlink reported as one, but required to lead to something that
exists inside), for the child's `complete` and the parent's evidence alike. `descend` walks the
tree under a located directory for `glob` and `grep`, never through a symlink.
"""

from __future__ import annotations

import datetime as dt
import enum
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, NamedTuple

PATH_MAX = 4096
NAME_MAX = 255
MAX_SYMLINKS = 40
_WALK_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# UTF-8 needs at most 4 bytes a character (a surrogate-escaped byte takes 1): a string this short
# cannot be over the limit, and the walk skips encoding it again.
_SHORT_NAME = NAME_MAX // 4


class Why(enum.Enum):
    """Why the walk refused a path (the value is a plain description, for any reader)."""

    NUL = "the path contains a NUL byte"
    UNENCODABLE = "the path cannot be encoded as a file name"
    TOO_LONG = f"the path is longer than {PATH_MAX - 1} bytes"
    NAME_TOO_LONG = f"a name is longer than {NAME_MAX} bytes"
    ABSOLUTE_OUTSIDE = "the absolute path is outside the root"
    CLIMBS = "`..` climbs above the root"
    LINK_OUTSIDE = "a symlink on the way leads outside the root"
    LOOP = "too many levels of symbolic links"
    MISSING = "a directory on the way does not exist"
    NOT_A_DIRECTORY = "a name on the way is not a directory"
    REPLACED = "a directory on the way was replaced while the path was resolved"
    BECAME_SYMLINK = "the final name became a symlink before it was opened"
    DEVICE = "a device node is never opened"
    # Only `look`:
    ABSENT = "nothing is there"
    DANGLING = "a symlink that leads nowhere"
    SPECIAL = "not a file, directory or symbolic link"


OUTSIDE = frozenset({Why.ABSOLUTE_OUTSIDE, Why.CLIMBS, Why.LINK_OUTSIDE})
"""The refusals that mean: the path leads out of the root."""


class Refused(Exception):
    """The walk will not resolve `path` under `root`: `why` names the rule. `where` is the
    absolute path of the name it applied to (empty when it is the path as a whole), `name` that
    name, `target` a symlink's target, `via_link` whether a symlink was followed on the way."""

    def __init__(
        self,
        why: Why,
        path: str,
        root: str,
        *,
        where: str = "",
        name: str = "",
        target: str = "",
        via_link: bool = False,
    ) -> None:
        super().__init__(why.value)
        self.why = why
        self.path = path
        self.root = root
        self.where = where
        self.name = name
        self.target = target
        self.via_link = via_link


def _as_is(refused: Refused) -> Exception:
    return refused


Kind = Literal["file", "directory", "symlink"]
_KINDS: dict[int, Kind] = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink"}


class Found(NamedTuple):
    """What `look` found: the path it names (absolute, its directories resolved, the final name
    kept), its kind and its `lstat`."""

    path: str
    kind: Kind
    st: os.stat_result

    @property
    def modified_at(self) -> str:
        return iso_mtime(self.st)


def iso_mtime(st: os.stat_result) -> str:
    """`st`'s modification time as an artifact states it (ISO 8601, UTC)."""
    return dt.datetime.fromtimestamp(st.st_mtime, dt.UTC).isoformat()


class Landing:
    """Where a path landed: an open `O_PATH` descriptor of its directory and the final name in it.

    `name` is never a symlink the walk saw (unless told to keep the last one) and may not exist;
    `"."` means the directory itself. `st` is the final name's `lstat` as the walk saw it
    (`None`: nothing is there; for `"."`, the directory's). Open the name with `open`. Close the
    landing (or use it as a context manager) to release the descriptor.
    """

    __slots__ = ("_names", "_root", "dir_fd", "given", "name", "st")

    def __init__(
        self,
        root: ConfinedRoot,
        given: str,
        dir_fd: int,
        names: list[str],
        name: str,
        st: os.stat_result | None,
    ) -> None:
        self._root = root
        self.given = given
        """The path as the caller gave it."""
        self.dir_fd = dir_fd
        self._names = names
        self.name = name
        self.st = st

    @property
    def parts(self) -> tuple[str, ...]:
        """The names from the root down to the final one (none for the root itself)."""
        if self.name == ".":
            return tuple(self._names)
        return (*self._names, self.name)

    @property
    def relative(self) -> str:
        """The path below the root, `/`-separated; `"."` for the root itself."""
        return "/".join(self.parts) or "."

    @property
    def path(self) -> str:
        """The absolute path of the final name, its directories as the walk resolved them."""
        parts = self.parts
        if not parts:
            return self._root.root
        return f"{self._root.root.rstrip('/')}/{'/'.join(parts)}"

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Landing:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def lstat(self) -> os.stat_result | None:
        """The final name's `lstat` now, or `None` if nothing is there."""
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open(self, flags: int, mode: int = 0o644) -> int:
        """Open the final name without following a symlink swapped in since the walk, and
        without opening a device node the walk saw (`O_DIRECTORY` opens fail on one anyway)."""
        st = self.st
        if (
            st is not None
            and (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode))
            and not flags & os.O_DIRECTORY
        ):
            raise self._root.word(self._refused(Why.DEVICE))
        try:
            return os.open(
                self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.dir_fd
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._root.word(self._refused(Why.BECAME_SYMLINK)) from None
            raise

    def _refused(self, why: Why) -> Refused:
        return Refused(why, self.given, self._root.root, where=self.path, name=self.name)


class ConfinedRoot:
    """A directory under which paths are resolved by the confined walk (module docstring).

    `word` turns the walk's `Refused` into the exception this root's callers expect (by default
    the `Refused` itself); `locate` and `Landing.open` raise what it returns, `look` never words.
    Other failures of the file system (a permission, an I/O error) are raised as `OSError`.
    """

    __slots__ = ("_parts", "root", "word")

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        word: Callable[[Refused], Exception] = _as_is,
        resolved: bool = False,
    ) -> None:
        """`resolved`: the caller vouches that `root` is an absolute path naming no symlink
        (the parent's run workspaces are): it is taken as it is, not resolved again (a
        `realpath` costs more than a whole look-up); a walk from it fails if it is not a
        directory."""
        if resolved:
            real = os.path.normpath(os.fspath(root))
            if not real.startswith("/"):
                raise ValueError(f"the root {real} is not absolute")
        else:
            real = os.path.realpath(root, strict=True)
            if not os.path.isdir(real):
                raise NotADirectoryError(f"workspace {real} is not a directory")
        self.root = real
        """The root, absolute and resolved."""
        self._parts = [c for c in real.split("/") if c]
        self.word = word

    def locate(self, path: str, *, make_parents: bool = False) -> Landing:
        """Walk `path` from the root, following every symlink on it, the last one included.
        With `make_parents`, missing directories on the way are created (by the same walk)."""
        try:
            return self._walk(path, make_parents=make_parents, follow_last=True)
        except Refused as refused:
            raise self.word(refused) from None

    def look(self, path: str) -> Found:
        """What an artifact at `path` is now: the final name is not followed (a symlink is
        reported as one) but must lead to something inside the root that exists. Raises
        `Refused` (`ABSENT`, `DANGLING`, `SPECIAL`, or why the walk refused) or `OSError`."""
        landing = self._walk(path, make_parents=False, follow_last=False)
        try:
            st = landing.st
            where = landing.path
        finally:
            landing.close()
        if st is None:
            raise Refused(Why.ABSENT, path, self.root, where=where)
        kind = _KINDS.get(stat.S_IFMT(st.st_mode))
        if kind is None:
            raise Refused(Why.SPECIAL, path, self.root, where=where)
        if kind == "symlink":
            with self._walk(path, make_parents=False, follow_last=True) as target:
                if target.st is None:
                    raise Refused(Why.DANGLING, path, self.root, where=where, via_link=True)
        return Found(where, kind, st)

    # --- the walk -------------------------------------------------------------------------------

    def _below(self, path: str) -> list[str] | None:
        """The components of the absolute `path` below the root (lexically), or `None`."""
        parts = _components(path)
        n = len(self._parts)
        if parts[:n] != self._parts:
            return None
        return parts[n:]

    def _names(self, path: str) -> list[str]:
        """The names `path` asks the walk to take from the root, or why it cannot."""
        if "\0" in path:
            raise Refused(Why.NUL, path, self.root)
        try:
            size = len(os.fsencode(path))
        except UnicodeEncodeError:
            raise Refused(Why.UNENCODABLE, path, self.root) from None
        if size >= PATH_MAX:
            raise Refused(Why.TOO_LONG, path, self.root)
        if not path.startswith("/"):
            return _components(path)
        below = self._below(path)
        if below is None:
            raise Refused(Why.ABSOLUTE_OUTSIDE, path, self.root)
        return below

    def _walk(self, path: str, *, make_parents: bool, follow_last: bool) -> Landing:
        root = self.root
        # `todo`: the names still to walk, the next one last. `fds`: the root and the
        # directories below it the walk is in; `names`: theirs (one fewer).
        todo = self._names(path)[::-1]
        fds = [os.open(root, _WALK_FLAGS)]
        names: list[str] = []
        links = 0
        try:
            while todo:
                comp = todo.pop()
                if comp == "..":
                    if not names:
                        raise Refused(Why.CLIMBS, path, root, via_link=links > 0)
                    os.close(fds.pop())
                    names.pop()
                    continue
                if len(comp) > _SHORT_NAME and len(os.fsencode(comp)) > NAME_MAX:
                    raise Refused(Why.NAME_TOO_LONG, path, root, name=comp)
                here = fds[-1]
                if todo:
                    # A name on the way: opened as a directory first (one call where the walk
                    # goes on); only what is not one is looked at below (a symlink to follow).
                    try:
                        fd: int | None = os.open(comp, _WALK_FLAGS, dir_fd=here)
                    except OSError as exc:
                        fd = self._not_opened(exc, path, names, comp, here, make_parents)
                    if fd is not None:
                        fds.append(fd)
                        names.append(comp)
                        continue
                try:
                    st = os.stat(comp, dir_fd=here, follow_symlinks=False)
                except FileNotFoundError:
                    if not todo:
                        return self._land(path, fds, names, comp, None)
                    where = os.path.join(root, *names, comp)
                    raise Refused(Why.MISSING, path, root, where=where, name=comp) from None
                if stat.S_ISLNK(st.st_mode) and (todo or follow_last):
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise Refused(Why.LOOP, path, root, name=comp, via_link=True)
                    todo.extend(reversed(self._link(path, fds, names, comp)))
                    continue
                if not todo:
                    return self._land(path, fds, names, comp, st)
                where = os.path.join(root, *names, comp)
                if stat.S_ISDIR(st.st_mode):  # was not one when it was opened a moment ago
                    raise Refused(Why.REPLACED, path, root, where=where, name=comp)
                raise Refused(Why.NOT_A_DIRECTORY, path, root, where=where, name=comp)
            return self._land(path, fds, names, ".", os.fstat(fds[-1]))
        except BaseException:
            for opened in fds:
                os.close(opened)
            raise

    def _link(self, path: str, fds: list[int], names: list[str], name: str) -> list[str]:
        """The names the symlink `name` (in the directory the walk is in) stands for. An
        absolute target takes the walk back to the root first, if it spells the root."""
        target = os.readlink(name, dir_fd=fds[-1])
        if not target.startswith("/"):
            return _components(target)
        inside = self._below(target)
        if inside is None:
            where = os.path.join(self.root, *names, name)
            raise Refused(
                Why.LINK_OUTSIDE,
                path,
                self.root,
                where=where,
                name=name,
                target=target,
                via_link=True,
            )
        for fd in fds[1:]:
            os.close(fd)
        del fds[1:]
        names.clear()
        return inside

    def _not_opened(
        self,
        exc: OSError,
        path: str,
        names: list[str],
        name: str,
        here: int,
        make_parents: bool,
    ) -> int | None:
        """After `name` in `here` failed to open as a directory: the directory made (with
        `make_parents`) and opened, or `None` when something else is there (a symlink:
        `O_PATH | O_NOFOLLOW | O_DIRECTORY` fails `ENOTDIR` on one; a file)."""
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return None
        if exc.errno != errno.ENOENT:
            raise exc
        if make_parents:
            os.mkdir(name, 0o755, dir_fd=here)
            try:
                return os.open(name, _WALK_FLAGS, dir_fd=here)
            except OSError as again:
                if again.errno in (errno.ENOTDIR, errno.ELOOP):
                    return None
                if again.errno != errno.ENOENT:
                    raise
        where = os.path.join(self.root, *names, name)
        raise Refused(Why.MISSING, path, self.root, where=where, name=name)

    def _land(
        self, given: str, fds: list[int], names: list[str], name: str, st: os.stat_result | None
    ) -> Landing:
        for fd in fds[:-1]:
            os.close(fd)
        fd = fds[-1]
        fds.clear()
        return Landing(self, given, fd, names, name, st)


def _components(path: str) -> list[str]:
    """`path`'s names, without the empty and `.` ones (they change nothing in a walk)."""
    return [c for c in path.split("/") if c and c != "."]


# --- the tree under a directory --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    rel: str
    """Path relative to where the walk started, `/`-separated."""
    name: str
    dir_fd: int
    """Descriptor of the directory holding the entry (valid while the walk is at it)."""
    is_dir: bool
    is_file: bool
    is_symlink: bool

    def open(self, flags: int) -> int:
        """Open the entry (while the walk is at it) without following a symlink swapped in."""
        return os.open(self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dir_fd)


SKIP_DIRS = frozenset({".git"})


def descend(
    dir_fd: int,
    *,
    limit: int = 200_000,
    on_error: Callable[[str, OSError], None] | None = None,
    skip: frozenset[str] = SKIP_DIRS,
) -> Iterator[Entry]:
    """Every entry under the directory `dir_fd` (open for reading), depth first in name order,
    at most `limit`. Each subdirectory is opened with `O_NOFOLLOW` relative to its parent's
    descriptor, so no symlink, even one swapped in mid-walk, leads the walk anywhere: symlinks
    are reported as entries but never descended. Directories named in `skip` (`.git`, by
    default) are not descended. A directory that cannot be listed is passed over, told to
    `on_error` (its relative path, `""` for the top, and the error) when one is given."""
    seen = 0

    def inner(fd: int, prefix: str) -> Iterator[Entry]:
        nonlocal seen
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if on_error is not None:
                on_error(prefix.rstrip("/"), exc)
            return
        for e in entries:
            seen += 1
            if seen > limit:
                return
            try:
                is_link = e.is_symlink()
                is_dir = not is_link and e.is_dir(follow_symlinks=False)
                is_file = not is_link and e.is_file(follow_symlinks=False)
            except OSError:
                continue
            rel = f"{prefix}{e.name}"
            yield Entry(rel, e.name, fd, is_dir, is_file, is_link)
            if is_dir and e.name not in skip:
                try:
                    sub = os.open(e.name, _LIST_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if on_error is not None:
                        on_error(rel, exc)
                    continue
                try:
                    yield from inner(sub, rel + "/")
                finally:
                    os.close(sub)

    yield from inner(dir_fd, "")
