"""Durable sessions for continuable children: one SQLite database in the state directory, a
session per agent (definition, status, transcript, usage, reports), and at most one live
activation per session across tasks and processes (a lease). See docs/sessions.md.

    async with SessionStore() as store:
        agent = await store.create_agent(definition, label="find the TODOs")
        activation = await store.acquire(agent.id, wait=10)
        if isinstance(activation, Activation):
            async with activation:
                await activation.append([reply, *tool_results], usage)
                await activation.settle("idle", summary="...")
"""

from tether.parent.agents.sessions.errors import (
    LeaseLost,
    SchemaTooNew,
    SessionError,
    StoreBusy,
    StoreCorrupt,
    StoreFull,
    StoreReadOnly,
    StoreUnavailable,
    TranscriptFull,
)
from tether.parent.agents.sessions.ids import BadAgentId, is_agent_id, new_agent_id, parse_agent_id
from tether.parent.agents.sessions.paths import DB_NAME, default_state_dir
from tether.parent.agents.sessions.records import (
    AGENT_STATUSES,
    AgentDetail,
    AgentStatus,
    AgentSummary,
    Busy,
    Holder,
    ReportEntry,
    SettledStatus,
    SpawnSettings,
    StoreBounds,
    TakenOver,
    Unavailable,
)
from tether.parent.agents.sessions.schema import SCHEMA_VERSION
from tether.parent.agents.sessions.store import Activation, LeasePolicy, SessionStore

__all__ = [
    "AGENT_STATUSES",
    "DB_NAME",
    "SCHEMA_VERSION",
    "Activation",
    "AgentDetail",
    "AgentStatus",
    "AgentSummary",
    "BadAgentId",
    "Busy",
    "Holder",
    "LeaseLost",
    "LeasePolicy",
    "ReportEntry",
    "SchemaTooNew",
    "SessionError",
    "SessionStore",
    "SettledStatus",
    "SpawnSettings",
    "StoreBounds",
    "StoreBusy",
    "StoreCorrupt",
    "StoreFull",
    "StoreReadOnly",
    "StoreUnavailable",
    "TakenOver",
    "TranscriptFull",
    "Unavailable",
    "default_state_dir",
    "is_agent_id",
    "new_agent_id",
    "parse_agent_id",
]
