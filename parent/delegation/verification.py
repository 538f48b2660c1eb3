"""The verifier policy, owned by the parent.

After a build-mode sub-agent completes, the parent diffs the workspace (`snapshot.py`). When
the change touches at least `min_files` files (added + modified + deleted), or the diff could
not be complete, a verifier sub-agent (explore mode, whatever its definition says) checks it,
given the task, the author's summary and the changed-file list. Its verdict is parsed by the
parent (`tether.parent.run.evidence`): PASS or PARTIAL end the cycle; FAIL sends the findings back
to a build sub-agent of the same type to fix, then the whole change (measured again from the
first snapshot) is verified again, at most `max_fix_cycles` times. A FAIL after the last cycle is
surfaced (`status: "failed_verification"`). A sub-agent that did not complete is never
verified: its status already says it did not finish.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.parent.delegation.snapshot import WorkspaceDiff
from tether.parent.roles.definitions import SubagentDefinition

DEFAULT_MIN_FILES = 3
DEFAULT_MAX_FIX_CYCLES = 2


@dataclass(frozen=True)
class VerifierPolicy:
    min_files: int = DEFAULT_MIN_FILES
    max_fix_cycles: int = DEFAULT_MAX_FIX_CYCLES
    enabled: bool = True
    verifier: SubagentDefinition | None = None
    """The verifier's definition; `None`: the registry's `verifier` type, else the built-in."""

    def __post_init__(self) -> None:
        if self.min_files < 1:
            raise ValueError(f"min_files must be at least 1, got {self.min_files}")
        if self.max_fix_cycles < 0:
            raise ValueError(f"max_fix_cycles must be 0 or more, got {self.max_fix_cycles}")

    def needs_verification(self, change: WorkspaceDiff) -> bool:
        return self.enabled and (len(change) >= self.min_files or not change.complete)


def verifier_prompt(*, task: str, label: str, author_summary: str, change: WorkspaceDiff) -> str:
    return f"""\
Verify a change another agent made in this workspace.

The task it was given ({label}):
<task>
{task}
</task>

What its author says it did (a claim to check, not a fact):
<author-summary>
{author_summary or "(no summary)"}
</author-summary>

The files the change touched, as measured by comparing the workspace before and after
(A added, M modified, D deleted):
{change.describe() or "(none)"}

Read every changed file and judge whether the change does what the task asked, completely
and correctly. End your summary with exactly one line: VERDICT: PASS, VERDICT: FAIL or
VERDICT: PARTIAL."""


def fix_prompt(*, task: str, findings: str, change: WorkspaceDiff, cycle: int) -> str:
    return f"""\
A change made for the task below was checked by a verifier, who found problems. Fix them.
(Fix cycle {cycle}; the change will be verified again.)

The original task:
<task>
{task}
</task>

The files changed so far (A added, M modified, D deleted):
{change.describe() or "(none)"}

The verifier's findings:
<findings>
{findings or "(the verifier gave no details)"}
</findings>

Fix every finding that is right; if you believe one is wrong, leave that part and say why in
your summary. Keep the change to what the task asks for."""
