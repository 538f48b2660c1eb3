"""A trace turned back into a deterministic model: `scripted:trace:FILE`.

Theory of operation
-------------------
`TraceModel.from_file(FILE)` reads a trace (`tether.parent.trace`) and every trace it links to
(an orchestrator's sub-agents, recorded in the same directory) and keeps, for each recorded
run, the model calls that reached a model — answered, or failed by the model. A call the
parent refused by itself (a spent budget) is left out: the replaying parent refuses it again.

A run asking for the first time is matched to a recorded run nobody has taken yet whose first
call's request is the same as its own, and keeps it. Each of its calls is answered with the
recorded answer (message, tool calls, stop reason, usage) of the first call of that recorded
run not answered yet whose request is the same: in order for a run that asks one call at a
time, and still right for one that asks several at once. When none is, the call fails with
MODEL_ERROR and a message naming the run and the first place where its request differs from
the next recorded one (the built-in loop ends the run with it); the message is also kept in
`divergences`.

"The same" request: the same purpose, messages and tools, once two facts of where and when a
run ran are set aside — the workspace's path wherever it stands as a whole path (the recorded
run's, from its header, against the replaying run's, which its run handle tells the model
through `bind_run`) and the `modifiedAt` times of delivered files, which a copy of a workspace
does not keep.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from tether.parent.trace.format import Turn
from tether.parent.trace.reader import RecordedRun, linked, read_trace
from tether.protocol import ErrorCode, RemoteError
from tether.protocol.messages import ChatMessage, ModelCompleteParams, ModelCompleteResult, ToolSpec

_MODIFIED_AT = re.compile(rb'(\\*"modifiedAt\\*"\s*:\s*\\*")[^"\\]*')
_WORKSPACE = b"<workspace>"
_FIELDS = ("purpose", "messages", "tools")
_EXCERPT = 40
_encoder = msgspec.json.Encoder()


def canonical(
    purpose: str, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], workspace: str | None
) -> bytes:
    """A request as the replay compares it (see the module docstring)."""
    data = _encoder.encode((purpose, messages, tools))
    root = (workspace or "").rstrip("/")
    if root:
        data = _root_pattern(root).sub(_WORKSPACE, data)
    return _MODIFIED_AT.sub(rb"\1*", data)


@functools.lru_cache(maxsize=64)
def _root_pattern(root: str) -> re.Pattern[bytes]:
    """The workspace's path as a whole path, as is or JSON-escaped once or twice: not a piece
    of a longer name (`/ws` in `/ws2`), nor a path inside another (`/ws` in `/data/ws`)."""
    once = msgspec.json.encode(root)[1:-1]
    twice = msgspec.json.encode(once.decode())[1:-1]
    forms = b"|".join(re.escape(f) for f in sorted({once, twice}, key=len, reverse=True))
    # Not after a name's character, unless that is the letter of an escape (`\n/ws/a`).
    before = rb"(?:(?<![\w.~/-])|(?<=\\[nrtbf]))"
    return re.compile(before + rb"(?:" + forms + rb")(?![\w.~-])")


def first_difference(recorded: bytes, now: bytes) -> str:
    """Where two canonical requests first differ, for a person."""
    a, b = msgspec.json.decode(recorded), msgspec.json.decode(now)
    for name, x, y in zip(_FIELDS, a, b, strict=True):
        found = _diff(x, y, name)
        if found is not None:
            return found
    return "nowhere (the requests are the same)"


def _diff(a: Any, b: Any, where: str) -> str | None:
    if type(a) is not type(b):
        return f"{where}: recorded {_show(a)}, now {_show(b)}"
    if isinstance(a, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in b:
                return f"{where}.{key}: recorded {_show(a[key])}, now absent"
            if key not in a:
                return f"{where}.{key}: recorded absent, now {_show(b[key])}"
            found = _diff(a[key], b[key], f"{where}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = _diff(x, y, f"{where}[{i}]")
            if found is not None:
                return found
        if len(a) != len(b):
            return f"{where}: recorded {len(a)} item(s), now {len(b)}"
        return None
    if isinstance(a, str) and a != b:
        pairs = enumerate(zip(a, b, strict=False))
        i = next((n for n, (x, y) in pairs if x != y), min(len(a), len(b)))
        return f"{where}, character {i + 1}: recorded {_excerpt(a, i)}, now {_excerpt(b, i)}"
    return None if a == b else f"{where}: recorded {_show(a)}, now {_show(b)}"


def _excerpt(text: str, at: int) -> str:
    start = max(0, at - _EXCERPT // 2)
    piece = text[start : start + _EXCERPT]
    return ("…" if start else "") + repr(piece) + ("…" if start + _EXCERPT < len(text) else "")


def _show(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


class _Recorded:
    """A recorded run and which of its calls the replay has answered."""

    def __init__(self, run: RecordedRun) -> None:
        self.run = run
        self.calls: list[Turn] = [t for t in run.turns if t.error is None or t.error.by == "model"]
        self._keys: list[bytes | None] = [None] * len(self.calls)
        self.answered = [False] * len(self.calls)
        self.taken_by: str | None = None

    def key(self, i: int) -> bytes:
        key = self._keys[i]
        if key is None:
            req = self.calls[i].request
            key = canonical(
                self.calls[i].purpose, req.messages, req.tools, self.run.header.workspace
            )
            self._keys[i] = key
        return key

    def find(self, key: bytes) -> int | None:
        for i, done in enumerate(self.answered):
            if not done and self.key(i) == key:
                return i
        return None

    def next_open(self) -> int | None:
        return next((i for i, done in enumerate(self.answered) if not done), None)


class TraceModel:
    def __init__(self, runs: Sequence[RecordedRun], name: str = "scripted:trace") -> None:
        self.name = name
        self._recorded = [_Recorded(r) for r in runs]
        self._runs: dict[str, _Recorded] = {}
        self._workspaces: dict[str, str] = {}
        self.divergences: list[str] = []
        """Every call the replay could not answer from the trace, with why."""

    @classmethod
    def from_file(cls, path: str | Path) -> TraceModel:
        """Read a trace and the traces it links to; raises `ValueError` (bad usage) when one
        cannot be read or is not a trace. Blocking file I/O."""
        trace = read_trace(path)
        runs = [*trace.runs, *(r for sub in linked(trace) for r in sub.runs)]
        return cls(runs, name=f"scripted:trace:{path}")

    @property
    def runs(self) -> list[RecordedRun]:
        return [r.run for r in self._recorded]

    def bind_run(self, run_id: str, workspace: str) -> None:
        """A run starts that may ask this model: requests are compared with its workspace."""
        self._workspaces[run_id] = workspace

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        key = canonical(
            params.purpose, params.messages, params.tools, self._workspaces.get(params.run_id)
        )
        recorded = self._runs.get(params.run_id)
        if recorded is None:
            recorded = self._claim(params.run_id, key)
        i = recorded.find(key)
        if i is None:
            raise self._diverged(params.run_id, recorded, key)
        recorded.answered[i] = True
        turn = recorded.calls[i]
        if turn.error is not None:
            raise RemoteError(turn.error.code, turn.error.message)
        if turn.response is None:  # a line with neither: not one this parent wrote
            why = f"{self.name}: call {turn.index} has no answer"
            raise RemoteError(ErrorCode.MODEL_ERROR, why)
        return turn.response

    def _claim(self, run_id: str, key: bytes) -> _Recorded:
        free = [r for r in self._recorded if r.taken_by is None and r.calls]
        for recorded in free:
            if recorded.key(0) == key:
                recorded.taken_by = run_id
                self._runs[run_id] = recorded
                return recorded
        if not free:
            why = f"every run of the trace ({len(self._recorded)}) is replayed already"
        else:
            nearest = max(free, key=lambda r: _common_prefix(r.key(0), key))
            why = (
                f"no recorded run starts with this request; the nearest, "
                f"{nearest.run.describe()}, differs at {first_difference(nearest.key(0), key)}"
            )
        raise self._fail(f"{self.name}: run {run_id}: {why}")

    def _diverged(self, run_id: str, recorded: _Recorded, key: bytes) -> RemoteError:
        n = sum(recorded.answered) + 1
        at = recorded.next_open()
        run = recorded.run
        if at is None:
            why = f"the recorded run {run.describe()} made {len(recorded.calls)} model call(s)"
            stopped = run.stopped
            if stopped is not None:
                why += f" before its trace stopped ({stopped.reason})"
            return self._fail(f"{self.name}: run {run_id} asked for call {n}; {why}")
        return self._fail(
            f"{self.name}: run {run_id} left the recorded run {run.describe()} at model call "
            f"{n}: its request differs at {first_difference(recorded.key(at), key)}"
        )

    def _fail(self, message: str) -> RemoteError:
        self.divergences.append(message)
        return RemoteError(ErrorCode.MODEL_ERROR, message)


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
