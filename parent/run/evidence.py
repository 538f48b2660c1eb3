"""What the parent checks itself instead of believing the child: artifacts and verdicts.

Artifacts: every path a child reports is looked up again by the parent under the run's
workspace, component by component from an open directory without following any symbolic link
(`openat` with O_NOFOLLOW), so a link swapped in by the child cannot lead the parent out. What
is there decides the artifact's type, size and time; a path outside the workspace, missing, or
not a file, directory or symbolic link moves to `skipped` with the reason.

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

import datetime
import errno
import os
import re
import stat
from collections.abc import Iterable
from typing import Literal, cast

import msgspec

from tether.protocol.messages import Artifact, FsType, RunResult, SkippedPath

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
    for claimed in artifacts:
        if claimed.path in seen:
            continue
        seen.add(claimed.path)
        found = _look_up(workspace, claimed.path)
        if isinstance(found, str):
            dropped.append(SkippedPath(path=claimed.path, reason=found))
        else:
            kept.append(found)
    return kept, dropped


CHANGED = "changed after the run answered (checked again by the parent when it was delivered)"


def recheck(workspace: str, result: RunResult) -> RunResult:
    """`result` as it stands now: every artifact looked up again under `workspace`; one that is
    gone or different moves to `skipped` (`CHANGED`, or why it cannot be an artifact now)."""
    if not result.artifacts:
        return result
    kept: list[Artifact] = []
    dropped = list(result.skipped)
    for artifact in result.artifacts:
        found = _look_up(workspace, artifact.path)
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


def _relative_parts(workspace: str, path: str) -> list[str] | None:
    if not os.path.isabs(path):
        path = os.path.join(workspace, path)
    norm = os.path.normpath(path)
    root = os.path.normpath(workspace)
    if norm == root:
        return []
    if not norm.startswith(root.rstrip("/") + "/"):
        return None
    return norm[len(root.rstrip("/")) + 1 :].split("/")


def _look_up(workspace: str, path: str) -> Artifact | str:
    parts = _relative_parts(workspace, path)
    if parts is None or ".." in path.split("/"):
        return "outside the workspace (checked by the parent)"
    try:
        fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return f"the workspace cannot be opened by the parent: {exc.strerror}"
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(
                    part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    return "leads through a symbolic link or a file (checked by the parent)"
                if exc.errno == errno.ENOENT:
                    return "does not exist (checked by the parent)"
                return f"cannot be checked by the parent: {exc.strerror}"
            os.close(fd)
            fd = nxt
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False) if parts else os.fstat(fd)
        except FileNotFoundError:
            return "does not exist (checked by the parent)"
        except OSError as exc:
            return f"cannot be checked by the parent: {exc.strerror}"
    finally:
        os.close(fd)
    kind: FsType
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "directory"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    else:
        return "not a file, directory or symbolic link (checked by the parent)"
    full = os.path.join(workspace, *parts) if parts else workspace
    if kind == "symlink":
        target = os.path.realpath(full)
        inside = target == workspace or target.startswith(workspace.rstrip("/") + "/")
        if not inside or not os.path.exists(target):
            return "a link leading outside the workspace or nowhere (checked by the parent)"
    modified = datetime.datetime.fromtimestamp(st.st_mtime, tz=datetime.UTC).isoformat()
    return Artifact(path=full, size=st.st_size, fs_type=kind, modified_at=modified)
