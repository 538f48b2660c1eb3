"""The usage ledger: one record per sub-agent run, the orchestrator's own usage beside them,
and totals.

A record is appended when a run ends (also when it was cancelled), before the delegator hands
its result back, so a result the orchestrator saw always has its record. With a `path` every
record is also appended to a JSON Lines file as it is written (`{"record": "subagent", ...}`
and `{"record": "orchestrator", ...}` lines) and flushed; a file that cannot be written is
logged and counted in `write_errors`, and the record is kept in memory: a full disk must not
cost the orchestrator its result.

`usage` is what the runner handed back in `RunResult.usage`; the runner must fill it with the
figures the parent's model broker counted, not with what the child claims.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
from msgspec import Struct

from tether.parent.run.status import TaskStatus
from tether.parent.run.subagent_events import Role
from tether.protocol.messages import FailureKind, Usage

log = logging.getLogger("tether.delegation")


class UsageRecord(
    Struct, frozen=True, kw_only=True, rename="camel", tag="subagent", tag_field="record"
):
    subagent_id: str
    definition: str
    """The definition's type."""
    provider: str
    model: str | None
    """The model the parent billed the run's turns to (its string), when it is known."""
    role: Role
    tool_call_id: str
    label: str
    run_id: str
    agent_id: str | None = None
    """The continuable agent this run belongs to (`ag_…`), for joining with the sessions."""
    read_only: bool
    steps: int
    usage: Usage
    status: TaskStatus
    failure: FailureKind | None = None
    started_at: str
    completed_at: str


class OrchestratorUsage(
    Struct, frozen=True, kw_only=True, rename="camel", tag="orchestrator", tag_field="record"
):
    usage: Usage
    """Tokens of this increment (one orchestrator model turn, say)."""
    at: str


class LedgerTotals(Struct, frozen=True, kw_only=True, rename="camel"):
    runs: int
    subagents: Usage
    orchestrator: Usage
    total: Usage


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
    )


class Ledger:
    def __init__(self, path: str | os.PathLike[str] | None = None, *, fsync: bool = False) -> None:
        self.path = None if path is None else os.fspath(path)
        self.fsync = fsync
        self.records: list[UsageRecord] = []
        self.orchestrator = Usage()
        self.write_errors = 0
        self._listeners: list[Callable[[UsageRecord], None]] = []

    def subscribe(self, listener: Callable[[UsageRecord], None]) -> Callable[[], None]:
        """Call `listener` with every record as it is appended."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def append(self, record: UsageRecord) -> None:
        self.records.append(record)
        self._write(record)
        for listener in list(self._listeners):
            try:
                listener(record)
            except Exception:
                log.exception("a ledger listener failed")

    def add_orchestrator_usage(self, usage: Usage) -> None:
        self.orchestrator = _add(self.orchestrator, usage)
        self._write(OrchestratorUsage(usage=usage, at=now()))

    def totals(self) -> LedgerTotals:
        sub = Usage()
        for r in self.records:
            sub = _add(sub, r.usage)
        return LedgerTotals(
            runs=len(self.records),
            subagents=sub,
            orchestrator=self.orchestrator,
            total=_add(sub, self.orchestrator),
        )

    def for_call(self, tool_call_id: str) -> list[UsageRecord]:
        return [r for r in self.records if r.tool_call_id == tool_call_id]

    def _write(self, entry: UsageRecord | OrchestratorUsage) -> None:
        if self.path is None:
            return
        line = msgspec.json.encode(entry) + b"\n"
        try:
            with open(self.path, "ab") as fh:
                fh.write(line)
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
        except OSError as exc:
            self.write_errors += 1
            log.warning("usage ledger %s: cannot write a record: %s", self.path, exc)


def read_ledger(path: str | os.PathLike[str]) -> list[UsageRecord | OrchestratorUsage]:
    """The entries of a ledger file, in order."""
    decoder = msgspec.json.Decoder(UsageRecord | OrchestratorUsage)
    with open(path, "rb") as fh:
        return [decoder.decode(line) for line in fh if line.strip()]
