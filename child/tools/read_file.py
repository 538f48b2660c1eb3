"""`read_file({path, offset?, limit?})`: a text file's lines, numbered, within a size cap.

Lines are 1-based; `offset` is the first line shown and `limit` how many. Output stops at
`MAX_OUTPUT_CHARS` with a note telling the model which `offset` continues. Binary files (a NUL
byte in the first block), directories and special files are refused with the reason.
"""

from __future__ import annotations

import os
import stat
from typing import Annotated, Any

from msgspec import Meta, Struct

from tether.child.tools.base import (
    PATH_ERRORS,
    ToolContext,
    ToolOutcome,
    looks_binary,
    parse_arguments,
    refusal,
    schema_of,
)

MAX_OUTPUT_CHARS = 100_000
MAX_LINE_CHARS = 2_000
DEFAULT_LIMIT = 2_000
HEAD_BYTES = 8_192


class ReadFileArgs(Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    """File to read, relative to the workspace (or absolute inside it)."""
    offset: Annotated[int, Meta(ge=1)] = 1
    """First line to show (1-based)."""
    limit: Annotated[int, Meta(ge=1)] = DEFAULT_LIMIT
    """How many lines to show at most."""


class ReadFileTool:
    name = "read_file"
    description = (
        "Read a text file in the workspace. Lines come numbered; use offset (1-based first "
        "line) and limit (line count) to page through long files. Binary files are refused."
    )
    input_schema = schema_of(ReadFileArgs)
    mutates = False

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        args = parse_arguments(ReadFileArgs, arguments)
        try:
            with ctx.workspace.locate(args.path) as loc:
                fd = loc.open(os.O_RDONLY | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if stat.S_ISDIR(st.st_mode):
                        return ToolOutcome(
                            content=f"{args.path} is a directory; use list_dir", is_error=True
                        )
                    if not stat.S_ISREG(st.st_mode):
                        return ToolOutcome(
                            content=f"{args.path} is not a regular file", is_error=True
                        )
                    if looks_binary(f.read(HEAD_BYTES)):
                        return ToolOutcome(
                            content=f"{args.path} is a binary file ({st.st_size} bytes); not shown",
                            is_error=True,
                        )
                    f.seek(0)
                    return ToolOutcome(content=_lines(f, args))
        except IsADirectoryError:
            return ToolOutcome(content=f"{args.path} is a directory; use list_dir", is_error=True)
        except PATH_ERRORS as exc:
            return refusal(args.path, exc)


def _lines(f: Any, args: ReadFileArgs) -> str:
    out: list[str] = []
    size = 0
    end = args.offset + args.limit
    number = 0
    for number, raw in enumerate(f, start=1):
        if number < args.offset:
            continue
        if number >= end:
            out.append(f"(more lines follow; continue with offset={number})")
            break
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f"... ({len(line) - MAX_LINE_CHARS} more chars)"
        rendered = f"{number:>6}\t{line}"
        size += len(rendered) + 1
        if size > MAX_OUTPUT_CHARS:
            out.append(f"(output cap reached; continue with offset={number})")
            break
        out.append(rendered)
    if not out:
        if number == 0:
            return "(empty file)"
        return f"(the file has {number} lines; offset {args.offset} is past the end)"
    return "\n".join(out)
