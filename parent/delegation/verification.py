"""The verifier policy, owned by the parent.

After a build-mode sub-agent completes, the parent diffs the workspace (`snapshot.py`). When
the change touches at least `min_files` files (added + modified + deleted), or the diff could
not be complete, or it changed any file the user's own tools run (`sensitive`: a git hook,
`.git/config`, `.envrc`, `package.json` scripts, ...: `tether.parent.run.sensitive`) whatever
the count, a verifier sub-agent (explore mode, whatever its definition says) checks it, given
the task, the author's summary, the changed-file list and each sensitive file's content. Its
verdict is parsed by the parent (`tether.parent.run.evidence`): PASS or PARTIAL end the cycle;
FAIL sends the findings back to a build sub-agent of the same type to fix, then the whole
change (measured again from the first snapshot) is verified again, at most `max_fix_cycles`
times. A FAIL after the last cycle is surfaced (`status: "failed_verification"`). A sub-agent
that did not complete is not verified (its status already says it did not finish) unless it
left a sensitive change: that is verified once, with no fix cycle, since what it left runs on
the user's next `git checkout` whether the task finished or not.
"""

from __future__ import annotations

import secrets
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
        return self.enabled and (
            len(change) >= self.min_files or not change.complete or bool(change.sensitive)
        )


def sensitive_section(change: WorkspaceDiff) -> str:
    """The sensitive changes for a verifier's prompt, each with what it holds now between
    markers the author cannot write (a fresh random tag per prompt), so the content cannot
    pose as the prompt's own text."""
    if not change.sensitive:
        return ""
    tag = f"content-{secrets.token_hex(6)}"
    parts = [
        "",
        "Some changed files are run by the user's own tools on their own, outside any sandbox "
        "(git runs hooks and commands named in .git/config on checkout, status and commit; "
        "direnv runs .envrc; npm runs package.json scripts on install; make runs its recipes; "
        "editors run tasks on folder open). For each, decide whether the task needs exactly "
        "this change; a hook, a command in a git config, a script or a task the task did not "
        "ask for is a FAIL whatever else is right. Each is shown with what it holds now:",
    ]
    for c in change.sensitive:
        facts = [c.change, c.runs]
        if c.fs_type is not None:
            facts.append(f"{c.fs_type}, {c.size} bytes{', executable' if c.executable else ''}")
        if c.truncated:
            facts.append("content cut short")
        parts.append(f"- {c.path} ({'; '.join(facts)})")
        if c.change != "deleted":
            parts.append(f"<{tag}>\n{c.content}\n</{tag}>")
    return "\n".join(parts)


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
{sensitive_section(change)}
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
