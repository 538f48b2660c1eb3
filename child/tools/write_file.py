"""`write_file({path, content})`: create or overwrite a text file in the workspace.

Missing parent directories are created by the confined walk (inside the root only), and the
file itself is opened with `O_NOFOLLOW`, so a symlink at the path (even one swapped in after
the walk) is never written through. Mutating: explore mode denies it, build mode asks first.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from msgspec import Struct

from tether.child.tools.base import (
    PATH_ERRORS,
    ToolContext,
    ToolOutcome,
    parse_arguments,
    refusal,
    refuse_hard_links,
    schema_of,
)


class WriteFileArgs(Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    """File to write, relative to the workspace; parent directories are created."""
    content: str
    """The whole new content of the file (UTF-8)."""


class WriteFileTool:
    name = "write_file"
    description = (
        "Create or overwrite a file in the workspace with the given content; missing parent "
        "directories are created."
    )
    input_schema = schema_of(WriteFileArgs)
    mutates = True

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(WriteFileArgs, arguments)
        data = args.content.encode()
        try:
            with ctx.workspace.locate(args.path, make_parents=True) as loc:
                if loc.name == ".":
                    return ToolOutcome(content=f"{args.path} is a directory", is_error=True)
                st = loc.st  # the walk's lstat of the name: no need to ask again
                if st is not None and not stat.S_ISREG(st.st_mode):
                    what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
                    return ToolOutcome(content=f"{args.path} is {what}", is_error=True)
                # Truncate only once the file we opened is known to be ours alone.
                fd = loc.open(os.O_WRONLY | os.O_CREAT)
                try:
                    refused = refuse_hard_links(os.fstat(fd), args.path)
                    if refused is not None:
                        return refused
                    os.ftruncate(fd, 0)
                    write_all(fd, data)
                finally:
                    os.close(fd)
                where = loc.relative
        except PATH_ERRORS as exc:
            return refusal(args.path, exc)
        verb = "created" if st is None else "overwrote"
        return ToolOutcome(content=f"{verb} {where} ({len(data)} bytes)")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
