"""`tether task-schema [--agents FILE] [--format json-schema|openai|openai-responses|anthropic]`:
print the task tool for the built-in roles, or for the definitions in FILE, in the format a
model API takes; with the optional `agentType` argument when two or more providers can run a
sub-agent here (the built-in ones and FILE's `[[provider]]` tables; as `tether orchestrate`
offers it). Exit 0 with the schema on stdout; 2 when FILE is unreadable or wrong (the message
names the table and key), defines no agent (then there is no task tool), or has an agent naming
a provider nobody defines."""

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
        help="a TOML definitions file ([[agent]] tables, and [[provider]] tables offered as "
        "agentType); default: the built-in roles",
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
    from tether.parent.delegation.files import load_registry, register_providers
    from tether.parent.delegation.tool import offered_agent_types, task_tool
    from tether.parent.providers.builtin import builtin_providers
    from tether.parent.roles.builtins import builtin_registry

    registry = builtin_registry() if args.agents is None else load_registry(args.agents)
    providers = register_providers(builtin_providers(), args.agents, registry)
    tool = task_tool(registry, agent_types=offered_agent_types(providers))
    if tool is None:
        raise ValueError(f"{args.agents} defines no [[agent]] table, so there is no task tool")
    sys.stdout.write(json.dumps(tool.export(args.format), indent=2, ensure_ascii=False) + "\n")
    return 0
