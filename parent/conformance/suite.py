"""Running the conformance checks: each on a fresh child, a few at a time, reported in order;
and the `tether conformance` command line.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import anyio
import msgspec

from tether.parent.conformance.checks import (
    CHECK_NAMES,
    CHECKS,
    Check,
    check_stdout_is_protocol,
    scripted_complete,
)
from tether.parent.conformance.wire import CheckFailed, open_wire
from tether.parent.process.env import build_child_env

CHECK_DEADLINE = 60.0
DEFAULT_JOBS = 4
"""Checks run this many children at a time."""


@dataclass
class Outcome:
    name: str
    passed: bool
    why: str = ""
    junk: list[str] = field(default_factory=list)
    echoed: bool = False
    """The child sent the kit's own messages back (it echoes its input)."""


@dataclass
class Report:
    outcomes: list[Outcome]

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def failed(self) -> int:
        return len(self.outcomes) - self.passed

    @property
    def echoed(self) -> int:
        """Checks that saw the child send the kit's own messages back."""
        return sum(o.echoed for o in self.outcomes)

    def failures(self) -> dict[str, str]:
        return {o.name: o.why for o in self.outcomes if not o.passed}


async def run_check(check: Check, command: Sequence[str], env: Mapping[str, str]) -> Outcome:
    """Run one check on a fresh child; never raises for anything the child did."""
    junk: list[str] = []
    echoed = False
    try:
        with anyio.fail_after(CHECK_DEADLINE):
            async with open_wire(command, env, scripted_complete) as w:
                try:
                    await check.run(w)
                finally:
                    junk = list(w.junk)
                    echoed = w.echo is not None
    except CheckFailed as exc:
        return Outcome(check.name, False, str(exc), junk, echoed)
    except TimeoutError:
        why = f"the check did not finish within {CHECK_DEADLINE:g}s"
        return Outcome(check.name, False, why, junk)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return Outcome(check.name, False, f"a message does not fit the schema: {exc}", junk)
    except Exception as exc:  # a bug of the kit must not hide the other checks
        return Outcome(check.name, False, f"the kit failed: {type(exc).__name__}: {exc}", junk)
    return Outcome(check.name, True, "", junk)


async def run_suite(
    command: Sequence[str],
    *,
    out: TextIO | None = None,
    only: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    jobs: int = DEFAULT_JOBS,
) -> Report:
    """Run every check (or those named in `only`) against `command`, `jobs` children at a
    time; print one line per check to `out`, in the order of `CHECKS`, then the totals."""
    if not command:
        raise ValueError("conformance needs a command to check")
    unknown = sorted(set(only or ()) - set(CHECK_NAMES))
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_NAMES)}")
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    child_env = build_child_env(os.environ) if env is None else dict(env)
    checks = [c for c in CHECKS if not only or c.name in only]
    outcomes: list[Outcome | None] = [None] * len(checks)
    printed = 0
    limiter = anyio.CapacityLimiter(jobs)

    def show_ready() -> None:
        nonlocal printed
        while printed < len(checks) and (o := outcomes[printed]) is not None:
            if out is not None:
                line = f"PASS {o.name}" if o.passed else f"FAIL {o.name}: {o.why}"
                print(line, file=out, flush=True)
            printed += 1

    async def one(i: int) -> None:
        async with limiter:
            outcome = await run_check(checks[i], command, child_env)
        if checks[i].run is check_stdout_is_protocol:
            # Reported last: it also answers for what every other check saw on stdout.
            while any(o is None for j, o in enumerate(outcomes) if j != i):
                await done.wait()
            outcome = _with_junk_of_all(outcome, [o for o in outcomes if o is not None])
        outcomes[i] = outcome
        done.set()
        show_ready()

    done = _Pulse()
    async with anyio.create_task_group() as tg:
        for i in range(len(checks)):
            tg.start_soon(one, i)
    report = Report([o for o in outcomes if o is not None])
    if out is not None:
        print(f"{report.passed} passed, {report.failed} failed", file=out, flush=True)
        if report.echoed:
            print(
                f"{report.echoed} check(s) got the kit's own messages back: the command copies "
                "its input to its output (`cat`, or a pipeline that does) instead of answering "
                "it; a child reads requests from stdin and writes replies to stdout "
                "(docs/protocol.md)",
                file=out,
                flush=True,
            )
    return report


class _Pulse:
    """An event that can fire many times: `wait()` returns at the next `set()`."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait(self) -> None:
        await self._event.wait()


def _with_junk_of_all(own: Outcome, others: list[Outcome]) -> Outcome:
    junk = [f"[{o.name}] {j}" for o in others for j in o.junk]
    junk += [f"[{own.name}] {j}" for j in own.junk]
    if not own.passed or not junk:
        return own
    more = f" (and {len(junk) - 1} more)" if len(junk) > 1 else ""
    return Outcome(own.name, False, f"non-protocol output on stdout: {junk[0]}{more}", own.junk)


# --- command line -------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check",
        action="append",
        choices=CHECK_NAMES,
        metavar="NAME",
        help=f"run only this check (repeatable): {', '.join(CHECK_NAMES)}",
    )
    p.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="let the child inherit this variable (or glob) beyond the allowlist",
    )
    p.add_argument(
        "--jobs", type=int, default=DEFAULT_JOBS, help="children to run at a time (default 4)"
    )
    p.add_argument("child_command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def main(args: argparse.Namespace) -> int:
    """Run the suite for `tether conformance`; 0 when every check passed, 1 otherwise."""
    command = list(args.child_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ValueError(
            "tether conformance: give the child command after --, e.g. "
            "tether conformance -- node child.js"
        )
    env = build_child_env(os.environ, pass_through=args.pass_env)
    print(f"tether conformance: {shlex.join(command)}", file=sys.stderr, flush=True)
    report = anyio.run(
        lambda: run_suite(command, out=sys.stdout, only=args.check, env=env, jobs=args.jobs)
    )
    return 0 if report.failed == 0 else 1
