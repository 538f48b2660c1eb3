"""The `tether` console command's entry point (`[project.scripts]`).

It lives in the `tether` package, which imports nothing, so that it runs before the command
line's imports (`tether.parent` and its dependencies, ≈ 0.2 s) and can turn the cyclic
collector off for them: each of the collections an import of this size sets off walks a young
generation of objects that all live for good (≈ 30 ms of a `tether run`, benchmarks/notes.md).
What they built is then frozen, out of every later collection's way, and the collector is
turned back on for the command itself (a run, an MCP server, an orchestration).

For `tether run` (and `orchestrate`, `mcp`) it first launches the zygote that will fork the
sub-agents' children (`tether.parent.process.early`), so that the zygote imports the child
runtime while this process imports the command line, instead of after; once the command line is
imported, the host's sandbox is tried in a thread while the command sets up.
"""

from __future__ import annotations

import gc

# Not even `typing` before `main` turns the collector off: it is one of the imports to spare.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn


_THROUGH_A_ZYGOTE = ("run", "orchestrate", "mcp")
"""Subcommands whose sub-agents the zygote forks by default: the zygote is launched before
the command line's imports for them (`tether mcp` has it ready for its first task call)."""
_NO_ZYGOTE = (
    "--launcher",
    "--command",
    "--provider",
    "--allow-net",
    "--net-credential",
    "--list-tools",
)
"""Options under which the command's sub-agents may not be forked by the zygote (another
launcher or command, a provider that drives itself, network access) or no sub-agent runs at
all: the zygote is not launched early for them. For any other such command it is, and one
the command does not take after all is killed when the command exits (`early`)."""


def _runs_through_a_zygote(args: list[str]) -> bool:
    if args[:1] == [] or args[0] not in _THROUGH_A_ZYGOTE:
        return False
    return not any(a in ("-h", "--help") or a.split("=", 1)[0] in _NO_ZYGOTE for a in args)


def main() -> NoReturn:
    import sys

    gc.disable()
    early = _runs_through_a_zygote(sys.argv[1:])
    try:
        if early:
            from tether.parent.process.early import prelaunch

            prelaunch()
        from tether.parent.cli.main import command
    finally:
        gc.freeze()
        gc.enable()
    if early:
        from tether.parent.process.early import probe_host_meanwhile

        probe_host_meanwhile()
    command()
