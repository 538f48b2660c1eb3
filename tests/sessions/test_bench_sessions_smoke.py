"""Smoke test of the session store benchmark: `--quick` measures and prints every figure.

No timing is asserted (timings belong to `scripts/bench-sessions`, never to tests).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FIGURES = [
    *(
        f"{sync}.{what}"
        for sync in ("full", "normal")
        for what in ("append_turn", "append_turn_long", "heartbeat", "report", "acquire_release")
    ),
    "read.list_agents",
    "read.get",
    "read.transcript",
    "blob.append_turn_100",
    "blob.append_turn_1000",
]


def test_the_quick_session_benchmark_prints_every_figure(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.sessions", "--quick", "--dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rows = {line.split("|")[1].strip(" `"): line for line in out.splitlines() if "| `" in line}
    assert sorted(rows) == sorted(FIGURES)
    for key, line in rows.items():
        median = float(line.split("|")[4])
        assert median > 0, key
    assert list(tmp_path.iterdir()) == []  # it cleans up after itself
