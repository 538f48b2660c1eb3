"""Applying a change set (issue 34, points 3 and 7): all or nothing, each file replaced
atomically, refused on conflict with both sides' content, never through a symbolic link out of
the workspace, never what a layer changed after its change set was computed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.parent.process import layers
from tether.parent.run import apply, changes


def layered(tmp: Path) -> tuple[Path, layers.Layer, Path]:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "b.txt").write_text("b\n")
    plan = layers.LayerPlan("copy", str(ws), str(tmp / "layer"))
    layer = layers.make(plan)
    return ws, layer, Path(plan.upper)


def test_each_file_is_replaced_by_a_rename_never_written_in_place(tmp_path: Path) -> None:
    ws, layer, tree = layered(tmp_path)
    (tree / "a.txt").write_text("A\n")
    before = os.stat(ws / "a.txt").st_ino
    # A reader holding the old file keeps reading the old content.
    with open(ws / "a.txt") as held:
        assert apply.apply(changes.compute(layer)).state == "applied"
        assert held.read() == "a\n"
    assert (ws / "a.txt").read_text() == "A\n" and os.stat(ws / "a.txt").st_ino != before
    assert sorted(os.listdir(ws)) == ["a.txt", "sub"]  # no temporary or backup name left


def test_one_conflict_refuses_the_whole_change_set_and_shows_both_sides(tmp_path: Path) -> None:
    ws, layer, tree = layered(tmp_path)
    (tree / "a.txt").write_text("mine\n")
    (tree / "new.txt").write_text("new\n")
    (tree / "sub" / "b.txt").unlink()
    cs = changes.compute(layer)
    (ws / "new.txt").write_text("someone else's\n")  # after the change set was computed
    outcome = apply.apply(cs)
    assert outcome.state == "conflict" and outcome.paths == []
    [conflict] = outcome.conflicts
    assert conflict.path == "new.txt"
    assert (conflict.workspace, conflict.layer) == ("someone else's\n", "new\n")
    # Nothing of the rest was applied.
    assert (ws / "a.txt").read_text() == "a\n" and (ws / "sub" / "b.txt").exists()


def test_applying_never_follows_a_symbolic_link_out_of_the_workspace(tmp_path: Path) -> None:
    ws, layer, tree = layered(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tree / "sub" / "b.txt").write_text("B\n")
    (tree / "sub" / "c.txt").write_text("C\n")
    cs = changes.compute(layer)
    # The workspace's directory is swapped for a link to a directory outside it.
    os.rename(ws / "sub", tmp_path / "moved")
    os.symlink(outside, ws / "sub")
    outcome = apply.apply(cs)
    assert outcome.state == "conflict"
    assert all("link" in c.reason or "changed" in c.reason for c in outcome.conflicts)
    assert os.listdir(outside) == []


def test_a_layer_changed_after_its_change_set_was_computed_is_refused_and_undone(
    tmp_path: Path,
) -> None:
    ws, layer, tree = layered(tmp_path)
    (tree / "a.txt").write_text("A\n")
    (tree / "z.txt").write_text("z\n")
    cs = changes.compute(layer)
    (tree / "z.txt").write_text("swapped after the change set\n")
    outcome = apply.apply(cs)
    assert outcome.state == "failed" and "changed since" in outcome.message
    assert (ws / "a.txt").read_text() == "a\n" and not (ws / "z.txt").exists()
    assert sorted(os.listdir(ws)) == ["a.txt", "sub"]


def test_a_failure_while_committing_undoes_every_change_already_made(tmp_path: Path) -> None:
    ws, layer, tree = layered(tmp_path)
    (tree / "a.txt").write_text("A\n")
    (tree / "sub" / "b.txt").unlink()
    (tree / "sub").rmdir()
    cs = changes.compute(layer)
    # Someone puts a file in the directory the change set removes: found when it is committed.
    (ws / "sub" / "theirs.txt").write_text("theirs\n")
    outcome = apply.apply(cs)
    assert outcome.state == "conflict" and "new entries" in outcome.conflicts[0].reason
    assert (ws / "a.txt").read_text() == "a\n"
    assert (ws / "sub" / "b.txt").read_text() == "b\n"
    assert (ws / "sub" / "theirs.txt").read_text() == "theirs\n"
    assert sorted(os.listdir(ws)) == ["a.txt", "sub"]


def test_applying_the_same_change_set_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    ws, layer, tree = layered(tmp_path)
    (tree / "a.txt").write_text("A\n")
    cs = changes.compute(layer)
    assert apply.apply(cs).state == "applied"
    again = apply.apply(cs)
    assert again.state == "applied"
    assert (ws / "a.txt").read_text() == "A\n"


def test_as_root_what_is_applied_is_owned_as_its_directory_is(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the workspace another owner")
    ws, layer, tree = layered(tmp_path)
    os.chown(ws, 1000, 1000)
    (tree / "new.txt").write_text("n\n")
    (tree / "deep").mkdir()
    (tree / "deep" / "x").write_text("x\n")
    assert apply.apply(changes.compute(layer)).state == "applied"
    for p in ("new.txt", "deep", "deep/x"):
        st = os.lstat(ws / p)
        assert (st.st_uid, st.st_gid) == (1000, 1000), p
