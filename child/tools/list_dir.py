"""`list_dir({path?})`: the entries of one workspace directory, directories marked with `/`,
symlinks with `@ -> target`, files with their size."""

from __future__ import annotations

import os
from typing import Any

from msgspec import Struct

from tether.child.tools.base import (
    PATH_ERRORS,
    ToolContext,
    ToolOutcome,
    parse_arguments,
    refusal,
    schema_of,
)

MAX_ENTRIES = 1_000


class ListDirArgs(Struct, frozen=True, forbid_unknown_fields=True):
    path: str = "."
    """Directory to list, relative to the workspace (default: its root)."""


class ListDirTool:
    name = "list_dir"
    description = (
        "List a directory in the workspace: subdirectories end with '/', symlinks show their "
        "target, files their size in bytes."
    )
    input_schema = schema_of(ListDirArgs)
    mutates = False

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(ListDirArgs, arguments)
        try:
            with ctx.workspace.locate(args.path) as loc:
                fd = loc.open(os.O_RDONLY | os.O_DIRECTORY)
                try:
                    lines = _listing(fd)
                finally:
                    os.close(fd)
        except NotADirectoryError:
            return ToolOutcome(content=f"{args.path} is not a directory", is_error=True)
        except PATH_ERRORS as exc:
            return refusal(args.path, exc)
        if not lines:
            return ToolOutcome(content=f"{args.path} is empty")
        return ToolOutcome(content="\n".join(lines))


def _listing(fd: int) -> list[str]:
    with os.scandir(fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    lines: list[str] = []
    for e in entries[:MAX_ENTRIES]:
        try:
            if e.is_symlink():
                lines.append(f"{e.name}@ -> {os.readlink(e.name, dir_fd=fd)}")
            elif e.is_dir(follow_symlinks=False):
                lines.append(f"{e.name}/")
            else:
                lines.append(f"{e.name}  ({e.stat(follow_symlinks=False).st_size} bytes)")
        except OSError:
            lines.append(f"{e.name}  (unreadable)")
    if len(entries) > MAX_ENTRIES:
        lines.append(f"... and {len(entries) - MAX_ENTRIES} more entries")
    return lines
