"""What a task call gives back to the model: `TaskOutput`, and how a `RunResult` maps onto it.

`status` must never call a cut-off sub-agent `completed`. It distinguishes:

- `completed`: the sub-agent finished its task (`RunResult.success`) and no verification failed;
- `truncated`: a limit ended it: its step or token budget, the wall or idle limit, memory, CPU,
  file size, process count;
- `crashed`: the child died or broke the protocol: a signal, a non-zero exit, garbage or an
  oversize line on the wire;
- `aborted`: it was cancelled (the orchestrator's turn ended, a person interrupted);
- `error`: it could not run or its model failed: a refused call (bad arguments, budget spent),
  a failed spawn, a model error, a runner fault;
- `failed_verification`: it finished, but the verifier still answered FAIL after the allowed
  fix cycles;
- `needs_input`: a continuable sub-agent stopped to ask its orchestrator `question`; the answer
  goes to it with `send_message` (`agents/tools.py`).

Only `completed` means the work is done; with a verification, `verification.verdict` says how
far it was checked (`PARTIAL`: not verified).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct, field

from tether.parent.run import evidence
from tether.protocol.messages import Artifact, FailureKind, RunResult, SkippedPath

TaskStatus = Literal[
    "completed", "truncated", "crashed", "aborted", "error", "failed_verification", "needs_input"
]
TASK_STATUSES: tuple[str, ...] = TaskStatus.__args__  # type: ignore[attr-defined]
Verdict = evidence.Verdict
ErrorCode = Literal[
    "invalid_arguments", "budget_spent", "runner_failed", "unknown_agent", "cannot_continue"
]

_STATUS_OF_FAILURE: dict[str, TaskStatus] = {
    "budget_exhausted": "truncated",
    "timeout": "truncated",
    "unresponsive": "truncated",
    "oom": "truncated",
    "cpu_limit": "truncated",
    "fsize_limit": "truncated",
    "tasks_limit": "truncated",
    "crashed": "crashed",
    "killed": "crashed",
    "exit_nonzero": "crashed",
    "protocol": "crashed",
    "oversize": "crashed",
    "cancelled": "aborted",
    "spawn_failed": "error",
    "agent_error": "error",
    "placement_lost": "error",
}


def task_status(result: RunResult) -> TaskStatus:
    """How a run ended, for the model. `completed` needs `success` *and* a completed status;
    anything else is one of the other statuses, never `completed`."""
    if result.success and result.status == "completed" and result.failure is None:
        return "completed"
    if result.success and result.status == "needs_input" and result.failure is None:
        return "needs_input"  # a continuable sub-agent asks its orchestrator (`question`)
    if result.failure is not None:
        return _STATUS_OF_FAILURE.get(result.failure.kind, "error")
    return "aborted" if result.status == "aborted" else "error"


class ArgumentProblem(Struct, frozen=True, kw_only=True):
    argument: str
    """The argument at fault (`""` when it is the arguments object as a whole)."""
    problem: str


class Verification(Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    verdict: Verdict
    fix_cycles: int = 0
    """How many fix-and-reverify cycles ran."""
    findings: str = ""
    """The last verifier's summary (its findings), as it wrote it."""
    note: str = ""
    """Why the verdict is what it is when the verifier did not decide (it failed, say)."""


class TaskOutput(Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    summary: str
    artifacts: list[Artifact]
    status: TaskStatus
    steps: int
    """Model turns, summed over every run of this call (task, verifier, fixes)."""
    skipped: list[SkippedPath] = field(default_factory=list)
    message: str = ""
    """Why it ended when it did not complete, in one sentence."""
    failure: FailureKind | None = None
    error: ErrorCode | None = None
    problems: list[ArgumentProblem] = field(default_factory=list)
    changed_files: list[str] = field(default_factory=list)
    """Files the parent saw change in the workspace (build mode), relative to it."""
    verification: Verification | None = None
    subagent_id: str = ""
    question: str | None = None
    """With `needs_input`: what a continuable sub-agent asks (answer it with send_message)."""

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form handed to the model as the tool's result."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    def compact(self) -> dict[str, Any]:
        """What survives compaction of the orchestrator's transcript: the summary, the status
        and each artifact's path, size and type, so every delivered file can still be read."""
        return {
            "summary": self.summary,
            "status": self.status,
            "artifacts": [
                {"path": a.path, "size": a.size, "fsType": a.fs_type} for a in self.artifacts
            ],
        }


def refused(error: ErrorCode, message: str, problems: list[ArgumentProblem] = []) -> TaskOutput:  # noqa: B006
    """The result of a call that ran nothing: readable by the model, never an exception."""
    return TaskOutput(
        summary=f"The task call was refused; nothing was run. {message}",
        artifacts=[],
        status="error",
        steps=0,
        message=message,
        error=error,
        problems=list(problems),
    )
