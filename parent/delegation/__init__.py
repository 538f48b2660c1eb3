"""The delegation layer: sub-agent definitions, the model-facing task tool, the verifier
policy, admission control, the usage ledger, and the delegator that runs one task call end to
end against an injected runner. See docs/delegation.md.
"""

from __future__ import annotations

from tether.parent.delegation.admission import Gate, TreeBudget
from tether.parent.delegation.builtins import BUILTIN_ROLES, BUILTIN_TYPES, builtin_registry
from tether.parent.delegation.definitions import DefinitionError, Registry, SubagentDefinition
from tether.parent.delegation.delegator import Delegator, Runner, RunRequest
from tether.parent.delegation.events import (
    SubagentCompleted,
    SubagentEvent,
    SubagentProgress,
    SubagentQueued,
    SubagentStarted,
    SubagentStatus,
)
from tether.parent.delegation.files import dump_definitions, load_definitions, load_registry
from tether.parent.delegation.history import fork_history
from tether.parent.delegation.ledger import Ledger, LedgerTotals, UsageRecord, read_ledger
from tether.parent.delegation.output import TaskOutput, TaskStatus, Verification, task_status
from tether.parent.delegation.prompts import ORCHESTRATOR_SYSTEM_PROMPT, SUBAGENT_SYSTEM_PROMPT
from tether.parent.delegation.snapshot import Snapshot, WorkspaceDiff, diff, take_snapshot
from tether.parent.delegation.tool import TaskRequest, TaskTool, task_tool
from tether.parent.delegation.verdict import parse_verdict
from tether.parent.delegation.verification import VerifierPolicy

__all__ = [
    "BUILTIN_ROLES",
    "BUILTIN_TYPES",
    "ORCHESTRATOR_SYSTEM_PROMPT",
    "SUBAGENT_SYSTEM_PROMPT",
    "DefinitionError",
    "Delegator",
    "Gate",
    "Ledger",
    "LedgerTotals",
    "Registry",
    "RunRequest",
    "Runner",
    "Snapshot",
    "SubagentCompleted",
    "SubagentDefinition",
    "SubagentEvent",
    "SubagentProgress",
    "SubagentQueued",
    "SubagentStarted",
    "SubagentStatus",
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
    "parse_verdict",
    "read_ledger",
    "take_snapshot",
    "task_status",
    "task_tool",
]
