"""Where a run's trace goes (`TraceSpec`), and the check that it is a place the child cannot
reach."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20
DEFAULT_MAX_BYTES = 64 * MIB
"""The largest a trace file grows; tracing of the run stops there (the run goes on)."""
DEFAULT_BUFFER_BYTES = 8 * MIB
"""Lines a run may have waiting for the disk; past that, tracing of the run stops rather
than the run waiting for the disk."""
SUFFIX = ".jsonl"


@dataclass(frozen=True)
class TraceSpec:
    """Trace a run: a JSON Lines file per run in `dir`, named by its run id.

    `max_bytes`: the largest the file may grow (the limit, the policy when it is hit: the run's
    tracing stops with a `stopped` line, the run goes on and its result says so in
    `trace.stopped`); `buffer_bytes`: how far the disk may fall behind before the same
    happens (a run never waits for the disk, except for its last lines, briefly, before its
    result is handed back). `file`: append to this trace instead (a continuable agent's
    follow-ups go to its first run's file). `orchestration`: for an orchestrator, how it was
    started (written in its header; `tether replay` reads it)."""

    dir: str | os.PathLike[str]
    max_bytes: int = DEFAULT_MAX_BYTES
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    file: str | None = None
    orchestration: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("max_bytes", "buffer_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 4096:
                raise ValueError(f"trace {name} must be a number of bytes, at least 4096")

    def replace(self, **changes: Any) -> TraceSpec:
        return dataclasses.replace(self, **changes)


TraceOption = str | os.PathLike[str] | TraceSpec | None
"""What `trace=` takes: a directory, a `TraceSpec`, or `None` (no trace of its own)."""


def trace_spec(value: TraceOption) -> TraceSpec | None:
    if value is None or isinstance(value, TraceSpec):
        return value
    if isinstance(value, str | os.PathLike):
        if not os.fspath(value):
            raise ValueError("trace needs a directory")
        return TraceSpec(value)
    raise ValueError(f"trace takes a directory or a TraceSpec, not {type(value).__name__}")


def check_trace(value: TraceOption, workspace: str) -> TraceSpec | None:
    """The trace of a run in `workspace`, its directory made absolute; raises `ValueError`
    (bad usage) for a directory the child could reach — the workspace or anything under it —
    and for a path that exists and is not a directory."""
    spec = trace_spec(value)
    if spec is None:
        return None
    where = os.path.realpath(os.fspath(spec.dir))
    ws = os.path.realpath(workspace)
    if where == ws or where.startswith(ws.rstrip("/") + "/"):
        raise ValueError(
            f"trace directory {os.fspath(spec.dir)!r} lies in the run's workspace {ws!r}, "
            "where the child could read or change it; put traces outside the workspace"
        )
    if os.path.lexists(where) and not os.path.isdir(where):
        raise ValueError(f"trace directory {os.fspath(spec.dir)!r} is not a directory")
    file = spec.file
    if file is not None:
        file = os.path.realpath(file)
        if file == ws or file.startswith(ws.rstrip("/") + "/"):
            raise ValueError(f"trace file {spec.file!r} lies in the run's workspace {ws!r}")
    return spec.replace(dir=where, file=file)
