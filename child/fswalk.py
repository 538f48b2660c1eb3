"""Recursive walks for `glob` and `grep`: descriptor-relative, never through a symlink.

A walk starts from a `Located` directory and opens each subdirectory with `O_NOFOLLOW`
relative to its parent's descriptor, so it cannot be led outside the workspace by a symlink,
even one swapped in mid-walk. Symlinks are reported as entries but never descended. `.git`
directories are skipped. Patterns are shell-style globs translated by `glob_regex`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

SKIP_DIRS = frozenset({".git"})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Entry:
    rel: str
    """Path relative to where the walk started, `/`-separated."""
    name: str
    dir_fd: int
    """Descriptor of the directory holding the entry (valid while the walk is at it)."""
    is_dir: bool
    is_file: bool
    is_symlink: bool


def walk(dir_fd: int, *, limit: int = 200_000) -> Iterator[Entry]:
    """Every entry under the directory `dir_fd`, depth first in name order, at most `limit`."""
    seen = 0

    def inner(fd: int, prefix: str) -> Iterator[Entry]:
        nonlocal seen
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
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
            if is_dir and e.name not in SKIP_DIRS:
                try:
                    sub = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                try:
                    yield from inner(sub, rel + "/")
                finally:
                    os.close(sub)

    yield from inner(dir_fd, "")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A shell glob as a regex over `/`-separated relative paths: `*` and `?` stay within one
    component, `**` spans any number of them (`**/` also matches none), `[...]` is a class."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def check_pattern(pattern: str) -> str | None:
    """Why a glob pattern cannot be used (absolute, climbs with `..`), or `None`."""
    if "\0" in pattern:
        return "the pattern contains a NUL byte"
    if pattern.startswith("/"):
        return "patterns are relative to the search directory; absolute patterns are refused"
    if ".." in pattern.split("/"):
        return "patterns may not contain `..`"
    return None
