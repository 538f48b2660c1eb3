"""`tether task-schema [--agents FILE] [--format json-schema|openai|openai-responses|anthropic]`:
print the task tool for the built-in roles, or for the definitions in FILE, in the format a
model API takes. Exit 0 with the schema on stdout; 2 when FILE is unreadable or wrong (the
message names the table and key) or defines no agent (then there is no task tool)."""

from __future__ import annotations

import argparse
import json
import sys

FORMATS = ("json-schema", "openai", "openai-responses", "anthropic")
"""The names of `tool.FORMATS`, spelled out so that building `tether`'s parser imports nothing
heavy (a test checks they agree)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--agents",
        metavar="FILE",
        help="a TOML definitions file ([[agent]] tables); default: the built-in roles",
    )
    p.add_argument(
        "--format",
        default="json-schema",
        choices=list(FORMATS),
        help="json-schema (a standalone JSON Schema), openai (Chat Completions tools[] entry), "
        "openai-responses (Responses API tools[] entry) or anthropic (Messages API tools[] "
        "entry)",
    )


def main(args: argparse.Namespace) -> int:
    """Raises ValueError (bad usage, exit 2) for a bad file or one without definitions."""
    from tether.parent.delegation.builtins import builtin_registry
    from tether.parent.delegation.files import load_registry
    from tether.parent.delegation.tool import task_tool

    registry = builtin_registry() if args.agents is None else load_registry(args.agents)
    tool = task_tool(registry)
    if tool is None:
        raise ValueError(f"{args.agents} defines no [[agent]] table, so there is no task tool")
    sys.stdout.write(json.dumps(tool.export(args.format), indent=2, ensure_ascii=False) + "\n")
    return 0
