"""What the delegation does with a layered sub-agent's change set: the diff the verifier and the
model read, and whether it is applied.

A layered build job's change is its change set (`RunResult.changes`, the parent's own
measure of the layer), not a before/after snapshot of the shared workspace: `changed_files`
gives it the shape the verifier policy and prompts take (`WorkspaceDiff`: a rename is the old
path deleted and the new one added). `decide` says whether the policy applies it: `never`
keeps it, `on_success` applies a completed run's unless its verifier answered FAIL,
`on_verified` only after a PASS.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.parent.delegation.output import Verification
from tether.parent.delegation.snapshot import WorkspaceDiff
from tether.protocol.messages import ApplyPolicy, ChangeSet, SensitiveChange


def changed_files(cs: ChangeSet, sensitive: Sequence[SensitiveChange] = ()) -> WorkspaceDiff:
    added = [c.path for c in cs.changes if c.change in ("added", "renamed")]
    modified = [c.path for c in cs.changes if c.change == "modified"]
    deleted = [c.path for c in cs.changes if c.change == "deleted"]
    deleted += [c.old_path for c in cs.changes if c.change == "renamed" and c.old_path]
    return WorkspaceDiff(
        added=tuple(sorted(added)),
        modified=tuple(sorted(modified)),
        deleted=tuple(sorted(deleted)),
        sensitive=tuple(sensitive),
    )


def decide(
    policy: ApplyPolicy, *, completed: bool, verification: Verification | None
) -> tuple[bool, str]:
    """Whether the change set is applied, and why not when it is not."""
    if policy == "never":
        return False, "kept, not applied (apply='never'): the caller applies it"
    if not completed:
        return False, "not applied: the sub-agent did not finish"
    verdict = verification.verdict if verification is not None else None
    if verdict == "FAIL":
        return False, "not applied: the verifier answered FAIL"
    if policy == "on_verified" and verdict != "PASS":
        why = "it was not verified" if verdict is None else f"the verifier answered {verdict}"
        return False, f"not applied (apply='on_verified'): {why}"
    return True, ""
