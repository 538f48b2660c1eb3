"""`tether orchestrate PROMPT --model M [--agents FILE] [--workspace DIR] [--trace DIR] ...`: run an
orchestrator and its sub-agents, show them live on stderr, print the outcome on stdout.

Stdout: the orchestrator's result, each task call's outcome (status, steps, artifacts,
verification; with `--continuable`, the `tether agents send` command that continues its agent,
which works as printed) and the usage ledger with totals; with `--json`, `Orchestration.to_dict()`.
Stderr: a nested live view on a terminal, plain lines otherwise (`live.py`); nothing with
`--quiet`. Exit status: 0 when the orchestrator succeeded, 1 when it did not, 2 for bad usage
(nothing is spawned then); after SIGINT/SIGTERM, 128 + the signal (the first asks the
orchestrator to abort, a second cuts it; either way every child is gone before tether exits).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

import anyio
import msgspec

from tether.parent.cli.options import (
    add_continuable_arguments,
    add_delegation_options,
    add_trace_option,
    check_continuable_arguments,
)
from tether.parent.run.terminal import clean

if TYPE_CHECKING:
    from tether.parent.delegation.orchestrator import Orchestration, Running
    from tether.parent.roles.definitions import Registry
    from tether.parent.run.handle import RunHandle


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    add_delegation_options(
        p, budget="input + output tokens for the whole tree, orchestrator included"
    )
    p.add_argument(
        "--max-steps", type=int, default=40, metavar="N", help="the orchestrator's model turns"
    )
    add_trace_option(p)
    p.add_argument("--description", default="", help="short label for the orchestrator's run")
    p.add_argument(
        "--json", action="store_true", help="print the result, the task calls and the ledger"
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_continuable_arguments(p, "the orchestrator's model also gets")


def main(args: argparse.Namespace) -> int:
    """Raises ValueError (bad usage, exit 2) for a bad definitions file, model or limit."""
    from tether.parent.cli.options import config_from, limits_from, trace_from
    from tether.parent.delegation.files import load_registry
    from tether.parent.delegation.verification import VerifierPolicy
    from tether.parent.roles.builtins import builtin_registry

    registry = builtin_registry() if args.agents is None else load_registry(args.agents)
    if args.max_concurrent < 1:
        raise ValueError("--max-concurrent must be at least 1")
    if args.token_budget is not None and args.token_budget < 1:
        raise ValueError("--token-budget must be at least 1")
    if args.max_steps < 1:
        raise ValueError("--max-steps must be at least 1")
    check_continuable_arguments(args)
    policy = VerifierPolicy(min_files=args.verify_min_files, max_fix_cycles=args.max_fix_cycles)
    args.interrupted, args.interrupted_once = None, False
    args.trace = trace_from(args)
    got = anyio.run(_orchestrate, args, registry, limits_from(args), config_from(args), policy)
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(got.to_dict())).decode() + "\n")
    else:
        # Each type's model, as the runner chose it: for the hint that continues its agents.
        models = {d.type: d.model or args.model for d in registry}
        print(render_orchestration(got, state=args.state, models=models))
    if args.interrupted is not None:
        return 128 + int(args.interrupted)
    return 0 if got.success else 1


async def _orchestrate(
    args: argparse.Namespace,
    registry: Registry,
    limits: object,
    config: object,
    policy: object,
) -> Orchestration:
    from tether.parent.cli.interrupt import cancel_on_signal
    from tether.parent.cli.live import LiveView
    from tether.parent.delegation.files import register_providers
    from tether.parent.supervisor import Supervisor

    view = None if args.quiet else LiveView(sys.stderr)
    handles: list[RunHandle] = []
    ready = anyio.Event()

    def started(running: Running) -> None:
        handle = running.handle
        handles.append(handle)
        ready.set()
        if view is not None:
            usage = handle.broker.brokered
            view.state.tokens = lambda: usage.input_tokens + usage.output_tokens

    refused: ValueError | None = None
    traced = Supervisor(config, state_dir=args.state, trace=args.trace)  # type: ignore[arg-type]
    async with traced as sup:
        register_providers(sup.providers, args.agents, registry)
        async with anyio.create_task_group() as tg:

            async def watch_signals() -> None:
                await ready.wait()
                await cancel_on_signal(handles[0], args, tg)

            tg.start_soon(watch_signals)
            if view is not None:
                tg.start_soon(view.refresh)
            try:
                got = await sup.orchestrate(
                    args.prompt,
                    model=args.model,
                    definitions=registry,
                    workspace=args.workspace,
                    limits=limits,
                    max_steps=args.max_steps,
                    max_concurrent=args.max_concurrent,
                    token_budget=args.token_budget,
                    verifier=policy,
                    ledger=args.ledger,
                    description=args.description,
                    on_event=view,
                    on_start=started,
                    continuable=args.continuable,
                    workspace_mode=args.workspace_mode,
                    apply=args.apply,
                    **({"keep_alive": args.keep_alive} if args.keep_alive else {}),
                )
            except ValueError as exc:  # bad usage: raised as itself, not in a group
                refused = exc
            tg.cancel_scope.cancel()
        if refused is not None:
            raise refused
        if view is not None:
            view.draw()
        return got


def render_orchestration(
    got: Orchestration, *, state: str | None = None, models: Mapping[str, str | None] = {}
) -> str:
    """The readable outcome: the orchestrator's result, each task call (a continuable one
    with the command that continues it: `state`, the state directory given; `models`, each
    type's model string), the usage ledger."""
    from tether.parent.cli.agents import continue_command
    from tether.parent.cli.output import render

    lines = ["orchestrator:", *("  " + ln for ln in render(got.result).splitlines())]
    if got.tasks:
        lines.append("task calls:")
    for t in got.tasks:
        o = t.output
        args = t.arguments if isinstance(t.arguments, dict) else {}
        what = f"{args.get('subagent_type', '?')} {str(args.get('description', ''))!r}"
        lines.append(f"  {t.tool_call_id} {what}: {o.status} ({o.steps} steps)")
        if o.summary:
            lines.append(f"    summary: {o.summary}")
        if o.message and o.status != "completed":
            lines.append(f"    why: {o.message}")
        if o.question:
            lines.append(f"    asks: {o.question}")
        if o.subagent_id.startswith("ag_"):
            model = models.get(str(args.get("subagent_type", "")))
            command = continue_command(o.subagent_id, state=state, model=model)
            lines.append(f"    continue: {command}")
        for a in o.artifacts:
            lines.append(f"    artifact {a.path} ({a.fs_type}, {a.size} bytes)")
        if o.changed_files:
            lines.append(f"    changed: {', '.join(o.changed_files)}")
        if o.verification is not None:
            v = o.verification
            lines.append(f"    verification: {v.verdict} after {v.fix_cycles} fix cycle(s)")
    lines.append("usage ledger:")
    for r in got.ledger.records:
        seconds = _seconds(r.started_at, r.completed_at)
        lines.append(
            f"  {r.subagent_id:<6} {r.definition:<10} {r.role:<8} {r.label[:32]!r:<34} "
            f"{r.status:<19} {r.steps:>3} steps {r.usage.input_tokens:>7} in "
            f"{r.usage.output_tokens:>6} out {seconds:>6.2f}s"
        )
    totals = got.ledger.totals()
    orch = totals.orchestrator
    lines.append(f"  {'orchestrator':<55} {orch.input_tokens:>7} in {orch.output_tokens:>6} out")
    lines.append(
        f"  total: {totals.runs} sub-agent run(s); {totals.total.input_tokens} in / "
        f"{totals.total.output_tokens} out tokens"
    )
    return clean("\n".join(lines))


def _seconds(start: str, end: str) -> float:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return 0.0
