"""A trace read back: its runs, each with its lines, and the traces it links to.

A file holds one run, or — a continuable agent's — the runs of one agent one after another,
each opened by its `header` line. `read_trace` checks every line against the format (a line
that is not one is an error naming its number) and groups the lines by run. `linked` finds
the traces of the runs a trace's runs started (an orchestrator's sub-agents): the files of
the same directory whose header names one of them as `parentRunId`, and theirs in turn.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from tether.parent.models.files import read_bounded
from tether.parent.trace.format import (
    AgentBound,
    ChildReport,
    Header,
    Outcome,
    Stopped,
    TraceLine,
    Turn,
    decode,
)
from tether.parent.trace.spec import SUFFIX
from tether.protocol.messages import RunResult

MAX_TRACE_BYTES = 256 << 20
"""The largest trace file read back (four times the default size limit of a trace)."""
MAX_LINKED_FILES = 10_000
"""Files of a directory looked at for the traces a trace links to."""
_HEADER_CHUNK = 1 << 16


class TraceError(ValueError):
    """A file is not a trace (or not a readable one); the message says where."""


@dataclass
class RecordedRun:
    """One run as its trace recorded it."""

    header: Header
    path: str
    lines: list[TraceLine] = field(default_factory=list)
    """Every line of the run after its header, in the order written."""

    @property
    def run_id(self) -> str:
        return self.header.run_id

    @property
    def turns(self) -> list[Turn]:
        return [ln for ln in self.lines if isinstance(ln, Turn)]

    @property
    def outcomes(self) -> list[Outcome]:
        return [ln for ln in self.lines if isinstance(ln, Outcome)]

    @property
    def result(self) -> RunResult | None:
        """The result of its last activation."""
        outcomes = self.outcomes
        return outcomes[-1].result if outcomes else None

    @property
    def tool_calls(self) -> list[ChildReport]:
        """The tool calls the child reported (`tool_call` events)."""
        return [ln for ln in self.lines if isinstance(ln, ChildReport) and ln.event == "tool_call"]

    @property
    def stopped(self) -> Stopped | None:
        return next((ln for ln in self.lines if isinstance(ln, Stopped)), None)

    @property
    def agent_id(self) -> str | None:
        bound = next((ln for ln in self.lines if isinstance(ln, AgentBound)), None)
        return bound.agent_id if bound is not None else self.header.agent_id

    def describe(self) -> str:
        """`run-1-2 (explorer)`: how a message names it."""
        return f"{self.run_id} ({self.header.definition.type})"


@dataclass
class Trace:
    path: str
    runs: list[RecordedRun]

    @property
    def run_ids(self) -> set[str]:
        return {r.run_id for r in self.runs}


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and check a trace file; raises `TraceError` (a `ValueError`: bad usage) when it
    cannot be read or a line is not a trace line. Blocking file I/O."""
    where = os.fspath(path)
    try:
        data = read_bounded(where, MAX_TRACE_BYTES, "trace")
    except ValueError as exc:
        raise TraceError(str(exc)) from None
    return parse_trace(data, where)


def parse_trace(data: bytes, where: str = "trace") -> Trace:
    runs: list[RecordedRun] = []
    by_id: dict[str, RecordedRun] = {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            line = decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise TraceError(f"{where}, line {number}: not a trace line: {exc}") from None
        if isinstance(line, Header):
            run = RecordedRun(line, where)
            runs.append(run)
            by_id[line.run_id] = run
            continue
        owner = by_id.get(line.run_id)
        if owner is None:
            raise TraceError(
                f"{where}, line {number}: a line of run {line.run_id!r} before its header"
            )
        owner.lines.append(line)
    if not runs:
        raise TraceError(f"{where}: no header line: not a trace (or an empty one)")
    return Trace(where, runs)


def first_header(path: str) -> Header | None:
    """The header of a trace file, read without reading the rest; `None` when the file does
    not start with one. Blocking file I/O."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    head = b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        while b"\n" not in head and len(head) < MAX_TRACE_BYTES:
            chunk = os.read(fd, _HEADER_CHUNK)
            if not chunk:
                break
            head += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        line = decode(head.partition(b"\n")[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return line if isinstance(line, Header) else None


def linked(trace: Trace) -> list[Trace]:
    """The traces of the runs `trace`'s runs started, and of the runs those started, found in
    its directory (at most `MAX_LINKED_FILES` files looked at), in the order they started."""
    directory = Path(trace.path).parent
    candidates: list[tuple[float, str, str]] = []
    for entry in _entries(directory):
        if os.path.realpath(entry) == os.path.realpath(trace.path):
            continue
        header = first_header(entry)
        if header is not None and header.parent_run_id is not None:
            candidates.append((header.wall, header.parent_run_id, entry))
    candidates.sort()
    parents = set(trace.run_ids)
    found: list[Trace] = []
    grew = True
    taken: set[str] = set()
    while grew:
        grew = False
        for _, parent, entry in candidates:
            if entry in taken or parent not in parents:
                continue
            sub = read_trace(entry)
            taken.add(entry)
            found.append(sub)
            parents |= sub.run_ids
            grew = True
    found.sort(key=lambda t: t.runs[0].header.wall)
    return found


def _entries(directory: Path) -> Iterator[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names[:MAX_LINKED_FILES]:
        if name.endswith(SUFFIX):
            yield str(directory / name)
