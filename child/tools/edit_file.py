"""`edit_file({path, oldString, newString})`: replace one exact occurrence of a string.

`oldString` must occur exactly once: zero or several occurrences are errors that say how many,
so the model adds context rather than editing the wrong place. The file is opened once with
`O_NOFOLLOW` and rewritten through the same descriptor.
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
from tether.child.tools.write_file import write_all

MAX_EDIT_BYTES = 8 * 1024 * 1024


class EditFileArgs(Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    path: str
    """File to edit, relative to the workspace."""
    old_string: str
    """Exact text to replace; must occur exactly once in the file."""
    new_string: str
    """Replacement text."""


class EditFileTool:
    name = "edit_file"
    description = (
        "Edit a file by replacing oldString with newString. oldString must match the file "
        "exactly once (whitespace included); include surrounding lines to make it unique."
    )
    input_schema = schema_of(EditFileArgs)
    mutates = True

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(EditFileArgs, arguments)
        if not args.old_string:
            return ToolOutcome(content="oldString must not be empty", is_error=True)
        try:
            with ctx.workspace.locate(args.path) as loc:
                fd = loc.open(os.O_RDWR | os.O_NONBLOCK)
                try:
                    return _edit(fd, args)
                finally:
                    os.close(fd)
        except IsADirectoryError:
            return ToolOutcome(content=f"{args.path} is a directory", is_error=True)
        except PATH_ERRORS as exc:
            return refusal(args.path, exc)


def _edit(fd: int, args: EditFileArgs) -> ToolOutcome:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return ToolOutcome(content=f"{args.path} is not a regular file", is_error=True)
    refused = refuse_hard_links(st, args.path)
    if refused is not None:
        return refused
    if st.st_size > MAX_EDIT_BYTES:
        return ToolOutcome(content=f"{args.path} is too large to edit", is_error=True)
    raw = b""
    while chunk := os.read(fd, 1 << 20):
        raw += chunk
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ToolOutcome(content=f"{args.path} is not UTF-8 text", is_error=True)
    count = text.count(args.old_string)
    if count == 0:
        return ToolOutcome(
            content=f"oldString was not found in {args.path} (0 matches)", is_error=True
        )
    if count > 1:
        return ToolOutcome(
            content=f"oldString matches {count} times in {args.path}; it must match exactly "
            "once: include more surrounding text",
            is_error=True,
        )
    new = text.replace(args.old_string, args.new_string, 1).encode()
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    write_all(fd, new)
    line = text[: text.index(args.old_string)].count("\n") + 1
    return ToolOutcome(
        content=f"edited {args.path} at line {line} ({len(raw)} -> {len(new)} bytes)"
    )
