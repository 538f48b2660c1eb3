"""What the delegator tells its listeners about sub-agents, as typed event objects.

Each event has a `name` (`subagent.queued`, `subagent.started`, `subagent.progress`,
`subagent.completed`) and the sub-agent's `id`, `type` and `label`. `subagent.progress` relays
one event of the child (its `kind` and `data`, as in `agent/event`: `step`, `tool_call`,
`text`, `heartbeat`, ...) with the running figures a live view needs. An orchestrated run puts
them on the supervisor's stream beside its own `RunStarted` / `ChildEvent` / `RunFinished`,
each with `parent_run_id`, the orchestrator's run id (the sub-agent's own runs appear there
too, as plain runs; `subagent.completed` names the sub-agent's `run_id`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tether.parent.run.status import TaskStatus

Role = Literal["task", "follow_up", "verifier", "fix"]
"""Why a sub-agent ran: the task call itself, a follow-up message to a continuable sub-agent
(`send_message`), a verification of a change, or a fix."""
WaitingFor = Literal["slot", "workspace"]
"""What a queued sub-agent waits for: a free slot under the concurrency cap, or its turn to
change the shared workspace (build-mode sub-agents change it one at a time)."""


@dataclass(frozen=True)
class SubagentQueued:
    name: ClassVar[str] = "subagent.queued"
    id: str
    type: str
    label: str
    tool_call_id: str
    position: int
    """1 = next to start."""
    waiting_for: WaitingFor
    limit: int
    """The cap it waits under (concurrent sub-agents, or 1 writer)."""
    parent_run_id: str = ""
    """The run whose task call this is (the orchestrator's), when the caller says."""


@dataclass(frozen=True)
class SubagentStarted:
    name: ClassVar[str] = "subagent.started"
    id: str
    type: str
    label: str
    tool_call_id: str
    role: Role
    read_only: bool
    prompt: str = ""
    """What the sub-agent was asked: the task's prompt, the follow-up message, the verifier's
    or fix prompt."""
    run_id: str = ""
    """The run that carries it (a warm follow-up: its agent's live run)."""
    agent_id: str = ""
    """The continuable agent it is, when it is one (ledger and sessions join on it)."""
    parent_run_id: str = ""


@dataclass(frozen=True)
class SubagentProgress:
    name: ClassVar[str] = "subagent.progress"
    id: str
    type: str
    label: str
    kind: str
    data: dict[str, Any]
    step: int
    last_tool: str | None
    elapsed: float
    tokens: int
    """Input + output tokens counted so far (as the runner reported them)."""
    parent_run_id: str = ""


@dataclass(frozen=True)
class SubagentCompleted:
    name: ClassVar[str] = "subagent.completed"
    id: str
    type: str
    label: str
    tool_call_id: str
    role: Role
    success: bool
    status: TaskStatus
    message: str
    run_id: str = ""
    agent_id: str = ""
    parent_run_id: str = ""


SubagentEvent = SubagentQueued | SubagentStarted | SubagentProgress | SubagentCompleted


@dataclass(frozen=True)
class SubagentStatus:
    """One live sub-agent, for `list`-style queries (`Delegator.status()`)."""

    id: str
    type: str
    label: str
    tool_call_id: str
    role: Role
    state: Literal["queued", "running"]
    position: int | None
    """Queue position while queued."""
    elapsed: float
    """Seconds since it was queued (queued) or started (running)."""
    step: int
    last_tool: str | None
    tokens: int
