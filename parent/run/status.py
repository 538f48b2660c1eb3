"""How a run ended, as whoever delegated it reads it: the task statuses.

`status` must never call a cut-off sub-agent `completed`. It distinguishes:

- `completed`: the sub-agent finished its task (`RunResult.success`) and no verification failed;
- `truncated`: a limit ended it: its step or token budget, the wall or idle limit, memory, CPU,
  file size, process count;
- `crashed`: the child died or broke the protocol: a signal, a non-zero exit, garbage or an
  oversize line on the wire;
- `aborted`: it was cancelled (the orchestrator's turn ended, a person interrupted);
- `error`: it could not run or its model failed: a refused call (bad arguments, budget spent),
  a failed spawn, a model error, a runner fault, tether itself failing to build its result;
- `failed_verification`: it finished, but the verifier still answered FAIL after the allowed
  fix cycles;
- `needs_input`: a continuable sub-agent stopped to ask its orchestrator `question`; the answer
  goes to it with `send_message`;
- `conflict`: it finished in a layered workspace, but its change set could not be applied: a
  path it changes changed in the workspace since its layer's base (a sibling's change set
  applied first); nothing of it was applied, and `applied.conflicts` shows both sides.

Only `completed` means the work is done. The delegation layer's `TaskOutput` and the
continuable agents' tools both speak these statuses; they live here, in the run core, so
neither has to import the other.
"""

from __future__ import annotations

from typing import Literal

from tether.protocol.messages import RunResult

TaskStatus = Literal[
    "completed",
    "truncated",
    "crashed",
    "aborted",
    "error",
    "failed_verification",
    "needs_input",
    "conflict",
]
TASK_STATUSES: tuple[str, ...] = TaskStatus.__args__  # type: ignore[attr-defined]

_STATUS_OF_FAILURE: dict[str, TaskStatus] = {
    "budget_exhausted": "truncated",
    "timeout": "truncated",
    "unresponsive": "truncated",
    "oom": "truncated",
    "cpu_limit": "truncated",
    "fsize_limit": "truncated",
    "tasks_limit": "truncated",
    "net_limit": "truncated",
    "crashed": "crashed",
    "killed": "crashed",
    "exit_nonzero": "crashed",
    "protocol": "crashed",
    "oversize": "crashed",
    "cancelled": "aborted",
    "spawn_failed": "error",
    "agent_error": "error",
    "placement_lost": "error",
    "changes_too_large": "error",
    "parent_error": "error",
}


def task_status(result: RunResult) -> TaskStatus:
    """How a run ended, for the model. `completed` needs `success` *and* a completed status;
    anything else is one of the other statuses, never `completed`."""
    if result.success and result.status == "completed" and result.failure is None:
        if result.applied is not None and result.applied.state == "conflict":
            return "conflict"
        return "completed"
    if result.success and result.status == "needs_input" and result.failure is None:
        return "needs_input"  # a continuable sub-agent asks its orchestrator (`question`)
    if result.failure is not None:
        return _STATUS_OF_FAILURE.get(result.failure.kind, "error")
    return "aborted" if result.status == "aborted" else "error"
