"""The `tether` console command's entry point (`[project.scripts]`).

It lives in the `tether` package, which imports nothing, so that it runs before the command
line's imports (`tether.parent` and its dependencies, ≈ 0.2 s) and can turn the cyclic
collector off for them: each of the collections an import of this size sets off walks a young
generation of objects that all live for good (≈ 30 ms of a `tether run`, benchmarks/notes.md).
What they built is then frozen, out of every later collection's way, and the collector is
turned back on for the command itself (a run, an MCP server, an orchestration).
"""

from __future__ import annotations

import gc

# Not even `typing` before `main` turns the collector off: it is one of the imports to spare.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn


def main() -> NoReturn:
    gc.disable()
    try:
        from tether.parent.cli.main import command
    finally:
        gc.freeze()
        gc.enable()
    command()
