"""`tether run PROMPT [--model M] [--agent ROLE] [--workspace DIR] [--trace DIR] [limits]
[isolation]`: one sub-agent from the shell; progress on stderr, the result on stdout (`--json`:
the RunResult)."""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings

import anyio

from tether.parent.cli.interrupt import cancel_on_signal
from tether.parent.cli.options import (
    UsageError,
    absolute_if_here,
    add_isolation_options,
    add_limit_options,
    add_trace_option,
    add_workspace_options,
    config_from,
    limits_from,
    trace_from,
)
from tether.parent.cli.progress import printer
from tether.parent.roles.builtins import ROLES
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import RunResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="the task for the sub-agent")
    p.add_argument(
        "--model",
        help="model for the run, e.g. scripted:FILE, openai:MODEL (required for the built-in "
        "roles; a --command child or your own agent may not need one)",
    )
    p.add_argument(
        "--agent",
        default="general",
        help=f"a role ({', '.join(sorted(ROLES))}), or module:callable / file.py:callable "
        "for your own agent implementation",
    )
    p.add_argument("--workspace", default=".", help="directory the agent works in")
    add_limit_options(p)
    p.add_argument("--command", help="drive this command instead of the Python child")
    p.add_argument(
        "--provider",
        help="what runs the agent: spawn (default), fork, command:ARGV, inprocess, "
        "acp:COMMAND, or a [[provider]] of --agents (see tether doctor)",
    )
    p.add_argument(
        "--agents", metavar="FILE", help="a definitions file whose [[provider]] tables to add"
    )
    add_isolation_options(p)
    add_workspace_options(p, default_apply="never")
    add_trace_option(p)
    p.add_argument("--description", default="", help="short label for the run")
    p.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


async def run(args: argparse.Namespace) -> RunResult:
    limits = limits_from(args)
    command = shlex.split(args.command) if args.command is not None else None
    if command == []:
        raise UsageError("tether run: --command must not be empty")
    if command is not None:
        command = [absolute_if_here(arg) for arg in command]
    config = config_from(args)
    provider = None
    if args.provider is not None:
        from tether.parent.providers.tables import absolute_spec

        provider = absolute_spec(args.provider)
    async with Supervisor(config, trace=trace_from(args)) as sup:
        if args.agents is not None:
            from tether.parent.delegation.files import load_providers

            for named in load_providers(args.agents):
                sup.providers.register(named, replace=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            handle = await sup.start(
                args.prompt,
                agent=args.agent,
                workspace=args.workspace,
                model=args.model,
                limits=limits,
                description=args.description,
                command=command,
                on_event=None if args.quiet else printer(sys.stderr),
                provider=provider,
                workspace_mode=args.workspace_mode,
                apply=args.apply,
            )
        for warning in caught:
            print(f"tether: warning: {warning.message}", file=sys.stderr, flush=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_on_signal, handle, args, tg)
            result = await handle.result()
            tg.cancel_scope.cancel()
        return result
