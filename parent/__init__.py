"""tether's parent side: the supervisor that spawns, drives and always takes down sub-agents.

The public surface, all importable from here::

    from tether.parent import Supervisor, ChildConfig, PoolSpec, Limits, RunResult

Everything else in `tether.parent.*` is internal and may change between releases.
"""

from tether.parent.broker import ApprovePolicy, ParentTool
from tether.parent.config import ChildConfig, PoolSpec
from tether.parent.events import ChildEvent, Event, EventStream, RunFinished, RunStarted
from tether.parent.host import host
from tether.parent.launchers import Launcher, resolve_launcher
from tether.parent.limits import DisposePolicy, Limits
from tether.parent.models import ModelProvider, resolve_model
from tether.parent.models.scripted import ScriptedModel
from tether.parent.providers.acp_provider import AcpProvider
from tether.parent.providers.base import Provider, SubagentRequest, SubagentRun
from tether.parent.runs import RunHandle
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

__all__ = [
    "AcpProvider",
    "AgentDefinition",
    "ApprovePolicy",
    "Artifact",
    "ChatMessage",
    "ChildConfig",
    "ChildEvent",
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
    "host",
    "resolve_launcher",
    "resolve_model",
]
