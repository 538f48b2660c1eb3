"""The options several subcommands share: limits, how children start, and the usage error."""

from __future__ import annotations

import argparse
import os

from tether.parent.egress.policy import NetworkPolicy, credential_flag, with_credentials
from tether.parent.process.config import ChildConfig
from tether.parent.process.host import TIERS
from tether.parent.process.launchers import launcher_usages
from tether.parent.process.limits import Limits
from tether.parent.run.checks import limits_from_flags


class UsageError(Exception):
    """The command line was wrong (exit status 2; nothing was spawned)."""


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
    p.add_argument(
        "--allow-git-config",
        action="store_true",
        help="let a sandboxed child write the workspace's .git/config and .git/hooks, which "
        "git runs from on your next git command (refused by default)",
    )
    p.add_argument(
        "--allow-net",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="let the run reach HOST (*.DOMAIN for its subdomains; PORT 443 unless given, or "
        "80,443 or 8000-8100) through its egress proxy; repeatable. Without it a child has no "
        "network at all",
    )
    p.add_argument(
        "--net-credential",
        action="append",
        default=[],
        metavar="HOST[:PORT]=[HEADER:]ENV",
        help="add a header to every request to HOST at the proxy, its value from your "
        "environment variable ENV (Authorization: Bearer $ENV without HEADER); the child never "
        "sees it. Implies --allow-net HOST[:PORT]; repeatable",
    )


def add_workspace_options(p: argparse.ArgumentParser, *, default_apply: str) -> None:
    """How a build sub-agent sees the workspace (`tether run`, `orchestrate`, `mcp`)."""
    p.add_argument(
        "--workspace-mode",
        default="shared",
        choices=("shared", "layered"),
        help="shared: the child works in the workspace; layered: in a copy-on-write layer of "
        "its own, its changes returned as a change set (build sub-agents then run in parallel)",
    )
    p.add_argument(
        "--apply",
        default=default_apply,
        choices=("never", "on_success", "on_verified")
        if default_apply != "never"
        else ("never", "on_success"),
        help="when a layered run's change set is applied to the workspace "
        f"(default {default_apply}; never: `tether apply RESULT.json` applies it later)",
    )


def add_trace_option(p: argparse.ArgumentParser) -> None:
    """`--trace DIR` (`tether run`, `orchestrate`, `mcp`, `replay`); see `trace_from`."""
    p.add_argument(
        "--trace",
        metavar="DIR",
        help="write a trace of every run (each model call, its request and answer) to DIR, "
        "one JSON Lines file per run; DIR must lie outside the workspace (docs/traces.md)",
    )


def trace_from(args: argparse.Namespace) -> str | None:
    """The `--trace` directory, absolute (a relative one is read against our directory)."""
    value: str | None = args.trace
    if value is None:
        return None
    if not value:
        raise UsageError("--trace needs a directory")
    return os.path.abspath(value)


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
        launcher=args.launcher,
        containment=args.containment,
        isolation=args.isolation,
        allow_git_config=args.allow_git_config,
        network=network_from(args),
    )


def network_from(args: argparse.Namespace) -> NetworkPolicy:
    """`--allow-net` and `--net-credential` as the run's policy; an error names the flag."""
    credentials = []
    for text in args.net_credential:
        try:
            credentials.append(credential_flag(text))
        except ValueError as exc:
            raise UsageError(f"--net-credential: {exc}") from None
    try:
        allow = with_credentials(args.allow_net, credentials)
    except ValueError as exc:
        raise UsageError(f"--allow-net: {exc}") from None
    return NetworkPolicy(allow)


def absolute_if_here(arg: str) -> str:
    """`examples/child.js` → its absolute path, when it names something here: a sandboxed
    child starts in its workspace, not in our working directory, and is granted (read) only
    the absolute paths its command names."""
    if os.sep in arg and not os.path.isabs(arg) and not arg.startswith("-") and os.path.exists(arg):
        return os.path.abspath(arg)
    return arg


def add_delegation_options(p: argparse.ArgumentParser, *, budget: str) -> None:
    """A delegation's admission, budget, verifier and ledger options (`tether orchestrate`,
    `tether mcp`); `budget`: what `--token-budget` counts there."""
    p.add_argument(
        "--max-concurrent",
        type=int,
        default=4,
        metavar="N",
        help="sub-agents running at once; more queue (default 4)",
    )
    p.add_argument("--token-budget", type=int, metavar="N", help=budget)
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
