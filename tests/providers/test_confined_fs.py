"""The parent's confined file I/O for foreign agents: every path stays under the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.parent.providers.confined_fs import (
    MAX_READ_BYTES,
    MAX_WRITE_BYTES,
    ConfinedFiles,
    FileRefused,
)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[ConfinedFiles, Path, Path]:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("secret")
    (ws / "dir").mkdir()
    (ws / "dir" / "file.txt").write_text("a\nb\nc\n")
    (ws / "abs-out").symlink_to(outside)
    (ws / "rel-out").symlink_to("../outside")
    (ws / "dir" / "up-in").symlink_to("..")
    (ws / "abs-in").symlink_to(ws / "dir")
    (ws / "loop").symlink_to("loop")
    return ConfinedFiles(ws), ws, outside


def test_reads_select_lines(tree: tuple[ConfinedFiles, Path, Path]) -> None:
    files, ws, _ = tree
    assert files.read_text(f"{ws}/dir/file.txt") == "a\nb\nc\n"
    assert files.read_text("dir/file.txt", line=2) == "b\nc\n"
    assert files.read_text("dir/file.txt", line=2, limit=1) == "b\n"
    assert files.read_text("abs-in/file.txt", limit=1) == "a\n"
    assert files.read_text("dir/up-in/dir/file.txt", line=3) == "c\n"


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("abs-out/secret", "outside the workspace"),
        ("rel-out/secret", "climbs above"),
        ("../outside/secret", "climbs above"),
        ("/etc/passwd", "outside the workspace"),
        ("loop", "too many levels"),
        ("dir", "is a directory"),
        ("nope.txt", "does not exist"),
        ("a\0b", "NUL"),
        ("\ud800", "cannot be encoded"),
        ("x" * 300, "longer than"),
    ],
)
def test_reads_that_leave_the_workspace_or_name_nothing_are_refused(
    tree: tuple[ConfinedFiles, Path, Path], path: str, words: str
) -> None:
    files, _, _ = tree
    with pytest.raises(FileRefused, match=words):
        files.read_text(path)


def test_a_fifo_is_refused_without_blocking(tree: tuple[ConfinedFiles, Path, Path]) -> None:
    files, ws, _ = tree
    os.mkfifo(ws / "pipe")
    with pytest.raises(FileRefused, match="not a regular file"):
        files.read_text("pipe")
    with pytest.raises(FileRefused, match="not a regular file"):
        files.write_text("pipe", "x")


def test_binary_and_oversized_files_are_not_served(tree: tuple[ConfinedFiles, Path, Path]) -> None:
    files, ws, _ = tree
    (ws / "bin").write_bytes(b"\x7fELF\0\0")
    with pytest.raises(FileRefused, match="binary"):
        files.read_text("bin")
    with open(ws / "big", "wb") as f:
        f.truncate(MAX_READ_BYTES + 1)
    with pytest.raises(FileRefused, match="serves files up to"):
        files.read_text("big")
    with pytest.raises(FileRefused, match="writes files up to"):
        files.write_text("new", "x" * (MAX_WRITE_BYTES + 1))


def test_writes_create_parents_inside_and_replace_content(
    tree: tuple[ConfinedFiles, Path, Path],
) -> None:
    files, ws, _ = tree
    files.write_text(f"{ws}/new/deep/f.txt", "one")
    files.write_text("new/deep/f.txt", "two")
    assert (ws / "new" / "deep" / "f.txt").read_text() == "two"
    files.write_text("abs-in/through-link.txt", "ok")
    assert (ws / "dir" / "through-link.txt").read_text() == "ok"
    described = files.describe("new/deep/f.txt")
    assert described is not None and described.size == 3 and described.fs_type == "file"
    assert files.describe("dir") is None and files.describe("missing") is None


def test_writes_through_symlinks_out_or_over_hard_links_are_refused(
    tree: tuple[ConfinedFiles, Path, Path],
) -> None:
    files, ws, outside = tree
    (ws / "secret-link").symlink_to(outside / "secret")
    os.link(outside / "secret", ws / "hard")
    for path in ("abs-out/new", "rel-out/new", "secret-link", "hard", "../outside/new", "."):
        with pytest.raises(FileRefused):
            files.write_text(path, "pwned")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "secret"


_COMPONENTS = st.sampled_from(
    ["dir", "..", ".", "abs-out", "rel-out", "up-in", "abs-in", "loop", "f", "new", ""]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(_COMPONENTS, min_size=1, max_size=7), absolute=st.booleans())
def test_no_path_of_links_and_dots_writes_outside_the_workspace(
    tree: tuple[ConfinedFiles, Path, Path], parts: list[str], absolute: bool
) -> None:
    files, ws, outside = tree
    path = "/".join(parts)
    if absolute:
        path = f"{ws}/{path}"
    try:
        files.write_text(path, "written")
    except FileRefused:
        pass
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "secret"
    assert not (ws.parent / "f").exists() and not (ws.parent / "new").exists()


def test_a_name_that_cannot_be_encoded_is_refused_for_writes_too(
    tree: tuple[ConfinedFiles, Path, Path],
) -> None:
    files, _, _ = tree
    with pytest.raises(FileRefused, match="cannot be encoded"):
        files.write_text("dir/\udcff\ud800", "x")
    assert files.describe("\ud800") is None
