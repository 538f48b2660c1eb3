"""The `tether` command line: progress goes to stderr, results to stdout.

Exit status: 0 when the run succeeded, 1 when it came back with `success: false`, 2 for bad
usage (unknown options, an unreadable model script, bad limits) — nothing is spawned then.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from typing import NoReturn

import anyio
import msgspec

from tether.parent import conformance
from tether.parent.cli import agents as agents_cli
from tether.parent.cli import mcp as mcp_cli
from tether.parent.cli import orchestrate as orchestrate_cli
from tether.parent.cli import replay as replay_cli
from tether.parent.cli import run as run_cli
from tether.parent.cli import task_schema as task_schema_cli
from tether.parent.cli import trace as trace_cli
from tether.parent.cli.options import (
    UsageError,
    add_isolation_options,
    add_limit_options,
    add_trace_option,
    add_workspace_options,
)
from tether.parent.cli.output import render
from tether.parent.process.wired import version


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tether", description="Run sub-agents as supervised child processes.")
    p.add_argument("--version", action="version", version=f"tether {version()}")
    sub = p.add_subparsers(dest="cmd", parser_class=_Parser)

    run_cli.add_arguments(sub.add_parser("run", help="run one sub-agent in a child process"))

    sub.add_parser("schema", help="print the wire protocol's JSON Schema")
    doctor = sub.add_parser("doctor", help="what this host can enforce, and how")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--agents", metavar="FILE", help="also list the [[provider]] tables of this file"
    )
    conformance.add_arguments(
        sub.add_parser("conformance", help="check that a child command speaks the protocol")
    )
    task_schema_cli.add_arguments(
        sub.add_parser("task-schema", help="print the model-facing task tool's schema")
    )
    orchestrate = sub.add_parser(
        "orchestrate", help="run a top-level agent that delegates to sub-agents (task tool)"
    )
    orchestrate_cli.add_arguments(orchestrate)
    add_limit_options(orchestrate)
    add_isolation_options(orchestrate)
    add_workspace_options(orchestrate, default_apply="on_success")
    agents_cli.add_arguments(
        sub.add_parser("agents", help="continuable agents: list, show, send a message")
    )
    mcp = sub.add_parser("mcp", help="serve delegation to sub-agents over MCP (stdio)")
    mcp_cli.add_arguments(mcp)
    add_limit_options(mcp)
    add_isolation_options(mcp)
    add_workspace_options(mcp, default_apply="on_success")
    apply_cmd = sub.add_parser(
        "apply", help="apply (or discard) a layered run's change set from its --json result"
    )
    apply_cmd.add_argument(
        "result",
        help="a RunResult as JSON (tether run --json), a task's output, a change set; - for stdin",
    )
    apply_cmd.add_argument(
        "--discard", action="store_true", help="throw the change set's layer away instead"
    )
    apply_cmd.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_trace_option(mcp)
    trace_cli.add_arguments(
        sub.add_parser("trace", help="read traces: show one as a transcript, print the schema")
    )
    replay = sub.add_parser(
        "replay", help="run a traced run again, its model answering from the trace"
    )
    replay_cli.add_arguments(replay)
    add_limit_options(replay)
    add_isolation_options(replay)
    return p


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
            return task_schema_cli.main(args)
        if args.cmd == "orchestrate":
            return orchestrate_cli.main(args)
        if args.cmd == "agents":
            return agents_cli.main(args)
        if args.cmd == "mcp":
            return mcp_cli.main(args)
        if args.cmd == "apply":
            from tether.parent.cli import apply as apply_cli

            return apply_cli.main(args)
        if args.cmd == "trace":
            return trace_cli.main(args)
        if args.cmd == "replay":
            return replay_cli.main(args)
        args.interrupted, args.interrupted_once = None, False
        result = anyio.run(run_cli.run, args)
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


def command() -> NoReturn:
    """The `tether` console command (through `tether._command`, which imports this module with
    the collector off) and `python -m tether.parent.cli`: `main()`, then the process's exit
    with its code. Everything the command started is gone by then (a supervisor
    leaves nothing when it closes), so the interpreter's shutdown need not walk the heap for
    garbage cycles: frozen first, the exit of a `tether run` takes ≈ 10 ms instead of ≈ 55
    (most of it that last collection over every object a run created; benchmarks/notes.md).
    The exit handlers still run and the standard streams are still flushed."""
    code = main()
    gc.freeze()
    sys.exit(code)
