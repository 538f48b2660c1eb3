"""The delegation layer: sub-agent definitions, the model-facing task tool, the verifier
policy, admission control, the usage ledger, the delegator that runs one task call end to end
against a runner, the supervisor runner (each sub-agent a supervised child) and the
orchestrator (`orchestrate`, `Supervisor.orchestrate`). See docs/delegation.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.parent.delegation.admission import Slots, TreeBudget
    from tether.parent.delegation.delegator import Delegator, Runner, RunRequest
    from tether.parent.delegation.files import dump_definitions, load_definitions, load_registry
    from tether.parent.delegation.history import fork_history
    from tether.parent.delegation.ledger import Ledger, LedgerTotals, UsageRecord, read_ledger
    from tether.parent.delegation.orchestrator import (
        Orchestration,
        Running,
        TaskCall,
        orchestrate,
    )
    from tether.parent.delegation.output import TaskOutput, Verification
    from tether.parent.delegation.runner import SupervisorRunner
    from tether.parent.delegation.snapshot import Snapshot, WorkspaceDiff, diff, take_snapshot
    from tether.parent.delegation.tool import TaskRequest, TaskTool, task_tool
    from tether.parent.delegation.verification import VerifierPolicy
    from tether.parent.roles.builtins import BUILTIN_ROLES, BUILTIN_TYPES, builtin_registry
    from tether.parent.roles.definitions import DefinitionError, Registry, SubagentDefinition
    from tether.parent.roles.prompts import ORCHESTRATOR_SYSTEM_PROMPT, SUBAGENT_SYSTEM_PROMPT
    from tether.parent.run.evidence import parse_verdict
    from tether.parent.run.status import TaskStatus, task_status
    from tether.parent.run.subagent_events import (
        SubagentCompleted,
        SubagentEvent,
        SubagentProgress,
        SubagentQueued,
        SubagentStarted,
        SubagentStatus,
    )

_LAZY: dict[str, str] = {
    "BUILTIN_ROLES": "tether.parent.roles.builtins",
    "BUILTIN_TYPES": "tether.parent.roles.builtins",
    "DefinitionError": "tether.parent.roles.definitions",
    "Delegator": "tether.parent.delegation.delegator",
    "Slots": "tether.parent.delegation.admission",
    "Ledger": "tether.parent.delegation.ledger",
    "LedgerTotals": "tether.parent.delegation.ledger",
    "ORCHESTRATOR_SYSTEM_PROMPT": "tether.parent.roles.prompts",
    "Orchestration": "tether.parent.delegation.orchestrator",
    "Registry": "tether.parent.roles.definitions",
    "RunRequest": "tether.parent.delegation.delegator",
    "Running": "tether.parent.delegation.orchestrator",
    "Runner": "tether.parent.delegation.delegator",
    "SUBAGENT_SYSTEM_PROMPT": "tether.parent.roles.prompts",
    "Snapshot": "tether.parent.delegation.snapshot",
    "SubagentCompleted": "tether.parent.run.subagent_events",
    "SubagentDefinition": "tether.parent.roles.definitions",
    "SubagentEvent": "tether.parent.run.subagent_events",
    "SubagentProgress": "tether.parent.run.subagent_events",
    "SubagentQueued": "tether.parent.run.subagent_events",
    "SubagentStarted": "tether.parent.run.subagent_events",
    "SubagentStatus": "tether.parent.run.subagent_events",
    "SupervisorRunner": "tether.parent.delegation.runner",
    "TaskCall": "tether.parent.delegation.orchestrator",
    "TaskOutput": "tether.parent.delegation.output",
    "TaskRequest": "tether.parent.delegation.tool",
    "TaskStatus": "tether.parent.run.status",
    "TaskTool": "tether.parent.delegation.tool",
    "TreeBudget": "tether.parent.delegation.admission",
    "UsageRecord": "tether.parent.delegation.ledger",
    "Verification": "tether.parent.delegation.output",
    "VerifierPolicy": "tether.parent.delegation.verification",
    "WorkspaceDiff": "tether.parent.delegation.snapshot",
    "builtin_registry": "tether.parent.roles.builtins",
    "diff": "tether.parent.delegation.snapshot",
    "dump_definitions": "tether.parent.delegation.files",
    "fork_history": "tether.parent.delegation.history",
    "load_definitions": "tether.parent.delegation.files",
    "load_registry": "tether.parent.delegation.files",
    "orchestrate": "tether.parent.delegation.orchestrator",
    "parse_verdict": "tether.parent.run.evidence",
    "read_ledger": "tether.parent.delegation.ledger",
    "take_snapshot": "tether.parent.delegation.snapshot",
    "task_status": "tether.parent.run.status",
    "task_tool": "tether.parent.delegation.tool",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "BUILTIN_ROLES",
    "BUILTIN_TYPES",
    "ORCHESTRATOR_SYSTEM_PROMPT",
    "SUBAGENT_SYSTEM_PROMPT",
    "DefinitionError",
    "Delegator",
    "Ledger",
    "LedgerTotals",
    "Orchestration",
    "Registry",
    "RunRequest",
    "Runner",
    "Running",
    "Slots",
    "Snapshot",
    "SubagentCompleted",
    "SubagentDefinition",
    "SubagentEvent",
    "SubagentProgress",
    "SubagentQueued",
    "SubagentStarted",
    "SubagentStatus",
    "SupervisorRunner",
    "TaskCall",
    "TaskOutput",
    "TaskRequest",
    "TaskStatus",
    "TaskTool",
    "TreeBudget",
    "UsageRecord",
    "Verification",
    "VerifierPolicy",
    "WorkspaceDiff",
    "builtin_registry",
    "diff",
    "dump_definitions",
    "fork_history",
    "load_definitions",
    "load_registry",
    "orchestrate",
    "parse_verdict",
    "read_ledger",
    "take_snapshot",
    "task_status",
    "task_tool",
]
