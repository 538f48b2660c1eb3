"""Workspace confinement: every way out of the root is refused with a reason that names it.

Each escape attempt goes through the real tools in-process; nothing outside the workspace may
be read, listed, searched, created or changed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tool_harness import call

from tether.child.workspace import OutsideWorkspace, Workspace

pytestmark = pytest.mark.anyio

SECRET = "top secret outside the workspace"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "inside.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (root / "abs_link").symlink_to(outside / "secret.txt")
    (root / "rel_link").symlink_to("../outside/secret.txt")
    (root / "dir_link").symlink_to("../outside")
    (root / "abs_dir_link").symlink_to(outside)
    (root / "chain_a").symlink_to("chain_b")
    (root / "chain_b").symlink_to("sub/../../outside/secret.txt")
    (root / "loop").symlink_to("loop")
    (root / "sub" / "up_link").symlink_to("../../outside")
    (root / "proc_link").symlink_to("/proc/self/root/etc/passwd")
    return root


def _outside(ws: Path) -> Path:
    return ws.parent / "outside"


# (path, words the refusal must contain)
READ_ESCAPES = [
    ("../outside/secret.txt", "climbs above the workspace root"),
    ("sub/../../outside/secret.txt", "climbs above the workspace root"),
    ("..", "climbs above the workspace root"),
    ("/etc/passwd", "outside the workspace"),
    ("/proc/self/root/etc/passwd", "outside the workspace"),
    ("/proc/self/cwd/secret.txt", "outside the workspace"),
    ("/proc/self/fd/0", "outside the workspace"),
    ("abs_link", "is a symlink to"),
    ("rel_link", "climbs above the workspace root"),
    ("dir_link/secret.txt", "climbs above the workspace root"),
    ("abs_dir_link/secret.txt", "is a symlink to"),
    ("chain_a", "climbs above the workspace root"),
    ("sub/up_link/secret.txt", "climbs above the workspace root"),
    ("proc_link", "is a symlink to /proc/self/root/etc/passwd"),
    ("loop", "too many levels of symbolic links"),
    ("sub/inside.txt\0../../outside/secret.txt", "NUL byte"),
    ("a/" * 2100 + "x", "too long"),
    ("n" * 300, "longer than 255 bytes"),
    ("sub/\ud800", "cannot be encoded"),
]


@pytest.mark.parametrize(("path", "reason"), READ_ESCAPES)
async def test_read_file_refuses_each_escape_with_its_reason(
    ws: Path, path: str, reason: str
) -> None:
    got = await call(ws, "read_file", path=path)
    assert got.is_error
    assert got.content.startswith("refused:"), got.content
    assert reason in got.content
    assert SECRET not in got.content


async def test_an_absolute_path_outside_the_root_is_refused(ws: Path) -> None:
    got = await call(ws, "read_file", path=str(_outside(ws) / "secret.txt"))
    assert got.is_error and "outside the workspace" in got.content


async def test_an_absolute_path_that_leaves_with_dotdot_is_refused(ws: Path) -> None:
    got = await call(ws, "read_file", path=f"{ws}/../outside/secret.txt")
    assert got.is_error and "climbs above the workspace root" in got.content


async def test_the_root_spelled_through_proc_self_root_is_refused(ws: Path) -> None:
    got = await call(ws, "read_file", path=f"/proc/self/root{ws}/sub/inside.txt")
    assert got.is_error and "outside the workspace" in got.content


async def test_absolute_paths_inside_the_root_work(ws: Path) -> None:
    got = await call(ws, "read_file", path=str(ws / "sub" / "inside.txt"))
    assert not got.is_error and "inside" in got.content


@pytest.mark.parametrize("path", ["abs_dir_link", "dir_link", "../outside", "/tmp"])
async def test_list_dir_refuses_directories_outside(ws: Path, path: str) -> None:
    got = await call(ws, "list_dir", path=path)
    assert got.is_error and got.content.startswith("refused:")
    assert "secret.txt" not in got.content


async def test_write_file_does_not_write_through_a_symlink_out(ws: Path) -> None:
    for path in ("abs_link", "rel_link", "dir_link/new.txt", "abs_dir_link/new.txt"):
        got = await call(ws, "write_file", path=path, content="pwned")
        assert got.is_error and got.content.startswith("refused:"), (path, got.content)
    assert (_outside(ws) / "secret.txt").read_text() == SECRET + "\n"
    assert sorted(os.listdir(_outside(ws))) == ["secret.txt"]


async def test_write_file_creates_no_parent_directory_outside(ws: Path) -> None:
    got = await call(ws, "write_file", path="../escape/made.txt", content="x")
    assert got.is_error and "climbs above" in got.content
    assert not (ws.parent / "escape").exists()
    via_link = await call(ws, "write_file", path="dir_link/newdir/made.txt", content="x")
    assert via_link.is_error
    assert not (_outside(ws) / "newdir").exists()


async def test_edit_file_does_not_edit_through_a_symlink_out(ws: Path) -> None:
    for path in ("abs_link", "rel_link", "dir_link/secret.txt", "/proc/self/root/etc/hosts"):
        got = await call(ws, "edit_file", path=path, oldString="top", newString="pwned")
        assert got.is_error and got.content.startswith("refused:"), (path, got.content)
    assert (_outside(ws) / "secret.txt").read_text() == SECRET + "\n"


@pytest.mark.parametrize("pattern", ["../*", "/etc/*", "sub/../../outside/*"])
async def test_glob_refuses_patterns_that_leave_the_root(ws: Path, pattern: str) -> None:
    got = await call(ws, "glob", pattern=pattern)
    assert got.is_error and got.content.startswith("refused:")


async def test_glob_and_grep_never_descend_through_a_symlinked_directory(ws: Path) -> None:
    listed = await call(ws, "glob", pattern="**/*")
    assert "secret.txt" not in listed.content
    assert "sub/inside.txt" in listed.content
    searched = await call(ws, "grep", pattern="secret")
    assert SECRET not in searched.content
    outside_dir = await call(ws, "grep", pattern="secret", path="dir_link")
    assert outside_dir.is_error and "climbs above" in outside_dir.content
    filtered = await call(ws, "grep", pattern="secret", glob="../*")
    assert filtered.is_error and filtered.content.startswith("refused:")


async def test_a_symlink_swapped_in_after_the_walk_is_not_followed(ws: Path) -> None:
    victim = ws / "victim.txt"
    victim.write_text("harmless\n")
    workspace = Workspace(ws)
    with workspace.locate("victim.txt") as loc:
        victim.unlink()
        victim.symlink_to(_outside(ws) / "secret.txt")
        with pytest.raises(OutsideWorkspace, match="became a symlink"):
            loc.open(os.O_RDONLY)


async def test_a_directory_swapped_for_a_symlink_after_the_walk_is_not_followed(
    ws: Path,
) -> None:
    workspace = Workspace(ws)
    with workspace.locate("sub/inside.txt") as loc:
        # The walk holds the real `sub` open: renaming it and planting a link in its place
        # cannot redirect the open that follows.
        (ws / "sub").rename(ws / "moved")
        (ws / "sub").symlink_to(_outside(ws))
        fd = loc.open(os.O_RDONLY)
        try:
            assert os.read(fd, 100) == b"inside\n"
        finally:
            os.close(fd)


async def test_symlinks_that_stay_inside_are_followed(ws: Path) -> None:
    (ws / "good_dir").symlink_to("sub")
    (ws / "good_abs").symlink_to(ws / "sub" / "inside.txt")
    for path in ("good_dir/inside.txt", "good_abs"):
        got = await call(ws, "read_file", path=path)
        assert not got.is_error and "inside" in got.content, (path, got.content)


async def test_complete_skips_paths_that_lead_outside_and_types_the_rest(ws: Path) -> None:
    (ws / "report.md").write_text("r")
    (ws / "report_link").symlink_to("report.md")
    got = await call(
        ws,
        "complete",
        summary="done",
        paths=["report.md", "sub", "report_link", "abs_link", "dir_link", "../outside"],
    )
    assert got.completion is not None
    types = {Path(a.path).name: a.fs_type for a in got.completion.artifacts}
    assert types == {"report.md": "file", "sub": "directory", "report_link": "symlink"}
    skipped = {s.path: s.reason for s in got.completion.skipped}
    assert skipped == {
        "abs_link": "outside the workspace",
        "dir_link": "outside the workspace",
        "../outside": "outside the workspace",
    }


async def test_complete_skips_a_path_with_a_nul_byte_or_an_unencodable_name(ws: Path) -> None:
    got = await call(ws, "complete", summary="done", paths=["sub/inside.txt\0", "\ud800"])
    assert got.completion is not None and got.completion.artifacts == []
    assert {s.path: s.reason for s in got.completion.skipped} == {
        "sub/inside.txt\0": "cannot resolve: the path contains a NUL byte",
        "\ud800": "cannot resolve: the path cannot be encoded as a file name",
    }
