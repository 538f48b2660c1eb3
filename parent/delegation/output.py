"""What a task call gives back to the model: `TaskOutput`, and how a `RunResult` maps onto it.

The statuses (`TaskStatus`, `task_status`) are the run core's (`run/status.py`); with a
verification, `verification.verdict` says how far a completed change was checked (`PARTIAL`:
not verified).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec
from msgspec import Struct, field

from tether.parent.run import evidence
from tether.parent.run.status import TaskStatus
from tether.protocol.messages import (
    ApplyOutcome,
    Artifact,
    ChangeSet,
    FailureKind,
    SensitiveChange,
    SkippedPath,
    ToolCallResult,
)

Verdict = evidence.Verdict
COMPACT_SUMMARY_CHARS = 2000
MODEL_DIFF_BYTES = 64 * 1024
"""The most unified diff text a task output hands the model (the change set keeps the rest)."""
MODEL_CHANGES = 500
"""The most changed paths a task output lists for the model (`changes.files` counts all)."""
"""The longest summary a compact form keeps: what survives compaction stays small, whatever a
sub-agent wrote (the full summary was in the result the model read first)."""
ErrorCode = Literal[
    "invalid_arguments", "budget_spent", "runner_failed", "unknown_agent", "cannot_continue"
]


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


class AttemptReport(Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One attempt of a task call with `attempts`: how it ended, what it changed."""

    attempt: int
    """1-based."""
    status: TaskStatus
    summary: str = ""
    verdict: Verdict | None = None
    changed_files: list[str] = field(default_factory=list)
    subagent_id: str = ""


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
    sensitive_changes: list[SensitiveChange] = field(default_factory=list)
    """Files the user's own tools run (a git hook, `.git/config`, `.envrc`, ...) that the
    parent saw change, with their content; a build-mode task with any is always verified."""
    verification: Verification | None = None
    subagent_id: str = ""
    question: str | None = None
    """With `needs_input`: what a continuable sub-agent asks (answer it with send_message)."""
    workspace_mode: str = "shared"
    """`layered`: the sub-agent worked in a layer of its own; `changes` is what it changed
    (diffs cut to `MODEL_DIFF_BYTES` here), `applied` what became of it."""
    changes: ChangeSet | None = None
    applied: ApplyOutcome | None = None
    attempts: list[AttemptReport] = field(default_factory=list)
    """With several attempts: each one, in attempt order."""
    taken: int | None = None
    """The attempt taken (1-based): the rest of this output is its."""
    taken_because: str = ""

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
        """What survives compaction of the orchestrator's transcript: the summary (at most
        `COMPACT_SUMMARY_CHARS`), the status and each artifact's path, size and type, so every
        delivered file can still be found and read; the paths of the sensitive changes, so they
        are not forgotten; and the sub-agent's id and its question when it has them, so it can
        still be continued."""
        summary = self.summary
        if len(summary) > COMPACT_SUMMARY_CHARS:
            summary = summary[: COMPACT_SUMMARY_CHARS - 1] + "…"
        out: dict[str, Any] = {
            "summary": summary,
            "status": self.status,
            "artifacts": [
                {"path": a.path, "size": a.size, "fsType": a.fs_type} for a in self.artifacts
            ],
        }
        if self.sensitive_changes:
            out["sensitiveChanges"] = [c.path for c in self.sensitive_changes]
        if self.changes is not None:
            out["changes"] = [f"{c.change} {c.path}" for c in self.changes.changes]
        if self.applied is not None:
            out["applied"] = self.applied.state
        if self.taken is not None:
            out["taken"] = self.taken
        if self.subagent_id:
            out["subagentId"] = self.subagent_id
        if self.question is not None:
            out["question"] = self.question
        return out

    def tool_result(self, head: Mapping[str, Any] | None = None) -> ToolCallResult:
        """What a parent tool (`task`, `send_message`) answers the child with: the full form
        for the model to read, and the compact form for the child to keep when it compacts its
        transcript (`ToolCallResult.compact`) — none for a refused call, which delivered
        nothing. `head`: fields put before both (send_message's `agentId`)."""
        first = dict(head or {})
        compact = None
        if self.error is None:
            compact = msgspec.json.encode({**first, **self.compact()}).decode()
        return ToolCallResult(
            content=msgspec.json.encode({**first, **self.to_dict()}).decode(),
            is_error=self.error is not None,
            compact=compact,
        )


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


def for_model(cs: ChangeSet, budget: int = MODEL_DIFF_BYTES) -> ChangeSet:
    """`cs` with its diffs cut to `budget` bytes in all and at most `MODEL_CHANGES` entries
    (`files` still counts them all): what a task output shows the model."""
    kept = []
    for c in cs.changes[:MODEL_CHANGES]:
        if c.diff is not None:
            size = len(c.diff.encode())
            if size > budget:
                c = msgspec.structs.replace(
                    c, diff=None, note=c.note or "diff left out: past what a task output shows"
                )
            else:
                budget -= size
        kept.append(c)
    return msgspec.structs.replace(cs, changes=kept)
