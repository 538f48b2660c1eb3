"""cgroup v2 counts as a tier only where child cgroups really get the memory and pids controls."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.parent.process.host import _children_get_controllers, _enable_controllers

UNIFIED = Path("/sys/fs/cgroup/unified")


def test_enabling_asks_only_for_the_controllers_the_subtree_lacks(tmp_path: Path) -> None:
    control = tmp_path / "cgroup.subtree_control"
    control.write_text("pids\n")
    _enable_controllers(tmp_path)
    assert control.read_text() == "+memory"


def test_nothing_is_written_when_both_controllers_are_already_enabled(tmp_path: Path) -> None:
    control = tmp_path / "cgroup.subtree_control"
    control.write_text("cpu memory pids\n")
    _enable_controllers(tmp_path)
    assert control.read_text() == "cpu memory pids\n"


def test_a_directory_whose_children_get_no_limit_files_is_not_a_usable_parent(
    tmp_path: Path,
) -> None:
    assert _children_get_controllers(tmp_path) is False
    assert list(tmp_path.iterdir()) == []  # the probe cgroup is removed again


@pytest.mark.skipif(
    not (UNIFIED / "cgroup.controllers").exists()
    or {"memory", "pids"} <= set((UNIFIED / "cgroup.controllers").read_text().split()),
    reason="needs a hybrid host whose v2 mount lacks the memory and pids controllers",
)
def test_a_real_v2_hierarchy_without_the_controllers_gives_children_no_limit_files() -> None:
    assert _children_get_controllers(UNIFIED) is False
