"""The mount layout of a sandbox (`mounts.layout`): pure rules, tested without mounting."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether.contain.mounts import PRIVATE_TMP, can_traverse, layout

OPEN = {"/", "/usr", "/work", "/work/ws", "/opt"}


def traversable(path: str) -> bool:
    """/root and /home/u are closed; everything else is open."""
    return path not in ("/root", "/home/u")


def test_a_home_the_sandbox_cannot_enter_is_covered_and_the_interpreter_moved_back() -> None:
    got = layout(["/usr", "/root/.pyenv/versions/3.11.7", "/work/venv"], "/work/ws", traversable)
    assert ("/root", 0o755) in got.covers
    assert got.restore == ["/root/.pyenv/versions/3.11.7"]
    assert got.workspace == "/work/ws"


def test_private_temp_dirs_are_covered_and_grants_inside_them_come_back() -> None:
    got = layout(["/tmp/scripts/child.py", "/usr"], "/tmp/pytest/ws", traversable)
    assert ("/tmp", 0o1777) in got.covers
    assert ("/dev/shm", 0o1777) in got.covers and ("/var/tmp", 0o1777) in got.covers
    assert got.restore == ["/tmp/scripts/child.py"]
    assert got.workspace == "/tmp/pytest/ws"


def test_grants_inside_another_grant_or_the_workspace_are_not_cloned_twice() -> None:
    got = layout(["/root/a", "/root/a/b/c", "/root/ws/tools", "/root/z"], "/root/ws", traversable)
    assert got.restore == ["/root/a", "/root/z"]
    assert got.covers.count(("/root", 0o755)) == 1


def test_only_the_highest_closed_ancestor_is_covered() -> None:
    got = layout(["/home/u/project/lib"], None, traversable)
    assert ("/home/u", 0o755) in got.covers
    assert got.restore == ["/home/u/project/lib"]


def test_nothing_is_covered_or_cloned_when_every_ancestor_is_open() -> None:
    got = layout(["/usr", "/work/venv/lib"], "/work/ws", lambda _: True, private_tmp=())
    assert got.covers == [] and got.restore == []


paths = st.lists(
    st.lists(
        st.sampled_from(["root", "home", "u", "a", "b", "tmp", "w"]), min_size=1, max_size=4
    ).map(lambda parts: "/" + "/".join(parts)),
    max_size=8,
)


@given(paths, st.none() | paths.filter(bool).map(lambda p: p[0]))
def test_every_grant_is_visible_after_the_layout(reads: list[str], ws: str | None) -> None:
    """Property: each grant is either under no cover (visible as is), inside a restored clone,
    or inside the workspace; and no cover lies inside another."""
    got = layout(reads, ws, traversable)
    covers = [c for c, _ in got.covers]

    def under(p: str, root: str) -> bool:
        return p == root or p.startswith(root.rstrip("/") + "/")

    for a in covers:
        assert not any(a != b and under(a, b) for b in covers)
    for path in [os.path.normpath(p) for p in reads]:
        hidden = any(under(path, c) for c in covers)
        restored = any(under(path, r) for r in got.restore)
        in_ws = ws is not None and under(path, ws)
        closed = path != ws and not traversable(path)  # rebuilt: only what is inside comes back
        assert not hidden or restored or in_ws or closed, (path, got)
        assert not (closed and path in got.restore), (path, got)


def test_a_granted_directory_the_sandbox_cannot_enter_is_rebuilt_with_only_what_is_named() -> None:
    """The directory of an agent file, closed (0700): covered, and only the file and the
    workspace beside it come back, never the directory as it is (it would stay closed)."""
    got = layout(["/home/u", "/home/u/agent.py", "/usr"], "/home/u/ws", traversable)
    assert ("/home/u", 0o755) in got.covers
    assert got.restore == ["/home/u/agent.py"]
    got = layout(["/tmp/d", "/tmp/d/agent.py"], "/tmp/d/ws", lambda d: d != "/tmp/d")
    assert [c for c, _ in got.covers if c.startswith("/tmp")] == ["/tmp"]
    assert got.restore == ["/tmp/d/agent.py"]


def test_traversal_follows_the_mode_bits_for_owner_group_and_others(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    st_ = d.stat()
    d.chmod(0o700)
    assert can_traverse(str(d), st_.st_uid, [st_.st_gid])
    assert not can_traverse(str(d), 4242, [4242])
    d.chmod(0o710)
    assert can_traverse(str(d), 4242, [st_.st_gid])
    d.chmod(0o701)
    assert can_traverse(str(d), 4242, [4242])
    assert can_traverse(str(tmp_path / "missing"), 4242, [4242])


def _reference_layout(
    reads: list[str], workspace: str | None, traversable: Callable[[str], bool]
) -> tuple[list[tuple[str, int]], list[str]]:
    """The layout's rules spelled out pair by pair (what `layout` computed before it asked a
    set of roots instead): the oracle of the property below."""

    def under(p: str, root: str) -> bool:
        return p == root or p.startswith(root.rstrip("/") + "/")

    covers: dict[str, int] = {d: 0o1777 for d in PRIVATE_TMP}
    grants = sorted({os.path.normpath(p) for p in reads}, key=lambda p: (p.count("/"), p))
    closed = {g for g in grants if g != workspace and not traversable(g)}
    for path in [*grants, *([workspace] if workspace else [])]:
        if any(under(path, c) for c in covers):
            continue
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if any(under(ancestor, c) for c in covers):
                break
            if not traversable(ancestor):
                covers[ancestor] = 0o755
                break
    for path in sorted(closed):
        if not any(under(path, c) for c in covers):
            covers[path] = 0o755
    ordered = sorted(covers, key=lambda c: (c.count("/"), c))
    outer = [c for c in ordered if not any(c != o and under(c, o) for o in ordered)]
    restore: list[str] = []
    for path in grants:
        if path in closed or (workspace and under(path, workspace)):
            continue
        if any(under(path, r) for r in restore):
            continue
        if any(under(path, c) for c in outer):
            restore.append(path)
    return [(c, covers[c]) for c in outer], restore


names = st.sampled_from(["root", "home", "u", "a", "b", "tmp", "w", "dev", "shm", "var"])
deep_paths = st.lists(
    st.lists(names, min_size=1, max_size=5).map(lambda parts: "/" + "/".join(parts)),
    max_size=30,
)


@given(deep_paths, st.none() | deep_paths.filter(bool).map(lambda p: p[0]), deep_paths)
def test_the_layout_is_the_one_its_rules_give_pair_by_pair(
    reads: list[str], ws: str | None, closed_dirs: list[str]
) -> None:
    closed = set(closed_dirs)
    asked: list[str] = []

    def searchable(path: str) -> bool:
        asked.append(path)
        return path not in closed

    got = layout(reads, ws, searchable)
    covers, restore = _reference_layout(reads, ws, lambda p: p not in closed)
    assert sorted(got.covers) == sorted(covers)
    assert got.restore == restore
    assert len(asked) == len(set(asked)), "a directory was looked at twice"
