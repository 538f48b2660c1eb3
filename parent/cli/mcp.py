"""`tether mcp [--agents FILE] [--model M] [--workspace DIR] [limits] [isolation]`: serve
delegation to tether sub-agents over MCP on stdin/stdout until the client disconnects.

The definitions file's `[[provider]]` tables are registered as `tether orchestrate` registers
them, and `task` offers `agentType` when two or more providers can run a sub-agent here.

Declaring the options imports nothing heavy and not the MCP SDK; only running the subcommand
does. Bad usage (no SDK installed, a wrong definitions file, a model that cannot be built, a
missing workspace, with `--continuable` a state directory inside the workspace or holding it,
a bad limit) is refused with exit status 2 before anything is served or
spawned. Otherwise the server runs until the client closes the connection (exit 0) or it gets
SIGTERM or SIGINT (exit 128 + the signal); either way every child is disposed through the
ladder before it exits. stdout carries MCP only; tether's own lines go to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import signal
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from tether.parent.cli.options import (
    add_continuable_arguments,
    add_delegation_options,
    check_continuable_arguments,
)
from tether.protocol.messages import RunResult, ToolCallParams, ToolCallResult

if TYPE_CHECKING:
    from tether.parent.delegation.delegator import Delegator, Runner, RunRequest
    from tether.parent.delegation.verification import VerifierPolicy
    from tether.parent.mcp_server.tools import ServedTool
    from tether.parent.models import ModelProvider
    from tether.parent.process.config import ChildConfig
    from tether.parent.process.limits import Limits
    from tether.parent.roles.definitions import Registry
    from tether.parent.run.provider import Provider
    from tether.parent.run.spec import NamedModel
    from tether.parent.supervisor import Supervisor

log = logging.getLogger("tether.mcp")
INSTALL_HINT = "pip install 'tether[mcp]'"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`tether mcp`'s own options; the limit and isolation flags are `tether run`'s."""
    p.add_argument(
        "--agents",
        metavar="FILE",
        help="a TOML definitions file: its [[agent]] tables are the sub-agent types `task` "
        "offers, its [[provider]] tables providers they may name; "
        "default: the built-in roles",
    )
    p.add_argument(
        "--model",
        help="the model of every sub-agent whose definition names none, e.g. openai:MODEL or "
        "scripted:FILE (required unless every definition names its model)",
    )
    p.add_argument("--workspace", default=".", help="directory every sub-agent works in")
    add_delegation_options(
        p,
        budget="input + output tokens for every sub-agent this server runs; once spent, task "
        "calls are refused",
    )
    add_continuable_arguments(p, "the server also offers")
    p.add_argument(
        "--list-tools",
        action="store_true",
        help="print the tools the server would offer (its tools/list answer, as JSON) and exit",
    )


def main(args: argparse.Namespace) -> int:
    """Raises ValueError (bad usage, exit 2) before serving; see the module docstring."""
    if importlib.util.find_spec("mcp") is None:
        raise ValueError(f"tether mcp needs the MCP SDK, an optional extra: {INSTALL_HINT}")
    from tether.parent.cli.options import config_from, limits_from, trace_from
    from tether.parent.delegation.files import load_registry, register_providers
    from tether.parent.delegation.verification import VerifierPolicy
    from tether.parent.providers.builtin import builtin_providers
    from tether.parent.roles.builtins import builtin_registry

    registry = builtin_registry() if args.agents is None else load_registry(args.agents)
    # The file's [[provider]] tables, checked now (bad usage before serving), registered again
    # on the server's supervisor.
    agent_types = offered(register_providers(builtin_providers(), args.agents, registry))
    check_continuable_arguments(args)
    if args.list_tools:
        tools = listing(registry, continuable=args.continuable, agent_types=agent_types)
        sys.stdout.write(json.dumps(tools, indent=2, ensure_ascii=False) + "\n")
        return 0
    if args.max_concurrent < 1:
        raise ValueError("--max-concurrent must be at least 1")
    if args.token_budget is not None and args.token_budget < 1:
        raise ValueError("--token-budget must be at least 1")
    if not os.path.isdir(args.workspace):
        raise ValueError(f"--workspace {args.workspace!r} is not a directory")
    if args.continuable:
        from tether.parent.agents.sessions.paths import check_apart

        check_apart(args.state, args.workspace)  # the store never inside the workspace
    policy = VerifierPolicy(min_files=args.verify_min_files, max_fix_cycles=args.max_fix_cycles)
    limits, config = limits_from(args), config_from(args)
    args.trace = trace_from(args)
    default_model, models = _models(registry, args.model)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="tether mcp: %(message)s")
    return anyio.run(_serve, args, registry, default_model, models, limits, config, policy)


def _models(
    registry: Registry, model: str | None
) -> tuple[NamedModel | None, dict[str, ModelProvider]]:
    """Every model a sub-agent may use, built now (a bad one is bad usage, not a failed call);
    the default one with its string (stored for a cold resume, billed in the ledger)."""
    from tether.parent.models import resolve_model
    from tether.parent.run.spec import NamedModel

    unnamed = [d.type for d in registry if d.model is None]
    if unnamed and model is None:
        raise ValueError(f"--model is required: {', '.join(unnamed)} name(s) no model of their own")
    named = {d.model for d in registry if d.model is not None}
    models = {name: resolve_model(name) for name in sorted(named)}
    return (None if model is None else NamedModel(model, resolve_model(model))), models


async def _serve(
    args: argparse.Namespace,
    registry: Registry,
    default_model: NamedModel | None,
    models: dict[str, ModelProvider],
    limits: Limits,
    config: ChildConfig,
    policy: VerifierPolicy,
) -> int:
    from tether.parent.delegation.delegator import Delegator
    from tether.parent.delegation.files import register_providers
    from tether.parent.delegation.ledger import Ledger
    from tether.parent.mcp_server.continuable import continuation_tools, parent_run
    from tether.parent.mcp_server.server import ToolServer
    from tether.parent.mcp_server.stdio import claim_stdio, stdio_streams
    from tether.parent.supervisor import Supervisor

    ledger = Ledger(args.ledger) if args.ledger else Ledger()
    wire = claim_stdio()  # before the supervisor starts its helper processes
    signals: list[int] = []
    async with anyio.create_task_group() as outer:
        serving = anyio.CancelScope()
        await outer.start(_stop_on_signals, serving, signals)  # installed before any child
        with serving:
            async with Supervisor(config, state_dir=args.state, trace=args.trace) as sup:
                register_providers(sup.providers, args.agents)
                under = parent_run()
                runner = _runner(args, sup, under, default_model, models, limits, config)
                delegator = Delegator(
                    registry,
                    runner,
                    workspace=args.workspace,
                    workspace_mode=args.workspace_mode,
                    apply=args.apply,
                    max_concurrent=args.max_concurrent,
                    token_budget=args.token_budget,
                    verifier=policy,
                    ledger=ledger,
                    agent_types=offered(sup.providers),
                    continuable=args.continuable,
                )
                extra: list[ServedTool] = []
                if args.continuable:
                    extra = continuation_tools(delegator, sup, under=under)
                tools = served_tools(delegator, extra)
                server = ToolServer(
                    tools,
                    instructions=instructions(delegator, args.agents, continuable=args.continuable),
                )
                _say(f"serving {', '.join(t.name for t in tools) or 'no tools'} on stdio")
                async with stdio_streams(wire) as (read_stream, write_stream):
                    await server.run(read_stream, write_stream)
                if not signals:
                    _say("the client closed the connection")
        outer.cancel_scope.cancel()
    _say(f"stopped; {len(ledger.records)} sub-agent run(s), every child disposed")
    return 128 + signals[0] if signals else 0


def _runner(
    args: argparse.Namespace,
    sup: Supervisor,
    under: str,
    default_model: NamedModel | None,
    models: dict[str, ModelProvider],
    limits: Limits,
    config: ChildConfig,
) -> Runner:
    """What runs each task: continuable agents under the parent run `under`, or one-shot
    runs of the supervisor."""
    from tether.parent.agents.service import DEFAULT_KEEP_ALIVE
    from tether.parent.cli.agents import continue_command
    from tether.parent.delegation.runner import SupervisorRunner
    from tether.parent.mcp_server.continuable import continuable

    if args.continuable:
        runner = continuable(
            sup,
            under=under,
            keep_alive=args.keep_alive or DEFAULT_KEEP_ALIVE,
            default_model=default_model,
            models=models,
            limits=limits,
            config=config,
            workspace=args.workspace,
        )
        hint = continue_command("ID", state=args.state, model=args.model)
        _say(f"continuable sub-agents, parent run {under}; continue one: {hint}")
        return runner
    return SupervisorRunner(
        sup,
        default_model=default_model,
        models=models,
        workspace=args.workspace,
        limits=limits,
        config=config,
    )


def offered(providers: Iterable[Provider]) -> dict[str, str]:
    """The providers an MCP client may pick per task call (`agentType`): as `tether
    orchestrate` offers them, but never `fork` (the client's conversation is not the
    server's, so there are no caller turns to start from)."""
    from tether.parent.delegation.tool import offered_agent_types

    return offered_agent_types(providers, caller_turns=False)


def listing(
    registry: Registry,
    *,
    continuable: bool = False,
    agent_types: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The `tools/list` answer a server with these definitions (and `agent_types` to offer)
    gives, as JSON."""
    from tether.parent.agents.tools import LIST_AGENTS_SPEC, SEND_MESSAGE_SPEC
    from tether.parent.delegation.delegator import Delegator
    from tether.parent.mcp_server.continuable import HINTS
    from tether.parent.mcp_server.server import ToolServer
    from tether.parent.mcp_server.tools import from_parent_tool
    from tether.parent.run.broker import ParentTool

    extra = []
    if continuable:
        for spec in (SEND_MESSAGE_SPEC, LIST_AGENTS_SPEC):
            extra.append(from_parent_tool(ParentTool(spec, _not_called), hints=HINTS[spec.name]))
    tools = served_tools(Delegator(registry, _not_serving, agent_types=agent_types), extra)
    listed = ToolServer(tools, instructions="").listing()
    return {"tools": [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed]}


async def _not_serving(request: RunRequest) -> RunResult:
    """The runner of a delegator that only describes its tools (`--list-tools`)."""
    from tether.protocol.messages import Failure

    return RunResult(
        success=False,
        status="error",
        message="this server only lists its tools",
        failure=Failure(kind="spawn_failed"),
    )


async def _not_called(params: ToolCallParams) -> ToolCallResult:
    """The call of a tool that is only listed (`--list-tools`)."""
    return ToolCallResult(content="this server only lists its tools", is_error=True)


def served_tools(delegator: Delegator, extra: Sequence[ServedTool] = ()) -> list[ServedTool]:
    """What the server offers: `task` when there are definitions, then `extra` (continuable
    children's `send_message` / `list_agents`, as `from_parent_tool(...)` of their parent
    tools)."""
    from tether.parent.mcp_server.task import task_tool

    task = task_tool(delegator)
    return [*([task] if task is not None else []), *extra]


CONTINUABLE_NOTE = (
    " A sub-agent can be continued: `send_message` with its subagentId answers the question of "
    "one that stopped to ask (status `needs_input`) or asks it for more; `list_agents` lists "
    "them."
)


def instructions(
    delegator: Delegator, agents_file: str | None, *, continuable: bool = False
) -> str:
    """The server's `instructions`: what its tools are for, or why there is no `task`."""
    if delegator.tool is None:
        return (
            f"This tether server offers no task tool: {agents_file or 'its definitions file'} "
            "defines no sub-agent types ([[agent]] tables), so there is nothing to delegate to. "
            "Add definitions to the file and restart the server."
        )
    types = ", ".join(
        f"{d.type} ({'read-only' if d.read_only else 'build mode'})" for d in delegator.definitions
    )
    return (
        "Delegate work to tether sub-agents with the `task` tool. Each sub-agent runs as a "
        "separate, sandboxed process with its own limits, in the workspace "
        f"{delegator.workspace}; its model calls are made by this server. Types: {types}. "
        "Give each call a self-contained prompt: a sub-agent has not seen your conversation. "
        "Calls made at once run in parallel. The result is the sub-agent's summary, the files "
        "it delivered and its status; only status `completed` means the work is done."
        + (CONTINUABLE_NOTE if continuable else "")
    )


async def _stop_on_signals(
    serving: anyio.CancelScope,
    signals: list[int],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """SIGTERM or SIGINT stops serving; the receiver stays installed until every child is
    disposed, so a second signal cannot cut the disposal short."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        task_status.started()
        async for signum in received:
            if not signals:
                _say(f"{signal.Signals(signum).name}: stopping; disposing of every child")
                serving.cancel()
            signals.append(signum)


def _say(line: str) -> None:
    sys.stderr.write(f"tether mcp: {line}\n")
    sys.stderr.flush()
