"""The `tether` command line: progress goes to stderr, results to stdout.

Exit status: 0 when the run succeeded, 1 when it came back with `success: false`, 2 for bad
usage (unknown options, an unreadable model script, bad limits) — nothing is spawned then.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import warnings
from collections.abc import Sequence

import anyio
import msgspec
from anyio.abc import TaskGroup

from tether.parent import conformance
from tether.parent.cli import agents as agents_cli
from tether.parent.cli import mcp as mcp_cli
from tether.parent.cli import task_schema as delegation_cli
from tether.parent.cli.progress import line, printer
from tether.parent.process.host import TIERS
from tether.parent.process.launchers import launcher_usages
from tether.parent.process.limits import Limits
from tether.parent.process.spawn import version
from tether.parent.run.checks import limits_from_flags
from tether.parent.run.roles import ROLES
from tether.parent.run.supervisor import ChildConfig, RunHandle, Supervisor
from tether.parent.run.terminal import clean
from tether.protocol.messages import RunResult


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tether", description="Run sub-agents as supervised child processes.")
    p.add_argument("--version", action="version", version=f"tether {version()}")
    sub = p.add_subparsers(dest="cmd", parser_class=_Parser)

    run = sub.add_parser("run", help="run one sub-agent in a child process")
    run.add_argument("prompt", help="the task for the sub-agent")
    run.add_argument(
        "--model",
        help="model for the run, e.g. scripted:FILE, openai:MODEL (required for the built-in "
        "roles; a --command child or your own agent may not need one)",
    )
    run.add_argument(
        "--agent",
        default="general",
        help=f"a role ({', '.join(sorted(ROLES))}), or module:callable / file.py:callable "
        "for your own agent implementation",
    )
    run.add_argument("--workspace", default=".", help="directory the agent works in")
    add_limit_options(run)
    run.add_argument("--command", help="drive this command instead of the Python child")
    run.add_argument(
        "--provider",
        help="what runs the agent: spawn (default), fork, command:ARGV, inprocess, "
        "acp:COMMAND, or a [[provider]] of --agents (see tether doctor)",
    )
    run.add_argument(
        "--agents", metavar="FILE", help="a definitions file whose [[provider]] tables to add"
    )
    add_isolation_options(run)
    run.add_argument("--description", default="", help="short label for the run")
    run.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")

    sub.add_parser("schema", help="print the wire protocol's JSON Schema")
    doctor = sub.add_parser("doctor", help="what this host can enforce, and how")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--agents", metavar="FILE", help="also list the [[provider]] tables of this file"
    )
    conformance.add_arguments(
        sub.add_parser("conformance", help="check that a child command speaks the protocol")
    )
    delegation_cli.add_arguments(
        sub.add_parser("task-schema", help="print the model-facing task tool's schema")
    )
    orchestrate = sub.add_parser(
        "orchestrate", help="run a top-level agent that delegates to sub-agents (task tool)"
    )
    delegation_cli.add_orchestrate_arguments(orchestrate)
    add_limit_options(orchestrate)
    add_isolation_options(orchestrate)
    agents_cli.add_arguments(
        sub.add_parser("agents", help="continuable agents: list, show, send a message")
    )
    mcp = sub.add_parser("mcp", help="serve delegation to sub-agents over MCP (stdio)")
    mcp_cli.add_arguments(mcp)
    add_limit_options(mcp)
    add_isolation_options(mcp)
    return p


def add_limit_options(p: argparse.ArgumentParser) -> None:
    """The per-child limit flags (`tether run`, `tether orchestrate`); see `limits_from`."""
    p.add_argument("--timeout", help="wall-clock limit, e.g. 30s, 1m30s, 2h (a number: seconds)")
    p.add_argument(
        "--idle-timeout",
        help="limit on silence from the child, e.g. 20s; tether's child sends a heartbeat every "
        "2s while a step is pending, so keep it well above that (at least 4s)",
    )
    p.add_argument(
        "--memory", help="memory limit with its unit, e.g. 512M or 2G (a bare number is refused)"
    )
    p.add_argument("--cpu", help="CPU time limit, e.g. 30s")
    p.add_argument("--processes", type=int, help="limit on processes/threads at once")
    p.add_argument("--open-files", type=int, help="limit on open file descriptors")
    p.add_argument("--file-size", help="largest file the child may write, with its unit, e.g. 100M")


def add_isolation_options(p: argparse.ArgumentParser) -> None:
    """How children are started (`tether run`, `tether orchestrate`); see `config_from`."""
    p.add_argument(
        "--launcher",
        default="local",
        help=f"run the child under a launcher: {', '.join(launcher_usages())}",
    )
    p.add_argument(
        "--containment",
        default="auto",
        help=f"containment tier: auto, {', '.join(TIERS)} (see tether doctor)",
    )
    p.add_argument(
        "--isolation",
        default="auto",
        choices=("auto", "sandbox", "process"),
        help="isolation level: sandbox (Landlock, seccomp, an unprivileged uid as root), "
        "process (scrub, session, limits only), or auto: the strongest this host supports "
        "(see tether doctor)",
    )


def limits_from(args: argparse.Namespace) -> Limits:
    """The limit flags as `Limits`; an error names the flag (`--timeout: ...`)."""
    return limits_from_flags(
        {
            "wall": args.timeout,
            "idle": args.idle_timeout,
            "memory": args.memory,
            "cpu": args.cpu,
            "processes": args.processes,
            "open_files": args.open_files,
            "file_size": args.file_size,
        }
    )


def config_from(args: argparse.Namespace) -> ChildConfig:
    return ChildConfig(
        launcher=args.launcher, containment=args.containment, isolation=args.isolation
    )


def render(result: RunResult) -> str:
    """The readable form of a result, for people (the child's words cleaned for a terminal)."""
    return clean(_render(result))


def _render(result: RunResult) -> str:
    lines = []
    if result.success:
        lines.append(f"completed: {result.summary or result.message}")
    else:
        f = result.failure
        kind = f.kind if f else result.status
        lines.append(f"{result.status} ({kind}): {result.message or result.summary}")
        if f is not None:
            bits = [
                f"exit code {f.exit_code}" if f.exit_code is not None else "",
                f"signal {f.signal}" if f.signal else "",
                f"limit {f.limit}" if f.limit else "",
                f"dispose rung {f.rung}" if f.rung and f.rung != "none" else "",
            ]
            if any(bits):
                lines.append("  " + ", ".join(b for b in bits if b))
            if f.stderr_tail.strip():
                lines.append("  stderr tail:")
                lines += [f"    {ln}" for ln in f.stderr_tail.strip().splitlines()[-10:]]
        if result.summary and result.summary != result.message:
            lines.append(f"summary: {result.summary}")
    for a in result.artifacts:
        lines.append(f"  artifact {line(a.path)} ({a.fs_type}, {a.size} bytes)")
    for s in result.skipped:
        lines.append(f"  skipped {line(s.path)}: {line(s.reason)}")
    if result.isolation is not None and result.isolation.warning:
        lines.append(f"  isolation {result.isolation.level}: {result.isolation.warning}")
    lines.append(
        f"turns {result.turn_count}, iterations {result.iteration_count}, tokens "
        f"{result.usage.input_tokens} in / {result.usage.output_tokens} out"
    )
    ran = [
        f"process {result.pid}" if result.pid is not None else "no process started",
        f"launcher {result.launcher}" if result.launcher else "",
        f"containment {result.containment}" if result.containment else "",
        f"{result.duration_seconds:.2f}s" if result.duration_seconds is not None else "",
    ]
    lines.append(", ".join(bit for bit in ran if bit))
    return "\n".join(lines)


async def _run(args: argparse.Namespace) -> RunResult:
    limits = limits_from(args)
    command = shlex.split(args.command) if args.command is not None else None
    if command == []:
        raise UsageError("tether run: --command must not be empty")
    if command is not None:
        command = [_absolute_if_here(arg) for arg in command]
    config = config_from(args)
    provider = None
    if args.provider is not None:
        from tether.parent.providers.tables import absolute_spec

        provider = absolute_spec(args.provider)
    async with Supervisor(config) as sup:
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
            )
        for warning in caught:
            print(f"tether: warning: {warning.message}", file=sys.stderr, flush=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, handle, args, tg)
            result = await handle.result()
            tg.cancel_scope.cancel()
        return result


def _absolute_if_here(arg: str) -> str:
    """`examples/child.js` → its absolute path, when it names something here: a sandboxed
    child starts in its workspace, not in our working directory, and is granted (read) only
    the absolute paths its command names."""
    if os.sep in arg and not os.path.isabs(arg) and not arg.startswith("-") and os.path.exists(arg):
        return os.path.abspath(arg)
    return arg


async def _cancel_on_signal(handle: RunHandle, args: argparse.Namespace, tg: TaskGroup) -> None:
    """SIGINT or SIGTERM asks the child to abort (the result is still printed); a second one
    cuts the run at once. Either way the child's tree is taken down before tether exits."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            args.interrupted = signum
            if args.interrupted_once:
                handle.abort()
                return
            args.interrupted_once = True
            print(f"tether: {signal.Signals(signum).name}: cancelling the run", file=sys.stderr)
            tg.start_soon(handle.cancel, "interrupted")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = _parser()
        args = parser.parse_args(argv)
        if args.cmd is None:
            parser.print_help()
            return 0
        if args.cmd == "schema":
            from tether.protocol.schema import render as render_schema

            sys.stdout.write(render_schema())
            return 0
        if args.cmd == "doctor":
            from tether.parent.cli import doctor

            got = doctor.report(agents=args.agents)
            if args.json:
                sys.stdout.write(msgspec.json.format(msgspec.json.encode(got)).decode() + "\n")
            else:
                print(doctor.render(got))
            return 0
        if args.cmd == "conformance":
            return conformance.main(args)
        if args.cmd == "task-schema":
            return delegation_cli.main(args)
        if args.cmd == "orchestrate":
            from tether.parent.cli import orchestrate as orchestrate_cli

            return orchestrate_cli.main(args)
        if args.cmd == "agents":
            return agents_cli.main(args)
        if args.cmd == "mcp":
            return mcp_cli.main(args)
        args.interrupted, args.interrupted_once = None, False
        result = anyio.run(_run, args)
    except (UsageError, ValueError) as exc:
        print(f"tether: {exc}" if not str(exc).startswith("tether") else str(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(result)).decode() + "\n")
    else:
        print(render(result))
    if args.interrupted is not None:
        return 128 + int(args.interrupted)  # the shell's convention for "ended by a signal"
    return 0 if result.success else 1
