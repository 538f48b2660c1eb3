"""`tether task-schema [--agents FILE] [--format json-schema|openai|openai-responses|anthropic]`:
print the task tool for the built-in roles, or for the definitions in FILE, in the format a
model API takes; with the optional `agentType` argument when two or more providers can run a
sub-agent here (the built-in ones and FILE's `[[provider]]` tables; as `tether orchestrate`
offers it). Exit 0 with the schema on stdout; 2 when FILE is unreadable or wrong (the message
names the table and key), defines no agent (then there is no task tool), or has an agent naming
a provider nobody defines.

`tether orchestrate`'s own options are declared here too (the run is in `cli/orchestrate.py`);
building the parser imports nothing heavy."""

from __future__ import annotations

import argparse
import json
import sys

from tether.parent.cli.options import add_trace_option

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


def add_orchestrate_arguments(p: argparse.ArgumentParser) -> None:
    """`tether orchestrate`'s own options; the limit and isolation flags are `tether run`'s."""
    p.add_argument("prompt", help="the task for the orchestrator")
    p.add_argument(
        "--model",
        required=True,
        help="the orchestrator's model (and every sub-agent's whose definition names none), "
        "e.g. scripted:FILE or openai:MODEL",
    )
    p.add_argument(
        "--agents",
        metavar="FILE",
        help="a TOML definitions file ([[agent]] tables); default: the built-in roles",
    )
    p.add_argument("--workspace", default=".", help="directory every agent works in")
    p.add_argument(
        "--max-concurrent",
        type=int,
        default=4,
        metavar="N",
        help="sub-agents running at once; more queue (default 4)",
    )
    p.add_argument(
        "--token-budget",
        type=int,
        metavar="N",
        help="input + output tokens for the whole tree, orchestrator included",
    )
    p.add_argument(
        "--max-steps", type=int, default=40, metavar="N", help="the orchestrator's model turns"
    )
    p.add_argument(
        "--verify-min-files",
        type=int,
        default=3,
        metavar="N",
        help="a build sub-agent's change touching N files or more is verified (default 3)",
    )
    p.add_argument(
        "--max-fix-cycles",
        type=int,
        default=2,
        metavar="N",
        help="fix-and-reverify cycles after a FAIL verdict (default 2)",
    )
    p.add_argument("--ledger", metavar="FILE", help="also append the usage ledger to FILE (JSONL)")
    add_trace_option(p)
    p.add_argument("--description", default="", help="short label for the orchestrator's run")
    p.add_argument(
        "--json", action="store_true", help="print the result, the task calls and the ledger"
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_continuable_arguments(p, "the orchestrator's model also gets")


def add_continuable_arguments(p: argparse.ArgumentParser, who_gets_the_tools: str) -> None:
    """`--continuable`, `--state`, `--keep-alive` (`tether orchestrate`, `tether mcp`)."""
    p.add_argument(
        "--continuable",
        action="store_true",
        help="task sub-agents are continuable agents (a session each, the child kept alive "
        f"after an answer) and {who_gets_the_tools} send_message and list_agents",
    )
    p.add_argument(
        "--state",
        metavar="DIR",
        help="with --continuable: where the sessions are stored (default: $XDG_STATE_HOME/tether)",
    )
    p.add_argument(
        "--keep-alive",
        metavar="T",
        help="with --continuable: how long a sub-agent's child idles after an answer (default 5m)",
    )


def check_continuable_arguments(args: argparse.Namespace) -> None:
    """Raises ValueError (bad usage) for `--state`/`--keep-alive` without `--continuable`, or a
    keep-alive that is not a duration."""
    if not args.continuable:
        for flag, value in (("--state", args.state), ("--keep-alive", args.keep_alive)):
            if value is not None:
                raise ValueError(f"{flag} applies only with --continuable")
    elif args.keep_alive is not None:
        from tether.parent.agents.settings import parse_keep_alive

        parse_keep_alive(args.keep_alive)
