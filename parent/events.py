"""What a supervisor tells its listeners: a run started, the child made progress, a run ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.protocol.messages import RunResult


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    pid: int
    argv: tuple[str, ...]


@dataclass(frozen=True)
class ChildEvent:
    """An `agent/event` the child sent, relayed as it arrived."""

    run_id: str
    seq: int
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    result: RunResult


Event = RunStarted | ChildEvent | RunFinished
