"""Patterns for `glob` and `grep`: shell-style globs over workspace-relative paths.

`glob_regex` translates a pattern into a regex over the `/`-separated paths the confined tree
walk yields (`tether.contain.confined.descend`); `check_pattern` refuses a pattern that would
name a place outside the directory searched.
"""

from __future__ import annotations

import re


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
