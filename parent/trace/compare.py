"""A replayed run against the recorded one: does the replay reproduce it?

"Reproduces" means, for the run and for each sub-agent run it started: the same activations,
each ending the same way (success and status), with the same summary, the same artifacts
(path within the workspace, size, type), the same skipped paths, the same model turns and
usage; and the same tool calls, as the child reported them (name and arguments, in order).
What a run cannot keep from one time to the next is not compared: run ids, process ids,
durations, the workspace's own path, files' times.

Sub-agent runs are paired by their definition's type and prompt, in the order they started.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tether.parent.trace.reader import RecordedRun, Trace
from tether.protocol.messages import RunResult

_SHOW = 120


def differences(recorded: Sequence[Trace], replayed: Sequence[Trace]) -> list[str]:
    """Everything the replay did not reproduce, for a person; `[]` when it reproduced the
    recording. Each argument: a trace, then the traces it links to (`reader.linked`)."""
    if not recorded or not replayed:
        return ["nothing to compare"]
    found: list[str] = []
    mine, theirs = recorded[0].runs, replayed[0].runs
    if len(mine) != len(theirs):
        found.append(f"the recording holds {len(mine)} run(s), the replay {len(theirs)}")
    for a, b in zip(mine, theirs, strict=False):
        found += compare_runs(a, b)
    subs_a = [r for t in recorded[1:] for r in t.runs]
    subs_b = [r for t in replayed[1:] for r in t.runs]
    found += _compare_subagents(subs_a, subs_b)
    return found


def compare_runs(recorded: RecordedRun, replayed: RecordedRun) -> list[str]:
    """What differs between one recorded run and its replay."""
    label = f"run {recorded.describe()}"
    found: list[str] = []
    a, b = recorded.outcomes, replayed.outcomes
    if len(a) != len(b):
        found.append(f"{label}: {len(a)} result(s) recorded, {len(b)} in the replay")
    for n, (x, y) in enumerate(zip(a, b, strict=False)):
        where = label if len(a) == 1 else f"{label}, activation {n}"
        found += _compare_results(
            where, x.result, recorded.header.workspace, y.result, replayed.header.workspace
        )
    calls_a = [(c.data.get("name"), c.data.get("arguments")) for c in recorded.tool_calls]
    calls_b = [(c.data.get("name"), c.data.get("arguments")) for c in replayed.tool_calls]
    if calls_a != calls_b:
        found.append(f"{label}: the tool calls differ: {_first_change(calls_a, calls_b)}")
    return found


def _compare_results(where: str, a: RunResult, ws_a: str, b: RunResult, ws_b: str) -> list[str]:
    found: list[str] = []
    for name, x, y in (
        ("the outcome", (a.success, a.status), (b.success, b.status)),
        ("the summary", a.summary, b.summary),
        ("the artifacts", _artifacts(a, ws_a), _artifacts(b, ws_b)),
        ("the skipped paths", _skipped(a), _skipped(b)),
        ("the usage", (a.usage.input_tokens, a.usage.output_tokens), _usage(b)),
        ("the model turns", a.iteration_count, b.iteration_count),
    ):
        if x != y:
            found.append(f"{where}: {name} differs: recorded {_show(x)}, replayed {_show(y)}")
    return found


def _usage(result: RunResult) -> tuple[int, int]:
    return (result.usage.input_tokens, result.usage.output_tokens)


def _artifacts(result: RunResult, workspace: str) -> list[tuple[str, int, str]]:
    return [(_within(a.path, workspace), a.size, a.fs_type) for a in result.artifacts]


def _skipped(result: RunResult) -> list[tuple[str, str]]:
    return [(s.path, s.reason) for s in result.skipped]


def _within(path: str, workspace: str) -> str:
    root = workspace.rstrip("/")
    if path == root:
        return "."
    if root and path.startswith(root + "/"):
        return os.path.relpath(path, root)
    return path


def _compare_subagents(a: list[RecordedRun], b: list[RecordedRun]) -> list[str]:
    def grouped(runs: list[RecordedRun]) -> dict[tuple[str, str], list[RecordedRun]]:
        out: dict[tuple[str, str], list[RecordedRun]] = defaultdict(list)
        for run in sorted(runs, key=lambda r: r.header.wall):
            out[(run.header.definition.type, run.header.prompt)].append(run)
        return out

    found: list[str] = []
    ga, gb = grouped(a), grouped(b)
    for key in [*ga, *(k for k in gb if k not in ga)]:
        xs, ys = ga.get(key, []), gb.get(key, [])
        for x, y in zip(xs, ys, strict=False):
            found += compare_runs(x, y)
        what = f"{key[0]} sub-agent {_show(key[1])}"
        if len(xs) > len(ys):
            found.append(f"the recording has {len(xs)} run(s) of the {what}, the replay {len(ys)}")
        elif len(ys) > len(xs):
            found.append(f"the replay has {len(ys)} run(s) of the {what}, the recording {len(xs)}")
    return found


def _first_change(a: list[Any], b: list[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"call {i + 1}: recorded {_show(x)}, replayed {_show(y)}"
    return f"recorded {len(a)} call(s), replayed {len(b)}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW else text[:_SHOW] + "…"
