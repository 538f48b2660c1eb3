"""`glob({pattern, path?})`: workspace paths matching a shell pattern.

The pattern is matched against paths relative to `path` (default: the workspace root): `*.py`
matches only at that level, `**/*.py` at any depth. The walk never follows a symlink, so every
result is inside the workspace; results are relative to the workspace root, sorted, capped.
"""

from __future__ import annotations

import os
from typing import Any

from msgspec import Struct

from tether.child.globs import check_pattern, glob_regex
from tether.child.tools.base import (
    PATH_ERRORS,
    ToolContext,
    ToolOutcome,
    parse_arguments,
    refusal,
    schema_of,
)
from tether.contain.confined import descend

MAX_RESULTS = 1_000


class GlobArgs(Struct, frozen=True, forbid_unknown_fields=True):
    pattern: str
    """Shell pattern, e.g. `**/*.py` or `src/*.md`."""
    path: str = "."
    """Directory to search from, relative to the workspace."""


class GlobTool:
    name = "glob"
    description = (
        "Find files and directories in the workspace by shell pattern (relative to path, "
        "default the root): '*' and '?' stay within one directory, '**/' spans any depth."
    )
    input_schema = schema_of(GlobArgs)
    mutates = False

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(GlobArgs, arguments)
        why = check_pattern(args.pattern)
        if why is not None:
            return ToolOutcome(content=f"refused: {why}", is_error=True)
        regex = glob_regex(args.pattern)
        hits: list[str] = []
        more = 0
        try:
            with ctx.workspace.locate(args.path) as loc:
                base = loc.relative
                prefix = "" if base == "." else f"{base}/"
                fd = loc.open(os.O_RDONLY | os.O_DIRECTORY)
                try:
                    for entry in descend(fd):
                        if regex.match(entry.rel):
                            if len(hits) < MAX_RESULTS:
                                suffix = "/" if entry.is_dir else ""
                                hits.append(f"{prefix}{entry.rel}{suffix}")
                            else:
                                more += 1
                finally:
                    os.close(fd)
        except NotADirectoryError:
            return ToolOutcome(content=f"{args.path} is not a directory", is_error=True)
        except PATH_ERRORS as exc:
            return refusal(args.path, exc)
        if not hits:
            return ToolOutcome(content=f"no paths match {args.pattern!r}")
        if more:
            hits.append(f"... and {more} more matches")
        return ToolOutcome(content="\n".join(hits))
