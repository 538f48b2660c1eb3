"""`grep({pattern, path?, glob?, ignoreCase?})`: lines matching a Python regex.

Searches one file or every file under a directory (the walk never follows a symlink), keeps
only files whose name or relative path matches `glob` when given (a pattern without `/` is
matched against the file name at any depth, as ripgrep does), skips binary files and files over
`MAX_FILE_BYTES`, and caps the output. Each hit is `path:line:text`, path relative to the root.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from msgspec import Struct

from tether.child.globs import check_pattern, glob_regex
from tether.child.tools.base import (
    PATH_ERRORS,
    ToolContext,
    ToolOutcome,
    looks_binary,
    parse_arguments,
    refusal,
    schema_of,
)
from tether.contain.confined import Entry, descend

MAX_OUTPUT_CHARS = 20_000
MAX_MATCHES = 500
MAX_LINE_CHARS = 500
MAX_FILE_BYTES = 8 * 1024 * 1024


class GrepArgs(Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    pattern: str
    """Python regular expression searched in each line."""
    path: str = "."
    """File or directory to search, relative to the workspace."""
    glob: str | None = None
    """Only files matching this shell pattern (e.g. `*.py`, `src/**/*.ts`)."""
    ignore_case: bool = False


class _Hits:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.size = 0
        self.full = False
        self.skipped_binary = 0

    def add(self, line: str) -> None:
        if len(self.lines) >= MAX_MATCHES or self.size + len(line) + 1 > MAX_OUTPUT_CHARS:
            self.full = True
            return
        self.lines.append(line)
        self.size += len(line) + 1


class GrepTool:
    name = "grep"
    description = (
        "Search file contents in the workspace with a Python regular expression. Optional "
        "glob filters files ('*.py' matches names at any depth). Binary files are skipped. "
        "Hits are 'path:line:text'."
    )
    input_schema = schema_of(GrepArgs)
    mutates = False

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(GrepArgs, arguments)
        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
        except re.error as exc:
            return ToolOutcome(content=f"bad regular expression: {exc}", is_error=True)
        name_only = False
        filter_re: re.Pattern[str] | None = None
        if args.glob is not None:
            why = check_pattern(args.glob)
            if why is not None:
                return ToolOutcome(content=f"refused: {why}", is_error=True)
            filter_re = glob_regex(args.glob)
            name_only = "/" not in args.glob
        hits = _Hits()
        try:
            with ctx.workspace.locate(args.path) as loc:
                rel_root = loc.relative
                fd = loc.open(os.O_RDONLY | os.O_NONBLOCK)
                try:
                    if stat.S_ISDIR(os.fstat(fd).st_mode):
                        prefix = "" if rel_root == "." else f"{rel_root}/"
                        for entry in descend(fd):
                            if hits.full:
                                break
                            if not entry.is_file:
                                continue
                            if filter_re is not None and not filter_re.match(
                                entry.name if name_only else entry.rel
                            ):
                                continue
                            _search_at(entry, prefix + entry.rel, regex, hits)
                    else:
                        _search_fd(fd, rel_root, regex, hits)
                finally:
                    os.close(fd)
        except PATH_ERRORS as exc:
            return refusal(args.path, exc)
        out = hits.lines or [f"no matches for {args.pattern!r}"]
        if hits.full:
            out.append(f"(output capped at {len(hits.lines)} matches; narrow the search)")
        if hits.skipped_binary:
            out.append(f"({hits.skipped_binary} binary or oversized file(s) skipped)")
        return ToolOutcome(content="\n".join(out))


def _search_at(entry: Entry, rel: str, regex: re.Pattern[str], hits: _Hits) -> None:
    try:
        fd = entry.open(os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        _search_fd(fd, rel, regex, hits)
    finally:
        os.close(fd)


def _search_fd(fd: int, rel: str, regex: re.Pattern[str], hits: _Hits) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return
    if st.st_size > MAX_FILE_BYTES:
        hits.skipped_binary += 1
        return
    data = b""
    while chunk := os.read(fd, 1 << 20):
        data += chunk
        if len(data) > MAX_FILE_BYTES:
            hits.skipped_binary += 1
            return
    if looks_binary(data[:8192]):
        hits.skipped_binary += 1
        return
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if regex.search(line):
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + "..."
            hits.add(f"{rel}:{number}:{line}")
            if hits.full:
                return
