"""The file and shell tools, called in-process on a real temporary workspace."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tool_harness import TOOLS, call

from tether.child.tools.bash import MAX_OUTPUT_BYTES
from tether.child.tools.grep import MAX_MATCHES

pytestmark = pytest.mark.anyio


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "main.py").write_text("import pkg\n# TODO: tidy\nprint('hi')\n")
    (root / "src" / "pkg" / "__init__.py").write_text("VALUE = 1  # TODO later\n")
    (root / "README.md").write_text("# demo\n")
    (root / "blob.bin").write_bytes(b"\x00\x01TODO\x02" * 10)
    return root


async def test_read_file_numbers_lines_and_pages_with_offset_and_limit(ws: Path) -> None:
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    whole = await call(ws, "read_file", path="long.txt")
    assert not whole.is_error
    assert whole.content.splitlines()[0] == "     1\tline 1"
    page = await call(ws, "read_file", path="long.txt", offset=4, limit=2)
    assert page.content.splitlines() == [
        "     4\tline 4",
        "     5\tline 5",
        "(more lines follow; continue with offset=6)",
    ]
    past = await call(ws, "read_file", path="long.txt", offset=50)
    assert "past the end" in past.content


async def test_read_file_caps_its_output_and_says_where_to_continue(ws: Path) -> None:
    (ws / "big.txt").write_text("x" * 1000 + "\n" * 1 + ("y" * 1000 + "\n") * 300)
    got = await call(ws, "read_file", path="big.txt")
    assert len(got.content) < 110_000
    assert "output cap reached; continue with offset=" in got.content


async def test_read_file_refuses_binary_files_directories_and_missing_files(ws: Path) -> None:
    binary = await call(ws, "read_file", path="blob.bin")
    assert binary.is_error and "binary file" in binary.content
    directory = await call(ws, "read_file", path="src")
    assert directory.is_error and "is a directory" in directory.content
    missing = await call(ws, "read_file", path="nope.txt")
    assert missing.is_error and "does not exist" in missing.content


async def test_read_file_refuses_a_fifo_instead_of_blocking_on_it(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    got = await call(ws, "read_file", path="pipe")
    assert got.is_error and "not a regular file" in got.content


async def test_read_file_follows_a_symlink_that_stays_inside(ws: Path) -> None:
    (ws / "alias.py").symlink_to("src/main.py")
    got = await call(ws, "read_file", path="alias.py")
    assert not got.is_error and "TODO: tidy" in got.content


async def test_list_dir_marks_directories_symlinks_and_sizes(ws: Path) -> None:
    (ws / "link").symlink_to("README.md")
    got = await call(ws, "list_dir")
    lines = got.content.splitlines()
    assert "src/" in lines
    assert "link@ -> README.md" in lines
    assert "README.md  (7 bytes)" in lines
    sub = await call(ws, "list_dir", path="src/pkg")
    assert sub.content == "__init__.py  (24 bytes)"
    not_dir = await call(ws, "list_dir", path="README.md")
    assert not_dir.is_error and "not a directory" in not_dir.content


async def test_glob_matches_one_level_or_any_depth_relative_to_the_root(ws: Path) -> None:
    top = await call(ws, "glob", pattern="*.md")
    assert top.content == "README.md"
    deep = await call(ws, "glob", pattern="**/*.py")
    assert deep.content.splitlines() == ["src/main.py", "src/pkg/__init__.py"]
    under = await call(ws, "glob", pattern="*.py", path="src/pkg")
    assert under.content == "src/pkg/__init__.py"
    none = await call(ws, "glob", pattern="*.rs")
    assert not none.is_error and "no paths match" in none.content


async def test_grep_finds_regex_hits_filters_by_glob_and_skips_binary_files(ws: Path) -> None:
    got = await call(ws, "grep", pattern=r"TODO\b")
    assert got.content.splitlines()[:2] == [
        "src/main.py:2:# TODO: tidy",
        "src/pkg/__init__.py:1:VALUE = 1  # TODO later",
    ]
    assert "1 binary or oversized file(s) skipped" in got.content
    only_init = await call(ws, "grep", pattern="todo", glob="__init__.py", ignoreCase=True)
    assert only_init.content == "src/pkg/__init__.py:1:VALUE = 1  # TODO later"
    one_file = await call(ws, "grep", pattern="print", path="src/main.py")
    assert one_file.content == "src/main.py:3:print('hi')"


async def test_grep_caps_its_output_and_rejects_a_bad_regex(ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * (MAX_MATCHES + 50))
    capped = await call(ws, "grep", pattern="hit", path="many.txt")
    assert len(capped.content.splitlines()) == MAX_MATCHES + 1
    assert "output capped" in capped.content
    bad = await call(ws, "grep", pattern="(unclosed")
    assert bad.is_error and "bad regular expression" in bad.content


async def test_write_file_creates_parents_and_overwrites(ws: Path) -> None:
    made = await call(ws, "write_file", path="out/deep/notes.md", content="one")
    assert not made.is_error and "created out/deep/notes.md (3 bytes)" in made.content
    again = await call(ws, "write_file", path="out/deep/notes.md", content="two!")
    assert "overwrote" in again.content
    assert (ws / "out" / "deep" / "notes.md").read_text() == "two!"
    onto_dir = await call(ws, "write_file", path="src", content="x")
    assert onto_dir.is_error and "directory" in onto_dir.content


async def test_edit_file_replaces_exactly_one_match(ws: Path) -> None:
    got = await call(ws, "edit_file", path="src/main.py", oldString="print('hi')", newString="pass")
    assert not got.is_error and "line 3" in got.content
    assert (ws / "src" / "main.py").read_text() == "import pkg\n# TODO: tidy\npass\n"


async def test_edit_file_with_zero_or_several_matches_is_an_error_saying_how_many(
    ws: Path,
) -> None:
    (ws / "dup.txt").write_text("a\na\na\n")
    several = await call(ws, "edit_file", path="dup.txt", oldString="a", newString="b")
    assert several.is_error and "matches 3 times" in several.content
    zero = await call(ws, "edit_file", path="dup.txt", oldString="zzz", newString="b")
    assert zero.is_error and "0 matches" in zero.content
    assert (ws / "dup.txt").read_text() == "a\na\na\n"


async def test_bad_arguments_are_input_errors_not_crashes(ws: Path) -> None:
    from tether.child.tools import ToolInputError

    tool = TOOLS.get("read_file")
    assert tool is not None
    from tool_harness import FakeContext

    with pytest.raises(ToolInputError, match="invalid arguments"):
        await tool.run(FakeContext(ws), {"path": "x", "offset": 0})


async def test_only_write_edit_and_bash_are_mutating() -> None:
    assert sorted(t.name for t in TOOLS if t.mutates) == ["bash", "edit_file", "write_file"]


async def test_bash_runs_in_the_workspace_with_empty_stdin_and_reports_the_status(
    ws: Path,
) -> None:
    got = await call(ws, "bash", command="pwd; cat; echo err >&2; exit 3")
    assert got.is_error
    lines = got.content.splitlines()
    assert lines[0] == "exit status 3"
    assert str(ws) in lines[1]
    assert "err" in lines
    ok = await call(ws, "bash", command="echo fine")
    assert not ok.is_error and ok.content == "exit status 0\nfine\n"


async def test_bash_caps_its_output(ws: Path) -> None:
    got = await call(ws, "bash", command=f"head -c {MAX_OUTPUT_BYTES * 3} /dev/zero | tr '\\0' x")
    assert got.content.count("x") <= MAX_OUTPUT_BYTES + 10
    assert f"{MAX_OUTPUT_BYTES * 2} more bytes of output dropped" in got.content


async def test_bash_times_out_and_kills_the_commands_whole_process_group(
    ws: Path, thread_runs: Callable[[int], bool]
) -> None:
    started = time.monotonic()
    got = await call(ws, "bash", command="sleep 30 & sleep 30 & echo $$ > pid; wait", timeout=0.5)
    assert time.monotonic() - started < 5
    assert got.is_error and "timed out after 0.5s" in got.content
    shell = int((ws / "pid").read_text())
    assert not thread_runs(shell)


async def test_bash_kills_background_jobs_when_the_command_returns(ws: Path) -> None:
    started = time.monotonic()
    got = await call(ws, "bash", command="sleep 30 & echo started")
    assert time.monotonic() - started < 5
    assert got.content.startswith("exit status 0\nstarted")
    # The reaper fixture fails this test if the background sleep survived.


async def test_bash_commands_get_their_own_group_but_stay_in_the_childs_session(
    ws: Path,
) -> None:
    got = await call(ws, "bash", command="ps -o pgid=,sid= -p $$")
    pgid, sid = (int(x) for x in got.content.splitlines()[1].split())
    assert sid == os.getsid(0)
    assert pgid != os.getpgid(0)


async def test_a_file_with_more_than_one_hard_link_is_read_but_never_written(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret stays\n")
    os.link(outside, ws / "linked.txt")
    read = await call(ws, "read_file", path="linked.txt")
    assert not read.is_error and "secret stays" in read.content
    wrote = await call(ws, "write_file", path="linked.txt", content="clobbered")
    edited = await call(ws, "edit_file", path="linked.txt", oldString="secret", newString="leaked")
    for outcome in (wrote, edited):
        assert outcome.is_error and "2 hard links" in outcome.content
    assert outside.read_text() == "secret stays\n"
    fresh = await call(ws, "write_file", path="new.txt", content="mine")
    assert not fresh.is_error and (ws / "new.txt").read_text() == "mine"
