"""The exit-cost probe (`benchmarks/exit_cost.py`) times real forks and reaps each one."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _probe() -> ModuleType:
    """benchmarks/exit_cost.py, loaded by path (the repository root is not on the import path)."""
    spec = importlib.util.spec_from_file_location(
        "_bench_exit_cost", ROOT / "benchmarks" / "exit_cost.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


exit_seen_after = _probe().exit_seen_after

pytestmark = pytest.mark.timeout(60)


def test_the_exit_probe_times_every_fork_and_reaps_each_child() -> None:
    seen = exit_seen_after(heap_mib=2, touch_mib=1, forks=6)
    assert len(seen) == 6
    # Each figure is the time from a child's last instruction to its exit being seen: positive
    # and far below a second for a 2 MiB process.
    assert all(0 < ms < 1000 for ms in seen), seen
