"""The demo runs end to end and shows each result: the report, the crash, the budget, the hang,
and an orchestrated run (parallel explorers, a tester's change failed, fixed and verified)."""

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
    # 5. the orchestrated run
    orchestrated = out[out.index("\n5. An orchestrator delegates") :]
    assert "completed: adjust() now refuses a delta" in orchestrated
    assert "call-todos explorer 'find the TODO notes': completed" in orchestrated
    assert "call-tests explorer 'how adjust() is tested': completed" in orchestrated
    assert "changed: inventory.py, tests/__init__.py, tests/test_adjust.py" in orchestrated
    assert "verification: PASS after 1 fix cycle(s)" in orchestrated
    roles = [line.split()[1:3] for line in orchestrated.splitlines() if line.startswith("  sa-")]
    assert roles == [
        ["explorer", "task"],
        ["explorer", "task"],
        ["tester", "task"],
        ["verifier", "verifier"],
        ["tester", "fix"],
        ["verifier", "verifier"],
    ]
    assert "total: 6 sub-agent run(s)" in orchestrated
    assert "if level < 0:" in orchestrated  # the fixed file, as the run left it
    # The explorers overlapped: both started before the first one completed.
    err = got.stderr.splitlines()
    first_done = min(i for i, line in enumerate(err) if "explorer" in line and "completed:" in line)
    starts = [i for i, line in enumerate(err) if "explorer" in line and "started (task" in line]
    assert len(starts) == 2 and max(starts) < first_done
    assert not (DEMO.parent / "workspace" / "tests").exists()
