"""The traces group of `scripts/bench`: what tracing costs a run, and what a trace weighs.

One representative run — tether's built-in loop as the `explorer` role on a copy of the example
workspace, a scripted model answering eleven turns that list, search and read it (twenty tool
calls and their results), then `complete` — is run with and without `trace=`, in turn (the
order alternating round by round), in one supervisor; the first round of each is dropped. A
traced run's time is its untraced twin's floor.

Also measured: the bytes a trace holds per model call of that run (each call's request holds
the whole transcript so far, so the figure grows with a run's length), and what recording one
model call costs on the run's own path — encoding its line, looking for the parent's secrets,
queueing it — from the calls of a traced run, in-process (no file written: the queue is not
drained).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.report import Figure, Results
from tether.parent.supervisor import Supervisor
from tether.parent.trace.format import Header, Turn
from tether.parent.trace.reader import read_trace
from tether.parent.trace.recorder import RunTrace
from tether.parent.trace.redact import parent_secrets
from tether.parent.trace.spec import TraceSpec
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
)

EXAMPLE_WORKSPACE = Path(__file__).resolve().parents[1] / "examples" / "workspace"

PROMPT = "Find every TODO note and say what each asks for, with paths and lines."


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


SCRIPT = {
    "turns": [
        {"text": "Looking around.", "toolCalls": [_call("list_dir", path=".")]},
        {
            "text": "Searching.",
            "toolCalls": [_call("grep", pattern="TODO"), _call("glob", pattern="*")],
        },
        {"text": "Reading.", "toolCalls": [_call("read_file", path="inventory.py")]},
        {"text": "And the notes.", "toolCalls": [_call("read_file", path="README.md")]},
        {
            "text": "Again.",
            "toolCalls": [_call("grep", pattern="adjust"), _call("list_dir", path=".")],
        },
        {
            "text": "Checking.",
            "toolCalls": [_call("grep", pattern="def "), _call("glob", pattern="*.py")],
        },
        {"text": "Once more.", "toolCalls": [_call("read_file", path="inventory.py", limit=5)]},
        {
            "text": "Details.",
            "toolCalls": [_call("grep", pattern="stock"), _call("grep", pattern="level")],
        },
        {
            "text": "Looking at the README.",
            "toolCalls": [_call("read_file", path="README.md", limit=3)],
        },
        {
            "text": "Last check.",
            "toolCalls": [_call("grep", pattern="TODO"), _call("list_dir", path=".")],
        },
        {
            "text": "Done.",
            "toolCalls": [
                _call(
                    "complete",
                    summary="2 TODO notes: README.md:5 and inventory.py:5, both about adjust().",
                    paths=["README.md", "inventory.py"],
                )
            ],
        },
    ]
}


async def traces_group(res: Results, runs: int) -> None:
    s: defaultdict[str, list[float]] = defaultdict(list)
    calls: list[ModelCompleteParams] = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-traces-") as tmp:
        workspace = str(Path(tmp) / "ws")
        shutil.copytree(EXAMPLE_WORKSPACE, workspace)
        script = Path(tmp) / "explorer.json"
        script.write_text(json.dumps(SCRIPT))
        model = f"scripted:{script}"
        traces = Path(tmp) / "traces"
        async with Supervisor() as sup:
            for rnd in range(runs + 1):  # round 0 warms everything up and is dropped
                order = (True, False) if rnd % 2 else (False, True)
                for traced in order:
                    t0 = time.perf_counter_ns()
                    result = await sup.run(
                        PROMPT,
                        agent="explorer",
                        workspace=workspace,
                        model=model,
                        trace=traces if traced else None,
                    )
                    took = (time.perf_counter_ns() - t0) / 1e6
                    assert result.success, result.message
                    if not traced:
                        if rnd:
                            s["context.trace_untraced"].append(took)
                        continue
                    assert result.trace is not None and result.trace.stopped is None
                    path = Path(result.trace.path)
                    [run] = read_trace(path).runs
                    turns = run.turns
                    if rnd:
                        s["tether.trace_run"].append(took)
                        s["context.trace_bytes_per_turn"].append(path.stat().st_size / len(turns))
                    if not calls:
                        calls = [_params(run.run_id, t) for t in turns]
                    path.unlink()
        s["context.trace_record_turn"] = _record_cost(calls, traces, max(runs, 2) * 50)
    turns = len(calls)
    res.add(
        Figure(
            "context.trace_untraced",
            "a representative run, untraced",
            "ms",
            s["context.trace_untraced"],
            f"`Supervisor.run` of the explorer role, {turns} model calls with 20 tool calls "
            "and their results (a scripted model), from the call to its return: spawn, "
            "handshake, the turns, the result, the dispose; interleaved with the traced run",
        )
    )
    res.add(
        Figure(
            "tether.trace_run",
            "the same run, traced",
            "ms",
            s["tether.trace_run"],
            "as the untraced run, with `trace=DIR`: the header, every model call, the child's "
            "tool reports and the result written to a fresh 0600 file, and the result waiting "
            "for its lines to be on disk",
            floor="context.trace_untraced",
        )
    )
    res.add(
        Figure(
            "context.trace_bytes_per_turn",
            "trace bytes per model call of that run",
            "bytes",
            s["context.trace_bytes_per_turn"],
            f"the trace file's size over its {turns} model calls: each call's line holds the "
            "whole request (the transcript so far) and the answer, so it grows with the run",
        )
    )
    res.add(
        Figure(
            "context.trace_record_turn",
            "recording one model call on the run's path",
            "µs",
            s["context.trace_record_turn"],
            "`RunTrace.turn` for that run's calls in turn (its request and answer): the line "
            "encoded, searched for the parent's secrets, queued; no file is written",
        )
    )


def _params(run_id: str, turn: Turn) -> ModelCompleteParams:
    return ModelCompleteParams(
        run_id=run_id,
        messages=turn.request.messages,
        tools=turn.request.tools,
        purpose=turn.purpose,
    )


def _record_cost(calls: list[ModelCompleteParams], where: Path, n: int) -> list[float]:
    """µs per recorded call, over `n` calls of a trace whose queue is never drained."""
    header = Header(
        run_id="bench",
        wall=0.0,
        mono=0.0,
        tether_version="0",
        protocol_version=1,
        agent="explorer",
        definition=AgentDefinition(),
        prompt=PROMPT,
        workspace=str(where),
        provider="spawn",
    )
    spec = TraceSpec(where, max_bytes=1 << 40, buffer_bytes=1 << 40)
    trace = RunTrace(spec, header, parent_secrets(os.environ))
    answer = ModelCompleteResult(message=ChatMessage(role="assistant", content="ok"))
    out: list[float] = []
    for i in range(n):
        params = calls[i % len(calls)]
        t0 = time.perf_counter_ns()
        trace.turn(params, trace.begin(), slot="main", model="scripted", response=answer)
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return out
