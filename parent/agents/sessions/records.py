"""What the session store hands out: agent summaries and details, reports, lease outcomes, and
the bounds it keeps stored sizes within.

Statuses, with continuation in mind (what the orchestrator may do next):

| status | meaning | next |
|---|---|---|
| `running` | an activation is working on a message | wait; a second message is serialized behind it |
| `idle` | the last message was answered; the child may still be warm | `send_message` continues it |
| `needs_input` | the last activation ended with a question for the orchestrator (`question`) | `send_message` answers it |
| `failed` | the last activation failed (crash, limit, agent error) | `send_message` retries from the stored transcript |
| `aborted` | the last activation was cancelled | `send_message` resumes it |
| `interrupted` | an activation ended without an answer: its owner died or let go mid-run | `send_message` resumes it cold from its last stored turn |
| `closed` | the session was closed; it is kept for inspection | nothing: it cannot be activated again |

`interrupted` is also what a reader shows for a session stored as `running` whose lease holder
is dead or stale (a SIGKILLed parent cannot write it down itself).
"""  # noqa: E501 - a table

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

import msgspec

from tether.protocol.messages import AgentDefinition, ChatMessage, Usage

AgentStatus = Literal[
    "running", "idle", "needs_input", "failed", "aborted", "interrupted", "closed"
]
AGENT_STATUSES: tuple[str, ...] = AgentStatus.__args__  # type: ignore[attr-defined]

SettledStatus = Literal["idle", "needs_input", "failed", "aborted", "interrupted"]
"""What an activation may leave a session in when a run answers or the activation ends."""
SETTLED_STATUSES: tuple[str, ...] = SettledStatus.__args__  # type: ignore[attr-defined]

HolderState = Literal["alive", "dead", "stale", "unknown"]


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """Base of the store's records: immutable, encodable with msgspec (the CLI prints JSON)."""


class Holder(Record, frozen=True):
    """Who holds an agent's activation lease, as a reader saw it."""

    pid: int
    since: float
    """Wall-clock time the lease was taken (Unix seconds)."""
    heartbeat_age: float
    """Seconds since the holder's last heartbeat."""
    state: HolderState
    """`alive` (checked in /proc, heartbeat fresh), `dead` (pid gone or reused), `stale`
    (heartbeat past the bound), `unknown` (another pid namespace or boot; heartbeat fresh)."""


class AgentSummary(Record, frozen=True):
    """One row of `list_agents`: cheap, no transcript."""

    id: str
    agent_type: str
    provider: str
    label: str
    status: AgentStatus
    """The status a reader should act on (`interrupted` for a `running` session whose holder
    is gone); `stored_status` is what was last written."""
    stored_status: AgentStatus
    last_summary: str
    question: str | None
    usage: Usage
    message_count: int
    transcript_bytes: int
    activations: int
    parent_run: str | None
    workspace: str
    created_at: float
    updated_at: float
    activation_started_at: float | None
    activation_ended_at: float | None
    holder: Holder | None


class SpawnSettings(Record, frozen=True):
    """How to start a child for an agent again (a cold resume, in any process), as far as it
    can be written down: strings and numbers only. Never an environment variable's value (the
    child's `env` may hold secrets) nor an object (a model provider, a launcher object); what
    could not be stored is named in `missing`, and a process resuming the agent must supply it.
    """

    model: str | None = None
    """The model string the agent ran with (`None`: the definition's, or an object)."""
    limits: dict[str, int | float] = msgspec.field(default_factory=dict)
    """The `Limits` set (wall, idle, memory, cpu, processes, open_files, file_size)."""
    command: list[str] = msgspec.field(default_factory=list)
    """The child command; empty: tether's own child."""
    launcher: str = "local"
    containment: str = "auto"
    spawner: str = "exec"
    transport: str = "process"
    """How the agent's children are obtained (`ChildConfig.transport`: `process`, `memory`)."""
    pass_env: list[str] = msgspec.field(default_factory=list)
    keep_alive: float = 0.0
    token_total: int | None = None
    """The session's total token budget, across activations (`None`: none)."""
    description: str = ""
    missing: list[str] = msgspec.field(default_factory=list)
    """What the first process had that is not stored (`"model"`, `"env"`, `"launcher"`)."""


class ReportEntry(Record, frozen=True):
    seq: int
    at: float
    text: str


class AgentDetail(Record, frozen=True):
    """One agent in full: `show ID`, and what a cold resume reads."""

    summary: AgentSummary
    definition: AgentDefinition
    transcript: list[ChatMessage]
    transcript_offset: int
    """How many earlier messages were left out (`show(..., tail=N)`); 0 for the whole."""
    reports: list[ReportEntry]
    reports_dropped: int
    """Reports dropped, oldest first, to keep within the bound."""


class Busy(Record, frozen=True):
    """The agent's activation is held by someone else (another task or another process)."""

    agent_id: str
    holder: Holder

    @property
    def message(self) -> str:
        since = dt.datetime.fromtimestamp(self.holder.since, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (
            f"agent {self.agent_id} is already active (owner pid {self.holder.pid}, since "
            f"{since}, last heartbeat {self.holder.heartbeat_age:.1f} s ago)"
        )


class Unavailable(Record, frozen=True):
    """The agent cannot be activated at all: no such agent, or its session is closed."""

    agent_id: str
    reason: Literal["unknown_agent", "closed"]

    @property
    def message(self) -> str:
        if self.reason == "closed":
            return f"agent {self.agent_id} is closed and cannot be continued"
        return f"no agent {self.agent_id} (list_agents shows the ones there are)"


class TakenOver(Record, frozen=True):
    """Whose lease a successful acquisition replaced, and why."""

    pid: int
    since: float
    why: Literal["owner_dead", "stale", "orphaned"]
    """`orphaned`: this process's own lease, left by a release that failed."""


@dataclass(frozen=True)
class StoreBounds:
    """How much the store keeps per agent, and what happens past it.

    - a message whose encoding is over `message_bytes` is stored cut: its content is truncated
      (with a note saying how much went), and if its tool calls alone are still too large their
      arguments are replaced by a note; the transcript stays well-formed (every tool call keeps
      its id);
    - a turn that would take the transcript past `transcript_bytes` is refused whole
      (`TranscriptFull`) and nothing of it is stored: the activation should end; the stored
      transcript stays the last one within the bound;
    - reports past `reports` entries: the oldest are dropped (counted in `reports_dropped`);
      each report's text is cut at `report_chars`;
    - label, summary and question are cut at their bounds.
    """

    message_bytes: int = 2 << 20
    transcript_bytes: int = 64 << 20
    reports: int = 1000
    report_chars: int = 16 << 10
    label_chars: int = 200
    summary_chars: int = 64 << 10
    question_chars: int = 16 << 10

    def __post_init__(self) -> None:
        for name in (
            "message_bytes",
            "transcript_bytes",
            "reports",
            "report_chars",
            "label_chars",
            "summary_chars",
            "question_chars",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"StoreBounds.{name} must be positive")
        if self.message_bytes < 1024:
            raise ValueError("StoreBounds.message_bytes must be at least 1024")
