"""tether's parent side: the supervisor that spawns, drives and always takes down sub-agents.

`import tether` gives the names most users need (`tether.Supervisor`, `tether.Limits`, ...);
this package's `__all__` is the whole public parent surface, those included::

    from tether.parent import Supervisor, ChildConfig, PoolSpec, Limits, RunResult

Continuable agents (`Supervisor.spawn_agent`, `send_message`, `list_agents`; `agent_tools`)
are documented in docs/sessions.md; traces (`TraceSpec`, `read_trace`, `TraceModel`) in
docs/traces.md. Everything else in `tether.parent.*` is internal and may
change between releases.
"""

from typing import TYPE_CHECKING

from tether.parent.egress.events import NetEvent
from tether.parent.egress.policy import Credential, NetworkPolicy
from tether.parent.models import ModelProvider, resolve_model
from tether.parent.models.replay import TraceModel
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
from tether.parent.trace.reader import read_trace
from tether.parent.trace.spec import TraceSpec
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
    TraceReport,
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
    from tether.parent.agents.sessions import Activation, SessionStore
    from tether.parent.agents.tools import agent_tools
    from tether.parent.egress.addresses import NameTable
    from tether.parent.egress.seat import EgressOptions
    from tether.parent.gateway import Gateway
    from tether.parent.models.anthropic import AnthropicModel
    from tether.parent.models.openai import OpenAIModel
    from tether.parent.models.retry import RetryPolicy
    from tether.parent.providers.acp import AcpDriver, AcpLimits, AcpTask

# Continuable agents load the session store (SQLite) on first use, not with this package; the
# HTTP models, the gateway, the ACP driver and the egress proxy load theirs on first use too.
_LAZY = {
    "AcpDriver": "tether.parent.providers.acp",
    "AcpLimits": "tether.parent.providers.acp",
    "AcpTask": "tether.parent.providers.acp",
    "Activation": "tether.parent.agents.sessions",
    "AnthropicModel": "tether.parent.models.anthropic",
    "EgressOptions": "tether.parent.egress.seat",
    "NameTable": "tether.parent.egress.addresses",
    "Gateway": "tether.parent.gateway",
    "OpenAIModel": "tether.parent.models.openai",
    "RetryPolicy": "tether.parent.models.retry",
    "SessionStore": "tether.parent.agents.sessions",
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
    "AcpDriver",
    "AcpLimits",
    "AcpProvider",
    "AcpTask",
    "Activation",
    "AgentBusy",
    "AgentDefinition",
    "AgentError",
    "AgentHandle",
    "AgentUnavailable",
    "Agents",
    "AnthropicModel",
    "ApprovePolicy",
    "Artifact",
    "CannotResume",
    "ChatMessage",
    "ChildConfig",
    "ChildEvent",
    "Continuation",
    "Credential",
    "DisposePolicy",
    "EgressOptions",
    "Event",
    "EventStream",
    "Failure",
    "Gateway",
    "Launcher",
    "Limits",
    "ModelCompleteParams",
    "ModelCompleteResult",
    "ModelProvider",
    "NameTable",
    "NetEvent",
    "NetworkPolicy",
    "OpenAIModel",
    "ParentTool",
    "PoolSpec",
    "Provider",
    "RetryPolicy",
    "RunFinished",
    "RunHandle",
    "RunResult",
    "RunStarted",
    "ScriptedModel",
    "SessionStore",
    "SkippedPath",
    "SubagentRequest",
    "SubagentRun",
    "Supervisor",
    "ToolApproveParams",
    "ToolApproveResult",
    "ToolCallParams",
    "ToolCallResult",
    "ToolSpec",
    "TraceModel",
    "TraceReport",
    "TraceSpec",
    "Usage",
    "agent_tools",
    "host",
    "read_trace",
    "resolve_launcher",
    "resolve_model",
]
