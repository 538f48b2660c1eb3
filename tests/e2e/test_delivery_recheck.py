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


def test_a_claimed_path_with_a_nul_byte_is_skipped_not_raised(tmp_path: Path) -> None:
    claimed = [Artifact(path=p, size=0, fs_type="file") for p in ("a\0b", f"{tmp_path}/x\0")]
    kept, skipped = check_artifacts(str(tmp_path), claimed, [])
    assert kept == []
    assert [s.reason for s in skipped] == [
        "cannot be checked by the parent: the path contains a NUL byte"
    ] * 2


def test_an_artifact_reached_through_a_symlinked_directory_inside_is_kept_under_its_real_path(
    tmp_path: Path,
) -> None:
    """The parent walks as the child's tools do: a link that stays inside is followed (and the
    artifact named where it really is), one that leads out is not."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.md").write_text("eleven byte")
    (tmp_path / "alias").symlink_to("real")
    (tmp_path / "out").symlink_to("/etc")
    claimed = [
        Artifact(path=str(tmp_path / "alias" / "a.md"), size=0, fs_type="file"),
        Artifact(path=str(tmp_path / "out" / "passwd"), size=0, fs_type="file"),
    ]
    kept, skipped = check_artifacts(str(tmp_path), claimed, [])
    assert [(a.path, a.fs_type, a.size) for a in kept] == [
        (str(tmp_path / "real" / "a.md"), "file", 11)
    ]
    assert [(s.path, s.reason) for s in skipped] == [
        (
            str(tmp_path / "out" / "passwd"),
            "a link leading outside the workspace or nowhere (checked by the parent)",
        )
    ]
