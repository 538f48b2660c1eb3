"""tether's parent side: the supervisor that spawns, drives and always takes down sub-agents.

The public surface, all importable from here::

    from tether.parent import Supervisor, ChildConfig, PoolSpec, Limits, RunResult

Continuable agents (`Supervisor.spawn_agent`, `send_message`, `list_agents`; `agent_tools`)
are documented in docs/sessions.md. Everything else in `tether.parent.*` is internal and may
change between releases.
"""

from typing import TYPE_CHECKING

from tether.parent.models import ModelProvider, resolve_model
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.config import ChildConfig, PoolSpec
from tether.parent.process.host import host
from tether.parent.process.launchers import Launcher, resolve_launcher
from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.providers.acp_provider import AcpProvider
from tether.parent.run.broker import ApprovePolicy, ParentTool
from tether.parent.run.events import ChildEvent, Event, EventStream, RunFinished, RunStarted
from tether.parent.run.handle import RunHandle
from tether.parent.run.provider import Provider, SubagentRequest, SubagentRun
from tether.parent.run.spec import Continuation
from tether.parent.supervisor import Supervisor
from tether.protocol.messages import (
    AgentDefinition,
    Artifact,
    ChatMessage,
    Failure,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    SkippedPath,
    ToolApproveParams,
    ToolApproveResult,
    ToolCallParams,
    ToolCallResult,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from tether.parent.agents.service import (
        AgentBusy,
        AgentError,
        AgentHandle,
        Agents,
        AgentUnavailable,
        CannotResume,
    )
    from tether.parent.agents.tools import agent_tools

# Continuable agents load the session store (SQLite) on first use, not with this package.
_LAZY = {
    "AgentBusy": "tether.parent.agents.service",
    "AgentError": "tether.parent.agents.service",
    "AgentHandle": "tether.parent.agents.service",
    "AgentUnavailable": "tether.parent.agents.service",
    "Agents": "tether.parent.agents.service",
    "CannotResume": "tether.parent.agents.service",
    "agent_tools": "tether.parent.agents.tools",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AcpProvider",
    "AgentBusy",
    "AgentDefinition",
    "AgentError",
    "AgentHandle",
    "AgentUnavailable",
    "Agents",
    "ApprovePolicy",
    "Artifact",
    "CannotResume",
    "ChatMessage",
    "ChildConfig",
    "ChildEvent",
    "Continuation",
    "DisposePolicy",
    "Event",
    "EventStream",
    "Failure",
    "Launcher",
    "Limits",
    "ModelCompleteParams",
    "ModelCompleteResult",
    "ModelProvider",
    "ParentTool",
    "PoolSpec",
    "Provider",
    "RunFinished",
    "RunHandle",
    "RunResult",
    "RunStarted",
    "ScriptedModel",
    "SkippedPath",
    "SubagentRequest",
    "SubagentRun",
    "Supervisor",
    "ToolApproveParams",
    "ToolApproveResult",
    "ToolCallParams",
    "ToolCallResult",
    "ToolSpec",
    "Usage",
    "agent_tools",
    "host",
    "resolve_launcher",
    "resolve_model",
]
