"""Smoke test of `benchmarks.mcp`: one round of each figure runs and is printed (no timing is
asserted here; timings belong to the benchmark's own runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_the_mcp_benchmark_measures_each_figure() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.mcp", "--starts", "1", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == ["start", "sdk_import", "task_schema", "plain", "mcp", "overhead"]
