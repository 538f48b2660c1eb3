"""The demo runs end to end and shows each result: the report, the crash, the budget, the hang,
an orchestrated run (parallel explorers, a tester's change failed, fixed and verified), two
build sub-agents in layered workspaces editing one file at once (the second's conflict), and
three attempts at one change with the verifier choosing."""

from __future__ import annotations

import re
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
    orchestrated = out[out.index("\n5. An orchestrator delegates") : out.index("\n6. ")]
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
    # 6. two build sub-agents editing one file at once, each in its own layer
    layered = out[out.index("\n6. Two build sub-agents") : out.index("\n7. ")]
    assert "call-guard tester 'guard adjust() below zero': completed" in layered
    assert "call-note tester 'reword the TODO note': conflict" in layered
    assert "conflict in call-note at inventory.py:" in layered
    # The second saw the workspace as it was when it started: its side holds the TODO's
    # replacement, not the first one's guard.
    layer_side = layered[layered.index("    layer:") :]
    assert "# Stock may not go below zero" in layer_side and "raise ValueError" not in layer_side
    # 7. three attempts, the verifier choosing
    attempts = out[out.index("\n7. Three attempts") :]
    # Which attempt writes which version depends on which asks its model first.
    verdicts = re.findall(r"attempt (\d): completed, verdict (PASS|FAIL): (.*)", attempts)
    assert sorted(v for _, v, _ in verdicts) == ["FAIL", "FAIL", "PASS"]
    [(passed, _, summary)] = [v for v in verdicts if v[1] == "PASS"]
    assert "sums the values" in summary
    assert (
        f"taken: attempt {passed} (attempt {passed} was the first to pass its verifier)" in attempts
    )
    assert "return sum(STOCK.values())" in attempts
    assert "raise ValueError" in attempts  # case 6's guard, applied, is still there
