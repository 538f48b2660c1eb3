"""The one confined path walk (`tether.contain.confined`), over crafted trees.

Hypothesis builds small trees under a root — directories, files, symlinks in and out (relative,
absolute, through `..`, through `/proc/self/root`, loops), fifos and device nodes where the test
may make them — next to a directory outside holding a secret, and walks paths made of their
names, `..`, `.` and absolute prefixes. Whatever it is given, the walk never lands outside the
root (checked by inode: every directory it holds and every file it opens is one of the root's),
lands where the kernel's own resolution does whenever it accepts a path, and still does so when
the tree changes between any two of its steps. The child's tools, the files served to a foreign
agent and the parent's evidence, which all walk with it, agree on what is inside.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tether.child.tools import default_tools
from tether.child.workspace import BadPath, OutsideWorkspace, Workspace
from tether.contain import confined
from tether.contain.confined import ConfinedRoot, Refused, Why, descend
from tether.parent.providers.confined_fs import ConfinedFiles, FileRefused
from tether.parent.run.evidence import check_artifacts
from tether.protocol.messages import Artifact, ToolApproveResult

SECRET = "the secret outside the root"
NAMES = ("a", "b", "c")
LINK_TARGETS = (
    "a",
    "b/c",
    ".",
    "..",
    "a/..",
    "a/../..",
    "../outside",
    "../outside/secret",
    "../ws/a",
    "{root}",
    "{root}/a",
    "{root}/b/c",
    "{root}/../outside",
    "{root}/a/../b",
    "{outside}",
    "{outside}/secret",
    "/proc/self/root{root}/a",
    "/",
    "missing/x",
    "{self}",
)
KINDS = ("dir", "dir", "file", "link", "link", "fifo", "device")


def _can_make_devices() -> bool:
    with tempfile.TemporaryDirectory() as d:
        try:
            os.mknod(f"{d}/null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except OSError:
            return False
    return True


DEVICES = _can_make_devices()


@st.composite
def trees(draw: st.DrawFn) -> dict[str, tuple[str, str]]:
    """A tree as `{relative path: (kind, link target)}`, two levels deep."""
    spec: dict[str, tuple[str, str]] = {}

    def level(prefix: str, depth: int) -> None:
        for name in draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=1, max_size=3)):
            kind = draw(st.sampled_from(KINDS if depth < 2 else KINDS[2:]))
            target = draw(st.sampled_from(LINK_TARGETS)) if kind == "link" else ""
            spec[prefix + name] = (kind, target)
            if kind == "dir":
                level(f"{prefix}{name}/", depth + 1)

    level("", 0)
    return spec


# Mostly the tree's own names (a walk goes somewhere), then what leads up or out.
COMPONENTS = st.sampled_from((*NAMES, *NAMES, "..", "..", "secret", ".", "", "outside", "ws"))
PREFIXES = st.sampled_from(
    ("", "", "", "{root}/", "/proc/self/root{root}/", "{outside}/", "{root}/../ws/", "/")
)


@st.composite
def paths(draw: st.DrawFn) -> str:
    return draw(PREFIXES) + "/".join(draw(st.lists(COMPONENTS, min_size=1, max_size=5)))


@dataclass
class Tree:
    root: str
    outside: str

    def fill(self, text: str) -> str:
        return text.format(root=self.root, outside=self.outside)


@contextmanager
def built(spec: dict[str, tuple[str, str]]) -> Iterator[Tree]:
    with tempfile.TemporaryDirectory(prefix="walk-") as base:
        real = os.path.realpath(base)
        tree = Tree(f"{real}/ws", f"{real}/outside")
        os.mkdir(tree.root)
        os.mkdir(tree.outside)
        Path(tree.outside, "secret").write_text(SECRET + "\n")
        for rel, (kind, target) in spec.items():
            where = f"{tree.root}/{rel}"
            if kind == "dir":
                os.mkdir(where)
            elif kind == "file":
                Path(where).write_text(f"{rel}\n")
            elif kind == "link":
                os.symlink(
                    rel.rpartition("/")[2] if target == "{self}" else tree.fill(target), where
                )
            elif kind == "device" and DEVICES:
                os.mknod(where, stat.S_IFCHR | 0o600, os.makedev(1, 3))
            else:
                os.mkfifo(where)
        yield tree


def _examples(cases: list[tuple[dict[str, tuple[str, str]], list[str]]]) -> Any:
    def add(test: Any) -> Any:
        for spec, walked in reversed(cases):
            test = example(spec=spec, walked=walked)(test)
        return test

    return add


def _id(st_: os.stat_result) -> tuple[int, int]:
    return (st_.st_dev, st_.st_ino)


def inside(root: str) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The identities of the directories under `root` (itself included), and of everything."""
    dirs = {_id(os.lstat(root))}
    every = set(dirs)
    for here, subdirs, files in os.walk(root):
        for name in subdirs + files:
            got = _id(os.lstat(os.path.join(here, name)))
            every.add(got)
            if name in subdirs:
                dirs.add(got)
    return dirs, every


def _check_landing(tree: Tree, path: str, landing: confined.Landing) -> None:
    """Everything about where the walk landed is inside the root, and is what it says."""
    dirs, every = inside(tree.root)
    assert _id(os.fstat(landing.dir_fd)) in dirs, path
    assert landing.path == tree.root or landing.path.startswith(tree.root + "/"), path
    now = landing.lstat()
    if now is None:
        return
    assert _id(now) in every, path
    assert not stat.S_ISLNK(now.st_mode), path  # locate follows every symlink, the last too
    assert _id(os.lstat(landing.path)) == _id(now), path
    if not stat.S_ISCHR(now.st_mode):
        try:
            fd = landing.open(os.O_RDONLY | os.O_NONBLOCK)
        except (Refused, OSError):
            return
        try:
            assert _id(os.fstat(fd)) in every, path
        finally:
            os.close(fd)


RUN = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SWAP_RUN = settings(RUN, max_examples=150)


# The escapes a broken walk would let through, always tried (beside what Hypothesis draws).
ESCAPES = [
    ({"a": ("link", "{outside}")}, ["a/secret", "a/../outside/secret"]),
    ({"a": ("link", "../outside")}, ["a/secret", "a"]),
    ({"a": ("link", "{outside}/secret")}, ["a"]),
    ({"a": ("dir", ""), "a/b": ("link", "../..")}, ["a/b/outside/secret", "a/b"]),
    ({"a": ("link", "{root}/../outside")}, ["a/secret"]),
    ({}, ["../outside/secret", "{root}/../outside/secret", "/proc/self/root{outside}/secret"]),
]


@RUN
@given(spec=trees(), walked=st.lists(paths(), min_size=1, max_size=8))
@_examples(ESCAPES)
def test_no_path_through_any_crafted_tree_lands_outside_the_root(
    spec: dict[str, tuple[str, str]], walked: list[str]
) -> None:
    with built(spec) as tree:
        root = ConfinedRoot(tree.root)
        for raw in walked:
            path = tree.fill(raw)
            for make_parents in (False, True):
                try:
                    landing = root.locate(path, make_parents=make_parents)
                except (Refused, OSError):
                    continue
                with landing:
                    _check_landing(tree, path, landing)
                    if landing.st is not None:
                        # Whenever the walk accepts a path to something, the kernel's own
                        # resolution of it ends at the same place.
                        kernel = os.path.realpath(os.path.join(tree.root, path))
                        assert kernel == landing.path, path
        assert Path(tree.outside, "secret").read_text() == SECRET + "\n"
        assert os.listdir(tree.outside) == ["secret"]  # nothing was made outside


@RUN
@given(spec=trees(), walked=st.lists(paths(), min_size=1, max_size=8))
@_examples(ESCAPES)
def test_the_childs_tools_the_agents_files_and_the_parents_evidence_agree_on_what_is_inside(
    spec: dict[str, tuple[str, str]], walked: list[str]
) -> None:
    with built(spec) as tree:
        workspace = Workspace(tree.root)
        files = ConfinedFiles(tree.root)
        reads = anyio.run(_read_all, workspace, [tree.fill(p) for p in walked])
        for raw, (child_ok, child_text) in zip(walked, reads, strict=True):
            path = tree.fill(raw)
            try:
                files.read_text(path)
                agent_ok, agent_text = True, ""
            except FileRefused as exc:
                agent_ok, agent_text = False, str(exc)
            # Read by the child's tool exactly when served to a foreign agent, and refused as
            # outside by both or by neither.
            assert child_ok == agent_ok, (path, child_text, agent_text)
            assert _outside(child_text) == _outside(agent_text), (path, child_text, agent_text)
            assert (files.describe(path) is not None) == child_ok, path
            # What `complete` delivers is what the parent's evidence keeps, field for field.
            described = workspace.describe(path)
            claimed = Artifact(path=path, size=0, fs_type="file")
            kept, skipped = check_artifacts(tree.root, [claimed], [])
            if isinstance(described, Artifact):
                assert kept == [described], (path, skipped)
                again, _ = check_artifacts(tree.root, [described], [])
                assert again == [described], path
            else:
                assert kept == [], (path, described)
            if _outside(child_text):
                assert kept == [], path
            assert SECRET not in child_text + agent_text


def _outside(text: str) -> bool:
    return "outside the workspace" in text or "climbs above the workspace root" in text


class _Context:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.run_id = "walk"
        self.read_only = False

    async def approve(self, tool: str, arguments: Any) -> ToolApproveResult:
        return ToolApproveResult(allow=True)


async def _read_all(workspace: Workspace, walked: list[str]) -> list[tuple[bool, str]]:
    tool = default_tools().get("read_file")
    assert tool is not None
    got = []
    for path in walked:
        outcome = await tool.run(_Context(workspace), {"path": path})  # type: ignore[arg-type]
        got.append((not outcome.is_error, outcome.content))
    return got


# --- a swap between check and use -------------------------------------------------------------


class _SwappingOs:
    """The `os` module as the walk sees it, except that just before its `step`-th call that
    looks at the tree (open, stat, readlink, scandir), `swap` changes the tree, once."""

    def __init__(self, step: int, swap: Callable[[], None]) -> None:
        self._step = step
        self._swap = swap
        self.calls = 0
        self.opened: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _tick(self) -> None:
        self.calls += 1
        if self.calls == self._step:
            self._swap()

    def open(self, path: Any, *args: Any, **kwargs: Any) -> int:
        self._tick()
        self.opened.append(os.fsdecode(path))
        return os.open(path, *args, **kwargs)

    def stat(self, *args: Any, **kwargs: Any) -> os.stat_result:
        self._tick()
        return os.stat(*args, **kwargs)

    def readlink(self, *args: Any, **kwargs: Any) -> str:
        self._tick()
        return os.readlink(*args, **kwargs)

    def scandir(self, *args: Any, **kwargs: Any) -> Any:
        self._tick()
        return os.scandir(*args, **kwargs)


SWAPS = ("link_out", "link_out_dir", "link_up", "file", "dir")


def _swapper(tree: Tree, victim: str, how: str) -> Callable[[], None]:
    """Replace `victim` (kept under the root, renamed) with something else."""

    def swap() -> None:
        where = f"{tree.root}/{victim}"
        if not os.path.lexists(where):
            return
        os.rename(where, f"{where}.was")
        if how == "link_out":
            os.symlink(f"{tree.outside}/secret", where)
        elif how == "link_out_dir":
            os.symlink(tree.outside, where)
        elif how == "link_up":
            os.symlink("../" * (victim.count("/") + 1) + "outside", where)
        elif how == "file":
            Path(where).write_text("swapped\n")
        else:
            os.mkdir(where)

    return swap


@SWAP_RUN
@given(
    spec=trees(),
    walked=paths(),
    victim=st.sampled_from(("a", "b", "c", "a/a", "a/b", "b/a", "b/c", "c/b")),
    how=st.sampled_from(SWAPS),
    step=st.integers(1, 12),
)
def test_a_swap_between_any_two_steps_of_the_walk_never_leads_it_outside(
    spec: dict[str, tuple[str, str]], walked: str, victim: str, how: str, step: int
) -> None:
    with built(spec) as tree:
        root = ConfinedRoot(tree.root)
        path = tree.fill(walked)
        swapping = _SwappingOs(step, _swapper(tree, victim, how))
        with mock.patch.object(confined, "os", swapping):
            try:
                landing = root.locate(path)
            except (Refused, OSError):
                return
            with landing:
                try:
                    fd: int | None = landing.open(os.O_RDONLY | os.O_NONBLOCK)
                except (Refused, OSError):
                    fd = None
                # After the swap, what was replaced is still inside (renamed), and so is all the
                # walk holds and opened.
                dirs, every = inside(tree.root)
                assert _id(os.fstat(landing.dir_fd)) in dirs, (path, victim, how, step)
        if fd is None:
            return
        try:
            got = os.fstat(fd)
            assert _id(got) in every, (path, victim, how, step)
            if stat.S_ISREG(got.st_mode):
                assert SECRET not in os.read(fd, 1000).decode(errors="replace")
        finally:
            os.close(fd)


@SWAP_RUN
@given(
    spec=trees(),
    victim=st.sampled_from(("a", "b", "c", "a/a", "a/b", "b/a", "b/c", "c/b")),
    how=st.sampled_from(SWAPS),
    step=st.integers(1, 15),
)
def test_the_tree_walk_yields_nothing_outside_the_root_even_when_the_tree_changes(
    spec: dict[str, tuple[str, str]], victim: str, how: str, step: int
) -> None:
    with built(spec) as tree:
        root = ConfinedRoot(tree.root)
        with root.locate(".") as landing:
            top = landing.open(os.O_RDONLY | os.O_DIRECTORY)
        swapping = _SwappingOs(step, _swapper(tree, victim, how))
        try:
            with mock.patch.object(confined, "os", swapping):
                for entry in descend(top):
                    dirs, every = inside(tree.root)
                    assert _id(os.fstat(entry.dir_fd)) in dirs, entry.rel
                    if entry.is_file:
                        try:
                            fd = entry.open(os.O_RDONLY | os.O_NONBLOCK)
                        except OSError:
                            continue
                        try:
                            # The swap may run inside that open and make a new file inside:
                            # what the root holds now counts too.
                            got = os.fstat(fd)
                            assert _id(got) in every | inside(tree.root)[1], entry.rel
                            if not stat.S_ISREG(got.st_mode):
                                continue  # swapped for a directory inside: the tools read none
                            assert SECRET not in os.read(fd, 1000).decode(errors="replace")
                        finally:
                            os.close(fd)
        finally:
            os.close(top)


# --- the walk's rules, one by one ---------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    base = tmp_path.resolve()
    got = Tree(f"{base}/ws", f"{base}/outside")
    os.makedirs(f"{got.root}/sub/deeper")
    os.mkdir(got.outside)
    Path(got.outside, "secret").write_text(SECRET + "\n")
    Path(got.root, "sub", "f.txt").write_text("inside\n")
    os.symlink("sub", f"{got.root}/in_rel")
    os.symlink(f"{got.root}/sub/f.txt", f"{got.root}/in_abs")
    os.symlink("../outside", f"{got.root}/out_rel")
    os.symlink(got.outside, f"{got.root}/out_abs")
    os.symlink("loop", f"{got.root}/loop")
    os.symlink("nowhere", f"{got.root}/dangling")
    return got


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("a\0b", Why.NUL),
        ("\ud800", Why.UNENCODABLE),
        ("a/" * 2100, Why.TOO_LONG),
        ("n" * 256, Why.NAME_TOO_LONG),
        ("/etc/passwd", Why.ABSOLUTE_OUTSIDE),
        ("/proc/self/root{root}/sub", Why.ABSOLUTE_OUTSIDE),
        ("..", Why.CLIMBS),
        ("sub/../../outside", Why.CLIMBS),
        ("{root}/../outside/secret", Why.CLIMBS),
        ("out_rel/secret", Why.CLIMBS),
        ("out_abs/secret", Why.LINK_OUTSIDE),
        ("loop", Why.LOOP),
        ("nope/f.txt", Why.MISSING),
        ("dangling/x", Why.MISSING),
        ("sub/f.txt/x", Why.NOT_A_DIRECTORY),
    ],
)
def test_each_refusal_names_its_rule(tree: Tree, path: str, why: Why) -> None:
    with pytest.raises(Refused) as caught:
        ConfinedRoot(tree.root).locate(tree.fill(path))
    assert caught.value.why is why
    assert caught.value.via_link == (path in ("out_rel/secret", "out_abs/secret", "loop"))


def test_symlinks_inside_are_followed_and_the_landing_names_the_real_place(tree: Tree) -> None:
    root = ConfinedRoot(tree.root)
    with root.locate("in_rel/deeper/../f.txt") as landing:
        assert (landing.relative, landing.path) == ("sub/f.txt", f"{tree.root}/sub/f.txt")
        assert landing.parts == ("sub", "f.txt")
    with root.locate("in_abs") as landing:
        assert landing.relative == "sub/f.txt"
    with root.locate(f"{tree.root}/sub/..") as landing:
        assert (landing.name, landing.relative, landing.path) == (".", ".", tree.root)
        assert landing.st is not None and stat.S_ISDIR(landing.st.st_mode)


def test_look_reports_a_symlink_as_one_only_if_it_leads_to_something_inside(tree: Tree) -> None:
    root = ConfinedRoot(tree.root)
    found = root.look("in_abs")
    assert (found.kind, found.path) == ("symlink", f"{tree.root}/in_abs")
    assert found.st.st_size == len(f"{tree.root}/sub/f.txt")
    assert root.look("in_rel/f.txt").path == f"{tree.root}/sub/f.txt"
    for path, why in [
        ("out_abs", Why.LINK_OUTSIDE),
        ("out_rel", Why.CLIMBS),
        ("dangling", Why.DANGLING),
        ("nothing", Why.ABSENT),
    ]:
        with pytest.raises(Refused) as caught:
            root.look(path)
        assert caught.value.why is why, path
    os.mkfifo(f"{tree.root}/pipe")
    with pytest.raises(Refused) as caught:
        root.look("pipe")
    assert caught.value.why is Why.SPECIAL


def test_missing_directories_are_made_only_on_the_way_inside(tree: Tree) -> None:
    root = ConfinedRoot(tree.root)
    with root.locate("new/deep/file", make_parents=True) as landing:
        assert (landing.relative, landing.st) == ("new/deep/file", None)
    assert os.path.isdir(f"{tree.root}/new/deep")
    with pytest.raises(Refused):
        root.locate("out_abs/made/file", make_parents=True)
    with pytest.raises(Refused):
        root.locate("out_rel/made/file", make_parents=True)
    assert os.listdir(tree.outside) == ["secret"]


def test_a_name_swapped_for_a_symlink_after_the_walk_is_refused_when_opened(tree: Tree) -> None:
    with ConfinedRoot(tree.root).locate("sub/f.txt") as landing:
        os.rename(f"{tree.root}/sub/f.txt", f"{tree.root}/sub/was.txt")
        os.symlink(f"{tree.outside}/secret", f"{tree.root}/sub/f.txt")
        with pytest.raises(Refused) as caught:
            landing.open(os.O_RDONLY)
    assert caught.value.why is Why.BECAME_SYMLINK
    assert caught.value.where == f"{tree.root}/sub/f.txt"


@pytest.mark.skipif(not DEVICES, reason="this host does not let the test make a device node")
def test_a_device_node_is_never_opened_by_any_user_of_the_walk(tree: Tree) -> None:
    os.mknod(f"{tree.root}/sub/null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    spy = _SwappingOs(0, lambda: None)  # counts, never swaps
    files = ConfinedFiles(tree.root)
    with mock.patch.object(confined, "os", spy):
        with pytest.raises(Refused) as caught, ConfinedRoot(tree.root).locate("sub/null") as at:
            at.open(os.O_RDONLY | os.O_NONBLOCK)
        assert caught.value.why is Why.DEVICE
        with pytest.raises(FileRefused, match="is not a regular file"):
            files.read_text("sub/null")
        with pytest.raises(FileRefused, match="is not a regular file"):
            files.write_text("sub/null", "x")
        read = anyio.run(_read_all, Workspace(tree.root), ["sub/null"])
    assert read == [(False, "refused: sub/null is a device node; tools never open one")]
    assert spy.calls > 0 and "null" not in spy.opened


def test_a_resolved_root_is_taken_as_given_and_must_be_absolute(tree: Tree) -> None:
    assert ConfinedRoot(f"{tree.root}/sub/..", resolved=True).root == tree.root
    with pytest.raises(ValueError, match="not absolute"):
        ConfinedRoot("ws", resolved=True)
    gone = ConfinedRoot(f"{tree.root}/gone", resolved=True)
    with pytest.raises(FileNotFoundError):
        gone.locate("x")


def test_a_refusal_is_worded_by_the_roots_own_words(tree: Tree) -> None:
    """The child and the foreign agents' files each word the same refusal for their reader."""
    with pytest.raises(OutsideWorkspace, match=r"is a symlink to .*outside the workspace"):
        Workspace(tree.root).locate("out_abs/secret")
    with pytest.raises(FileRefused, match="leads through a symlink that is outside"):
        ConfinedFiles(tree.root).read_text("out_abs/secret")
    with pytest.raises(BadPath, match="NUL byte"):
        Workspace(tree.root).locate("a\0")
    with pytest.raises(FileNotFoundError) as missing:
        Workspace(tree.root).locate("nope/x")
    assert missing.value.errno == errno.ENOENT and "no such directory" in str(missing.value)


def test_the_tree_walk_reports_symlinks_but_never_descends_them(tree: Tree) -> None:
    with ConfinedRoot(tree.root).locate(".") as landing:
        fd = landing.open(os.O_RDONLY | os.O_DIRECTORY)
    try:
        seen = {e.rel: (e.is_dir, e.is_file, e.is_symlink) for e in descend(fd)}
    finally:
        os.close(fd)
    assert seen["out_abs"] == (False, False, True)
    assert seen["in_rel"] == (False, False, True)
    assert seen["sub/f.txt"] == (False, True, False)
    assert not any(rel.startswith(("out_abs/", "out_rel/", "in_rel/")) for rel in seen)


SWAPPER = """
import os, sys
ws, outside = sys.argv[1], sys.argv[2]
os.symlink(outside, f"{ws}/link")
print("ready", flush=True)
while True:  # `d` is the real directory, then a link out, then the directory again
    os.rename(f"{ws}/d", f"{ws}/d.real")
    os.rename(f"{ws}/link", f"{ws}/d")
    os.rename(f"{ws}/d", f"{ws}/link")
    os.rename(f"{ws}/d.real", f"{ws}/d")
"""


def test_a_process_swapping_a_directory_for_a_link_out_never_leads_a_user_outside(
    tree: Tree, read_line: Callable[[subprocess.Popen[bytes], float], bytes]
) -> None:
    """Real concurrency beside the step-by-step swaps above: another process keeps exchanging
    a directory for a symlink out while the child's walk, the foreign agents' files and the
    parent's evidence read through it."""
    os.mkdir(f"{tree.root}/d")
    Path(tree.root, "d", "secret").write_text("harmless\n")
    workspace = Workspace(tree.root)
    files = ConfinedFiles(tree.root)
    swapper = subprocess.Popen(
        [sys.executable, "-I", "-c", SWAPPER, tree.root, tree.outside], stdout=subprocess.PIPE
    )
    try:
        assert read_line(swapper, 30) == b"ready\n"
        for _ in range(1500):
            try:
                with workspace.locate("d/secret") as landing:
                    fd = landing.open(os.O_RDONLY)
                with os.fdopen(fd, "rb") as f:
                    assert f.read() == b"harmless\n"
            except (OutsideWorkspace, OSError):
                pass
            try:
                assert files.read_text("d/secret") == "harmless\n"
            except FileRefused:
                pass
            kept, _ = check_artifacts(
                tree.root, [Artifact(path="d/secret", size=0, fs_type="file")], []
            )
            assert kept == [] or kept[0].size == len("harmless\n")
        assert swapper.poll() is None, "the swapper stopped: nothing was raced"
    finally:
        swapper.kill()
        swapper.wait(timeout=30)
        if swapper.stdout is not None:
            swapper.stdout.close()
    assert Path(tree.outside, "secret").read_text() == SECRET + "\n"
