"""The change set the parent computes from a layer (issue 34, points 2 and 7): what each
change holds, and every crafted entry of an upper directory refused by itself — a device node,
an absolute or climbing symbolic link, a hard link to a file outside the layer, a redirect
xattr, the repository's `.git` — while the rest is kept. Layers are crafted here directly, as a
hostile child would want them (an overlay's upper directory written without the overlay, a
copy's tree), so the parent's walk is what is tested."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.parent.process import layers
from tether.parent.run import apply, changes


def base(tmp: Path) -> Path:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("keep\n")
    (ws / "edit.txt").write_text("one\ntwo\n")
    (ws / "gone.txt").write_text("gone\n")
    (ws / "dir").mkdir()
    (ws / "dir" / "inner.txt").write_text("inner\n")
    (ws / "blob.bin").write_bytes(b"\0\1\2\3")
    return ws


def overlay_layer(tmp: Path, ws: Path) -> tuple[layers.Layer, Path]:
    plan = layers.LayerPlan("overlay", str(ws), str(tmp / "layer"))
    layer = layers.make(plan)
    return layer, Path(plan.upper)


def copy_layer(tmp: Path, ws: Path) -> tuple[layers.Layer, Path]:
    plan = layers.LayerPlan("copy", str(ws), str(tmp / "layer"))
    layer = layers.make(plan)
    return layer, Path(plan.upper)


def by_path(cs: object) -> dict[str, object]:
    return {c.path: c for c in cs.changes}  # type: ignore[attr-defined]


def refused(cs: object) -> dict[str, str]:
    return {r.path: r.reason for r in cs.refused}  # type: ignore[attr-defined]


def test_a_copy_layer_gives_added_modified_deleted_renamed_with_diffs_hashes_and_modes(
    tmp_path: Path,
) -> None:
    ws = base(tmp_path)
    layer, tree = copy_layer(tmp_path, ws)
    (tree / "edit.txt").write_text("one\nTWO\n")
    (tree / "new.sh").write_text("echo hi\n")
    os.chmod(tree / "new.sh", 0o4755)  # setuid: never carried
    (tree / "gone.txt").unlink()
    os.rename(tree / "blob.bin", tree / "moved.bin")
    os.symlink("keep.txt", tree / "link")
    cs = changes.compute(layer)
    got = by_path(cs)
    assert set(got) == {"edit.txt", "new.sh", "gone.txt", "moved.bin", "link"}
    edit = got["edit.txt"]
    assert edit.change == "modified" and edit.diff is not None and "-two\n+TWO" in edit.diff
    assert edit.base_sha256 is not None and edit.sha256 != edit.base_sha256
    assert got["new.sh"].change == "added" and got["new.sh"].mode == 0o755
    assert got["gone.txt"].change == "deleted"
    moved = got["moved.bin"]
    assert moved.change == "renamed" and moved.old_path == "blob.bin" and moved.binary
    assert moved.diff is None and moved.size == 4
    assert got["link"].fs_type == "symlink" and got["link"].target == "keep.txt"
    assert cs.refused == [] and cs.files == 5


def test_an_overlay_upper_gives_whiteouts_and_opaque_directories_as_deletions(
    tmp_path: Path,
) -> None:
    ws = base(tmp_path)
    layer, upper = overlay_layer(tmp_path, ws)
    os.mknod(upper / "gone.txt", stat.S_IFCHR, 0)  # a whiteout: char 0:0
    (upper / "dir").mkdir()
    os.setxattr(upper / "dir", "trusted.overlay.opaque", b"y")
    (upper / "dir" / "fresh.txt").write_text("fresh\n")
    (upper / "edit.txt").write_text("one\ntwo\nthree\n")
    (upper / "same.txt").write_text("keep\n")  # keep.txt's content under a new name
    cs = changes.compute(layer)
    got = by_path(cs)
    assert got["gone.txt"].change == "deleted"
    assert got["dir/inner.txt"].change == "deleted"  # hidden by the opaque directory
    assert got["dir/fresh.txt"].change == "added"
    assert got["edit.txt"].change == "modified"
    assert "dir" not in got  # the directory itself is the same directory
    assert cs.refused == []


def test_a_file_copied_up_unchanged_is_no_change(tmp_path: Path) -> None:
    ws = base(tmp_path)
    layer, upper = overlay_layer(tmp_path, ws)
    (upper / "keep.txt").write_text("keep\n")  # an open for writing copies it up
    assert changes.compute(layer).changes == []


@pytest.mark.parametrize("kind", ["overlay", "copy"])
def test_crafted_entries_are_refused_one_by_one_and_the_rest_is_kept(
    tmp_path: Path, kind: str
) -> None:
    ws = base(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's secret\n")
    layer, top = (overlay_layer if kind == "overlay" else copy_layer)(tmp_path, ws)
    (top / "fine.txt").write_text("fine\n")
    os.symlink("/etc/passwd", top / "abs-link")
    os.symlink("../../outside.txt", top / "climb-link")
    (top / "sub").mkdir(exist_ok=True)
    os.symlink("../../x", top / "sub" / "climb2")
    os.symlink("../keep.txt", top / "sub" / "inside-link")  # stays inside: kept
    os.mknod(top / "disk", stat.S_IFBLK | 0o600, os.makedev(8, 0))
    os.mknod(top / "tty", stat.S_IFCHR | 0o600, os.makedev(5, 0))
    os.mkfifo(top / "fifo")
    os.link(outside, top / "hard.txt")  # a hard link to a file outside the layer
    (top / ".git").mkdir(exist_ok=True)
    (top / ".git" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    if kind == "overlay":
        (top / "redirected").mkdir()
        os.setxattr(top / "redirected", "trusted.overlay.redirect", b"/../../etc")
    cs = changes.compute(layer)
    got, out = by_path(cs), refused(cs)
    assert "fine.txt" in got and "sub/inside-link" in got
    expected = {"abs-link", "climb-link", "sub/climb2", "disk", "tty", "fifo", "hard.txt", ".git"}
    if kind == "overlay":
        expected.add("redirected")
    assert expected <= set(out), out
    assert not expected & set(got)
    assert "absolute" in out["abs-link"] and "climbs" in out["climb-link"]
    assert "device" in out["disk"] and "hard link" in out["hard.txt"]
    assert ".git" in out[".git"]
    # Nothing of the outside file reached the change set.
    assert all(
        c.sha256
        != changes._hash(os.open(outside, os.O_RDONLY), os.stat(outside), layers.LayerLimits())[0]
        for c in cs.changes
    )


def test_a_change_set_past_its_bounds_is_refused_as_a_whole(tmp_path: Path) -> None:
    ws = base(tmp_path)
    layer, tree = copy_layer(tmp_path, ws)
    for i in range(5):
        (tree / f"f{i}.txt").write_text("x" * 100)
    with pytest.raises(changes.ChangesTooLarge, match="changed paths"):
        changes.compute(layer, layers.LayerLimits(max_change_files=3))
    with pytest.raises(changes.ChangesTooLarge, match="bytes"):
        changes.compute(layer, layers.LayerLimits(max_change_bytes=250))


def test_a_plain_copy_past_its_bound_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    ws = base(tmp_path)
    (ws / "big.bin").write_bytes(b"x" * 10_000)
    plan = layers.LayerPlan("copy", str(ws), str(tmp_path / "layer"))
    with pytest.raises(layers.LayerError, match="more than 1000 bytes"):
        layers.make(plan, layers.LayerLimits(max_copy_bytes=1000))
    assert not (tmp_path / "layer").exists()


def test_the_base_changed_since_the_layer_was_made_is_marked_and_never_applied(
    tmp_path: Path,
) -> None:
    ws = base(tmp_path)
    layer, tree = copy_layer(tmp_path, ws)
    (tree / "edit.txt").write_text("mine\n")
    (ws / "edit.txt").write_text("theirs\n")
    cs = changes.compute(layer)
    [edit] = cs.changes
    assert edit.base_sha256 is None and edit.note == changes.BASE_CHANGED
    outcome = apply.apply(cs)
    assert outcome.state == "conflict"
    [conflict] = outcome.conflicts
    assert conflict.workspace == "theirs\n" and conflict.layer == "mine\n"
    assert (ws / "edit.txt").read_text() == "theirs\n"


# --- a property: applying a copy's change set makes the workspace what the copy is ------------

names = st.sampled_from(["a", "b", "c", "d.txt", "e.bin"])
contents = st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b + b"\0"))


@st.composite
def edits(draw: st.DrawFn) -> list[tuple[str, str, object]]:
    out = []
    for _ in range(draw(st.integers(0, 8))):
        op = draw(st.sampled_from(["write", "delete", "mkdir", "rename", "chmod", "symlink"]))
        path = "/".join(draw(st.lists(names, min_size=1, max_size=2)))
        out.append((op, path, draw(contents)))
    return out


def _tree(root: Path) -> dict[str, object]:
    seen: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                seen[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                seen[rel] = ("dir", stat.S_IMODE(p.stat().st_mode))
            else:
                seen[rel] = ("file", p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return seen


def _edit(tree: Path, op: str, path: str, content: object) -> None:
    p = tree / path
    try:
        if op == "write":
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content.encode() if isinstance(content, str) else content)  # type: ignore[union-attr]
        elif op == "delete":
            if p.is_dir() and not p.is_symlink():
                import shutil

                shutil.rmtree(p)
            else:
                p.unlink()
        elif op == "mkdir":
            p.mkdir(parents=True)
        elif op == "rename":
            os.rename(p, tree / (path + "-moved"))
        elif op == "chmod" and not p.is_symlink():
            os.chmod(p, 0o700 if p.is_dir() else 0o600)
        elif op == "symlink":
            p.parent.mkdir(parents=True, exist_ok=True)
            os.symlink("a", p)
    except OSError:
        pass


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=edits(), after=edits())
def test_applying_a_copys_change_set_makes_the_workspace_what_the_copy_holds(
    tmp_path_factory: pytest.TempPathFactory,
    before: list[tuple[str, str, object]],
    after: list[tuple[str, str, object]],
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    ws = tmp / "ws"
    ws.mkdir()
    for e in before:
        _edit(ws, *e)
    layer, tree = copy_layer(tmp, ws)
    for e in after:
        _edit(tree, *e)
    cs = changes.compute(layer)
    outcome = apply.apply(cs)
    if cs.refused:
        return  # a link the walk refused (none here climb out; kept for safety)
    assert outcome.state == "applied", outcome
    assert _tree(ws) == _tree(tree)


def test_what_a_task_output_shows_the_model_of_a_change_set_is_bounded(tmp_path: Path) -> None:
    from tether.parent.delegation.output import MODEL_CHANGES, for_model

    ws = base(tmp_path)
    layer, tree = copy_layer(tmp_path, ws)
    for i in range(MODEL_CHANGES + 20):
        (tree / f"f{i:04}.txt").write_text("line\n" * 50)
    cs = changes.compute(layer)
    shown = for_model(cs, budget=10_000)
    assert len(shown.changes) == MODEL_CHANGES and shown.files == cs.files == MODEL_CHANGES + 20
    diffs = [c.diff for c in shown.changes if c.diff is not None]
    assert sum(len(d.encode()) for d in diffs) <= 10_000
    assert any("left out" in c.note for c in shown.changes)
