"""`tether replay TRACE [--workspace DIR] [--json] [--trace DIR] [limits] [isolation]`: run a
traced run again, its model answering from the trace, and say whether it came out the same.

The run is started as the trace's header says (its task, its definition or custom agent, its
history; an orchestrator with its sub-agents' definitions and delegation settings), in
`--workspace` — a copy of the workspace as it was before the recorded run, since the run
changes it again — with `scripted:trace:TRACE` as its model. The replay is traced too (into
`--trace DIR`, or a private temporary directory removed afterwards) and compared with the
recording (`tether.parent.trace.compare`): the same summaries, artifacts, tool calls and usage.

Stdout: the replayed result, then whether it reproduced the recording and, if not, each
difference and where the run left the recorded requests; `--json`: one JSON document. Exit
status: 0 when the replay reproduced the recording, 1 when it did not, 2 for bad usage (not a
trace, a run tether cannot start again from its trace alone).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from tether.parent.cli.options import add_trace_option

if TYPE_CHECKING:
    from tether.parent.delegation.orchestrator import Orchestration
    from tether.parent.process.config import ChildConfig
    from tether.parent.process.limits import Limits
    from tether.parent.trace.format import Header
    from tether.protocol.messages import RunResult

REPLAYABLE_PROVIDERS = ("spawn", "fork", "inprocess")
"""Providers whose run tether can start again from a trace alone (a fork's history is in the
header); a foreign agent's (`acp`, `command`) needs its command: give it `scripted:trace:FILE`
as its model instead."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace_file", metavar="TRACE", help="the trace of the run to replay")
    p.add_argument(
        "--workspace",
        default=".",
        help="where the replay runs: a copy of the workspace as the recorded run found it",
    )
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_trace_option(p)


@dataclass
class Replayed:
    result: RunResult
    orchestration: Orchestration | None
    differences: list[str] = field(default_factory=list)
    divergences: list[str] = field(default_factory=list)
    trace: str | None = None

    @property
    def reproduced(self) -> bool:
        return self.result.trace is not None and not self.differences and not self.divergences

    def to_dict(self) -> dict[str, Any]:
        import msgspec

        return {
            "reproduced": self.reproduced,
            "differences": self.differences,
            "divergences": self.divergences,
            "trace": self.trace,
            "result": msgspec.to_builtins(self.result),
            **(
                {"orchestration": self.orchestration.to_dict()}
                if self.orchestration is not None
                else {}
            ),
        }


def main(args: argparse.Namespace) -> int:
    """Raises ValueError (bad usage, exit 2) before anything runs."""
    import msgspec

    from tether.parent.cli.options import config_from, limits_from, trace_from

    if not os.path.isdir(args.workspace):
        raise ValueError(f"--workspace {args.workspace!r} is not a directory")
    keep = trace_from(args)
    got = anyio.run(
        replay,
        args.trace_file,
        args.workspace,
        limits_from(args),
        config_from(args),
        keep,
        args.quiet,
    )
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(got.to_dict())).decode() + "\n")
    else:
        print(render(got))
    return 0 if got.reproduced else 1


async def replay(
    path: str,
    workspace: str,
    limits: Limits | None = None,
    config: ChildConfig | None = None,
    keep: str | None = None,
    quiet: bool = True,
) -> Replayed:
    """Replay the trace at `path` in `workspace` and compare (see the module docstring);
    raises `ValueError` for bad usage. `keep`: trace the replay into this directory."""
    from tether.parent.models.replay import TraceModel
    from tether.parent.run.spec import NamedModel
    from tether.parent.trace.compare import differences
    from tether.parent.trace.reader import linked, read_trace

    path = os.path.abspath(path)
    recorded = await anyio.to_thread.run_sync(read_trace, path)
    model = await anyio.to_thread.run_sync(TraceModel.from_file, path)
    header = recorded.runs[0].header
    _check_replayable(header)
    named = NamedModel(f"scripted:trace:{path}", model)
    where = keep if keep is not None else tempfile.mkdtemp(prefix="tether-replay-")
    try:
        got = await _run(header, named, workspace, limits, config, where, quiet)
        mine = [recorded, *await anyio.to_thread.run_sync(linked, recorded)]
        got.divergences = list(model.divergences)
        if got.result.trace is not None:
            again = await anyio.to_thread.run_sync(read_trace, got.result.trace.path)
            theirs = [again, *await anyio.to_thread.run_sync(linked, again)]
            got.differences = differences(mine, theirs)
            got.trace = got.result.trace.path if keep is not None else None
        else:
            got.differences = ["the replay was not traced, so it cannot be compared"]
        return got
    finally:
        if keep is None:
            shutil.rmtree(where, ignore_errors=True)


def _check_replayable(header: Header) -> None:
    if header.provider not in REPLAYABLE_PROVIDERS and ":" not in header.agent:
        raise ValueError(
            f"the traced run ran on provider {header.provider!r}, which runs an agent of its "
            "own: replay it by starting that agent again with the model "
            "scripted:trace:FILE"
        )
    if header.orchestration is not None and header.orchestration.get("continuable"):
        raise ValueError(
            "the traced orchestration ran continuable sub-agents, whose agent ids are new each "
            "time and reach the orchestrator's model: its replay would leave the recording at "
            "once"
        )
    if header.parent_tools and header.orchestration is None:
        names = ", ".join(t.name for t in header.parent_tools)
        raise ValueError(
            f"the traced run was served parent tools ({names}) by the program that started "
            "it: replay it there, with the model scripted:trace:FILE"
        )


async def _run(
    header: Header,
    model: Any,
    workspace: str,
    limits: Limits | None,
    config: ChildConfig | None,
    trace_dir: str,
    quiet: bool,
) -> Replayed:
    from tether.parent.cli.progress import printer
    from tether.parent.supervisor import Supervisor

    async with Supervisor(config, trace=trace_dir) as sup:
        if header.orchestration is not None:
            done = await sup.orchestrate(
                header.prompt,
                model=model,
                workspace=workspace,
                limits=limits,
                description=header.description,
                **_orchestration(header.orchestration),
            )
            return Replayed(done.result, done)
        agent: Any = header.agent if ":" in header.agent else header.definition
        result = await sup.run(
            header.prompt,
            agent=agent,
            workspace=workspace,
            model=model,
            limits=limits,
            description=header.description,
            history=header.history,
            provider="inprocess" if header.provider == "inprocess" else None,
            on_event=None if quiet else printer(sys.stderr),
        )
        return Replayed(result, None)


def _orchestration(recorded: dict[str, Any]) -> dict[str, Any]:
    """`orchestrate()`'s arguments from an orchestrator's header."""
    import msgspec

    from tether.parent.delegation.verification import VerifierPolicy
    from tether.parent.roles.definitions import Registry, SubagentDefinition

    try:
        definitions = msgspec.convert(recorded["definitions"], list[SubagentDefinition])
        verifier = recorded.get("verifier") or {}
        chosen = verifier.get("definition")
        policy = VerifierPolicy(
            min_files=verifier.get("minFiles", 3),
            max_fix_cycles=verifier.get("maxFixCycles", 2),
            enabled=verifier.get("enabled", True),
            verifier=None if chosen is None else msgspec.convert(chosen, SubagentDefinition),
        )
        return {
            "definitions": Registry(definitions),
            "read_only": bool(recorded.get("readOnly", True)),
            "max_steps": int(recorded.get("maxSteps", 40)),
            "max_concurrent": int(recorded.get("maxConcurrent", 4)),
            "token_budget": recorded.get("tokenBudget"),
            "verifier": policy,
            "continuable": bool(recorded.get("continuable", False)),
            "agent_types": recorded.get("agentTypes"),
        }
    except (KeyError, TypeError, msgspec.ValidationError) as exc:
        raise ValueError(f"the trace's orchestration settings cannot be used: {exc}") from None


def render(got: Replayed) -> str:
    from tether.parent.cli.output import render as render_result
    from tether.parent.run.terminal import clean

    lines = [render_result(got.result)]
    if got.reproduced:
        lines.append("replay: reproduced the recorded run (summary, artifacts, tool calls, usage)")
    else:
        lines.append("replay: did not reproduce the recorded run:")
        lines += [f"  - {d}" for d in got.divergences]
        lines += [f"  - {d}" for d in got.differences]
    if got.trace is not None:
        lines.append(f"the replay's trace: {got.trace}")
    return clean("\n".join(lines))


__all__ = ["Replayed", "replay"]
