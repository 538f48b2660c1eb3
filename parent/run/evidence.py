"""What the parent checks itself instead of believing the child: artifacts and verdicts.

Artifacts: every path a child reports is looked up again by the parent under the run's
workspace with tether's one confined path walk (`tether.contain.confined`, the same walk the
child's `complete` described it with): component by component from an open directory, symlinks
followed by the walk itself and never out of the workspace, so a link swapped in by the child
cannot lead the parent out. What is there decides the artifact's path, type, size and time (a
symbolic link is reported as one, and must lead to something inside that exists); a path
outside the workspace, missing, or not a file, directory or symbolic link moves to `skipped`
with the reason.

A result is checked again when it is delivered (`recheck`: handed to an orchestrator's model,
an MCP client, the `tether agents` command): an artifact whose type, size or modification time
is no longer what the result says moves to `skipped`, so nothing that changed after the check
reaches the caller as delivered.

Verdicts: a verifier's verdict is parsed by the parent from the run's final text; whatever
verdict field a child sends is ignored. A verdict line is `VERDICT:` then `PASS`, `FAIL` or
`PARTIAL`, case-insensitive, with spaces or markdown emphasis between them (`**VERDICT:**
PASS`). The word must end there: `PASSED`, `PASS/FAIL`, `PASS-ish` or the template
`PASS|FAIL|PARTIAL` echoed back are not verdicts. No verdict line: `PARTIAL` (unverified), never
a false `PASS`. Several verdict lines: the most severe wins (`FAIL` over `PARTIAL` over `PASS`):
a verifier that wrote FAIL anywhere has not passed the change, whatever it wrote after.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from typing import Literal, cast

import msgspec

from tether.contain.confined import ConfinedRoot, Refused, Why
from tether.protocol.messages import Artifact, RunResult, SkippedPath

Verdict = Literal["PASS", "FAIL", "PARTIAL"]

VERDICT_LINE = re.compile(r"VERDICT:[\s*_`]*(PASS|FAIL|PARTIAL)(?![\w|/-])", re.IGNORECASE)
_SEVERITY: dict[str, int] = {"PASS": 0, "PARTIAL": 1, "FAIL": 2}


def verdicts(text: str) -> list[Verdict]:
    """Every verdict the text states, in order."""
    found: list[Verdict] = []
    for m in VERDICT_LINE.finditer(text):
        word = m.group(1).upper()  # Unicode case folding may match e.g. U+017F for "S"
        if word in _SEVERITY:
            found.append(cast(Verdict, word))
    return found


def parse_verdict(text: str) -> Verdict:
    """The verdict of a verifier's final text (see the module docstring)."""
    found = verdicts(text)
    if not found:
        return "PARTIAL"
    return max(found, key=_SEVERITY.__getitem__)


def check_artifacts(
    workspace: str, artifacts: Iterable[Artifact], skipped: Iterable[SkippedPath]
) -> tuple[list[Artifact], list[SkippedPath]]:
    """Re-check each reported artifact under `workspace` (an absolute, resolved directory)."""
    kept: list[Artifact] = []
    dropped = list(skipped)
    seen: set[str] = set()
    look = _looker(workspace)
    for claimed in artifacts:
        if claimed.path in seen:
            continue
        seen.add(claimed.path)
        found = look(claimed.path)
        if isinstance(found, str):
            dropped.append(SkippedPath(path=claimed.path, reason=found))
        else:
            kept.append(found)
    return kept, dropped


CHANGED = "changed after the run answered (checked again by the parent when it was delivered)"


def recheck(workspace: str, result: RunResult) -> RunResult:
    """`result` as it stands now: every artifact looked up again under `workspace`; one that is
    gone or different moves to `skipped` (`CHANGED`, or why it cannot be an artifact now). An
    artifact in a layered run's change set not applied (`in_change_set`) is the parent's own
    record of the layer, kept as it is."""
    if not result.artifacts:
        return result
    kept: list[Artifact] = []
    dropped = list(result.skipped)
    look = _looker(workspace)
    for artifact in result.artifacts:
        if artifact.in_change_set:
            kept.append(artifact)  # the parent's own record of a layer: not in the workspace
            continue
        found = look(artifact.path)
        if isinstance(found, str):
            dropped.append(SkippedPath(path=artifact.path, reason=found))
        elif (found.fs_type, found.size, found.modified_at) != (
            artifact.fs_type,
            artifact.size,
            artifact.modified_at,
        ):
            dropped.append(SkippedPath(path=artifact.path, reason=CHANGED))
        else:
            kept.append(artifact)
    if len(kept) == len(result.artifacts):
        return result
    return msgspec.structs.replace(result, artifacts=kept, skipped=dropped)


def as_applied(workspace: str, result: RunResult) -> RunResult:
    """`result` once its change set was applied to `workspace`: each artifact (a record of
    the layer until then) looked up again where the applying put it, as the file is now."""
    kept, lost = check_artifacts(workspace, result.artifacts, [])
    return msgspec.structs.replace(result, artifacts=kept, skipped=[*result.skipped, *lost])


_LINK = "a link leading outside the workspace or nowhere (checked by the parent)"


def _looker(workspace: str) -> Callable[[str], Artifact | str]:
    """`look(path)`: the artifact at `path` under `workspace` now, or why there is none."""
    try:
        root = _root(workspace)
    except ValueError as exc:  # not absolute
        unusable = f"the workspace cannot be opened by the parent: {exc}"
        return lambda path: unusable

    def look(path: str) -> Artifact | str:
        try:
            found = root.look(path)
        except Refused as refused:
            return _reason(refused)
        except OSError as exc:
            if not os.path.isdir(root.root):
                return f"the workspace cannot be opened by the parent: {exc.strerror or exc}"
            return f"cannot be checked by the parent: {exc.strerror or exc}"
        return Artifact(
            path=found.path,
            size=found.st.st_size,
            fs_type=found.kind,
            modified_at=found.modified_at,
        )

    return look


@functools.lru_cache(maxsize=64)
def _root(workspace: str) -> ConfinedRoot:
    # Taken as given (run workspaces are resolved when a run is planned): no I/O, so a root
    # kept here cannot go stale; the walk opens it afresh each time.
    return ConfinedRoot(workspace, resolved=True)


def _reason(r: Refused) -> str:
    """Why the parent skips a claimed artifact."""
    match r.why:
        case Why.ABSOLUTE_OUTSIDE:
            return "outside the workspace (checked by the parent)"
        case Why.CLIMBS:
            return _LINK if r.via_link else "outside the workspace (checked by the parent)"
        case Why.LINK_OUTSIDE | Why.LOOP | Why.DANGLING:
            return _LINK
        case Why.ABSENT | Why.MISSING:
            return "does not exist (checked by the parent)"
        case Why.NOT_A_DIRECTORY | Why.REPLACED:
            return "leads through a symbolic link or a file (checked by the parent)"
        case Why.SPECIAL | Why.DEVICE:
            return "not a file, directory or symbolic link (checked by the parent)"
        case _:
            return f"cannot be checked by the parent: {r}"
