"""tether's parent side: the supervisor that spawns, drives and always takes down sub-agents.

`import tether` gives the names most users need (`tether.Supervisor`, `tether.Limits`, ...);
this package's `__all__` is the whole public parent surface, those included::

    from tether.parent import Supervisor, ChildConfig, PoolSpec, Limits, RunResult

Continuable agents (`Supervisor.spawn_agent`, `send_message`, `list_agents`; `agent_tools`)
are documented in docs/sessions.md; traces (`TraceSpec`, `read_trace`, `TraceModel`) in
docs/traces.md. Everything else in `tether.parent.*` is internal and may
change between releases.
"""

# Not even `typing`: a module under this package can be imported for the cost of its own imports.
TYPE_CHECKING = False

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
    from tether.parent.egress.events import NetEvent
    from tether.parent.egress.policy import Credential, NetworkPolicy
    from tether.parent.egress.seat import EgressOptions
    from tether.parent.gateway import Gateway
    from tether.parent.models import ModelProvider, resolve_model
    from tether.parent.models.anthropic import AnthropicModel
    from tether.parent.models.openai import OpenAIModel
    from tether.parent.models.replay import TraceModel
    from tether.parent.models.retry import RetryPolicy
    from tether.parent.models.scripted import ScriptedModel
    from tether.parent.process.config import ChildConfig, PoolSpec
    from tether.parent.process.host import host
    from tether.parent.process.launchers import Launcher, resolve_launcher
    from tether.parent.process.limits import DisposePolicy, Limits
    from tether.parent.providers.acp import AcpDriver, AcpLimits, AcpTask
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

# Every name is loaded on first use: a module under `tether.parent` (the command line's early
# zygote launch, `tether.parent.process.early`) can be imported without the supervisor and its
# libraries, and the session store (SQLite), the HTTP models, the gateway, the ACP driver and the
# egress proxy load only when a program uses them.
_LAZY = {
    "NetEvent": "tether.parent.egress.events",
    "Credential": "tether.parent.egress.policy",
    "NetworkPolicy": "tether.parent.egress.policy",
    "ModelProvider": "tether.parent.models",
    "resolve_model": "tether.parent.models",
    "TraceModel": "tether.parent.models.replay",
    "ScriptedModel": "tether.parent.models.scripted",
    "ChildConfig": "tether.parent.process.config",
    "PoolSpec": "tether.parent.process.config",
    "host": "tether.parent.process.host",
    "Launcher": "tether.parent.process.launchers",
    "resolve_launcher": "tether.parent.process.launchers",
    "DisposePolicy": "tether.parent.process.limits",
    "Limits": "tether.parent.process.limits",
    "AcpProvider": "tether.parent.providers.acp_provider",
    "ApprovePolicy": "tether.parent.run.broker",
    "ParentTool": "tether.parent.run.broker",
    "ChildEvent": "tether.parent.run.events",
    "Event": "tether.parent.run.events",
    "EventStream": "tether.parent.run.events",
    "RunFinished": "tether.parent.run.events",
    "RunStarted": "tether.parent.run.events",
    "RunHandle": "tether.parent.run.handle",
    "Provider": "tether.parent.run.provider",
    "SubagentRequest": "tether.parent.run.provider",
    "SubagentRun": "tether.parent.run.provider",
    "Continuation": "tether.parent.run.spec",
    "Supervisor": "tether.parent.supervisor",
    "read_trace": "tether.parent.trace.reader",
    "TraceSpec": "tether.parent.trace.spec",
    "AgentDefinition": "tether.protocol.messages",
    "Artifact": "tether.protocol.messages",
    "ChatMessage": "tether.protocol.messages",
    "Failure": "tether.protocol.messages",
    "ModelCompleteParams": "tether.protocol.messages",
    "ModelCompleteResult": "tether.protocol.messages",
    "RunResult": "tether.protocol.messages",
    "SkippedPath": "tether.protocol.messages",
    "ToolApproveParams": "tether.protocol.messages",
    "ToolApproveResult": "tether.protocol.messages",
    "ToolCallParams": "tether.protocol.messages",
    "ToolCallResult": "tether.protocol.messages",
    "ToolSpec": "tether.protocol.messages",
    "TraceReport": "tether.protocol.messages",
    "Usage": "tether.protocol.messages",
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
