"""The demo runs end to end and shows each result: the report, the crash, the budget, the hang."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_the_demo_shows_a_report_a_crash_an_exhausted_budget_and_a_timeout() -> None:
    got = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, timeout=90, check=False
    )
    assert got.returncode == 0, got.stderr
    out = got.stdout
    assert "completed: 2 TODOs" in out
    assert "artifact" in out and "TODO-REPORT.md" in out
    assert "# TODO report" in out
    assert "error (crashed): the child crashed (SIGSEGV)" in out
    assert "error (budget_exhausted)" in out
    assert "error (timeout)" in out
    assert "tool write_file" in got.stderr  # progress while it runs
    assert not (DEMO.parent / "workspace" / "TODO-REPORT.md").exists()
