"""A result is checked again when it is delivered: an artifact that changed since the check,
or was swapped for a link out, moves to `skipped` with the reason (pure: files only)."""

from __future__ import annotations

import os
from pathlib import Path

from tether.parent.run.evidence import CHANGED, check_artifacts, recheck
from tether.protocol.messages import Artifact, RunResult


def _result(ws: Path, *names: str) -> RunResult:
    claimed = [Artifact(path=str(ws / n), size=0, fs_type="file") for n in names]
    kept, skipped = check_artifacts(str(ws), claimed, [])
    return RunResult(success=True, status="completed", artifacts=kept, skipped=skipped)


def test_an_unchanged_artifact_is_delivered_as_it_was_checked(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("eleven byte")
    result = _result(tmp_path, "a.md")
    assert recheck(str(tmp_path), result) is result


def test_an_artifact_swapped_for_a_link_out_is_skipped_when_delivered(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("eleven byte")
    (tmp_path / "b.md").write_text("kept")
    result = _result(tmp_path, "a.md", "b.md")
    os.unlink(tmp_path / "a.md")
    os.symlink("/etc/shadow", tmp_path / "a.md")
    got = recheck(str(tmp_path), result)
    assert [a.path for a in got.artifacts] == [str(tmp_path / "b.md")]
    reasons = {s.path: s.reason for s in got.skipped}
    assert "leading outside the workspace" in reasons[str(tmp_path / "a.md")]


def test_an_artifact_rewritten_after_the_check_is_skipped_as_changed(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("eleven byte")
    result = _result(tmp_path, "a.md")
    (tmp_path / "a.md").write_text("something else entirely")
    got = recheck(str(tmp_path), result)
    assert got.artifacts == []
    assert [(s.path, s.reason) for s in got.skipped] == [(str(tmp_path / "a.md"), CHANGED)]
