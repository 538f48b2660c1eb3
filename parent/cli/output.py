"""How a run's result reads on a terminal, for people (the child's words cleaned)."""

from __future__ import annotations

from tether.parent.cli.progress import line
from tether.parent.run.stop import describe
from tether.parent.run.terminal import clean
from tether.protocol.messages import RunResult


def render(result: RunResult) -> str:
    """The readable form of a result, for people (the child's words cleaned for a terminal)."""
    return clean(_render(result))


def _render(result: RunResult) -> str:
    lines = []
    if result.success and result.status == "needs_input":
        # A continuable agent stopped to ask: its question is the answer to read.
        lines.append(f"needs_input: {result.question or result.summary or result.message}")
        if result.summary and result.summary != result.question:
            lines.append(f"summary: {result.summary}")
    elif result.success:
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
    for c in result.sensitive_changes:
        # A file the user's own tools run (git, direnv, npm, make, an editor) changed: say it,
        # so nobody runs `git checkout` there unaware.
        what = f"{c.fs_type}, executable" if c.executable else (c.fs_type or "gone")
        lines.append(f"  CHANGED, run by your tools: {line(c.path)} ({c.change}, {what}; {c.runs})")
    if result.isolation is not None and result.isolation.warning:
        lines.append(f"  isolation {result.isolation.level}: {result.isolation.warning}")
    cs = result.changes
    if cs is not None:
        lines.append(f"  layered ({cs.method}): {cs.files} change(s), {cs.bytes} bytes")
        for fc in cs.changes:
            was = f" (was {line(fc.old_path)})" if fc.old_path else ""
            lines.append(f"    {fc.change} {line(fc.path)}{was}")
        for r in cs.refused:
            lines.append(f"    refused {line(r.path)}: {line(r.reason)}")
    if result.applied is not None:
        outcome = result.applied
        state = f"  change set {outcome.state}"
        lines.append(f"{state}: {line(outcome.message)}" if outcome.message else state)
        if outcome.state == "not_applied" and cs is not None:
            lines.append(f"    layer kept at {line(cs.layer)}: tether apply RESULT.json applies it")
        for conflict in outcome.conflicts:
            lines.append(f"    conflict at {line(conflict.path)}: {line(conflict.reason)}")
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
    if result.stop is not None:
        lines.append(describe(result.stop))
    return "\n".join(lines)
