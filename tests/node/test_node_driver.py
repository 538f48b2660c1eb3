"""The JavaScript driver in examples/node-driver: it runs tether's Python child, answers its
model turns from a script, streams the events to stderr and prints the RunResult."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "examples" / "node-driver" / "driver.js"


def drive(node: str, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "TETHER_PYTHON": python}
    return subprocess.run(
        [node, str(DRIVER), *args], capture_output=True, text=True, timeout=30, env=env
    )


def result_of(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout)


def test_the_node_driver_runs_the_python_child_and_prints_its_run_result(node: str) -> None:
    done = drive(
        node,
        "--script",
        str(REPO / "examples" / "explorer.json"),
        "--workspace",
        str(REPO / "examples" / "workspace"),
        "--agent",
        "explorer",
        "What needs doing?",
    )
    assert done.returncode == 0, done.stderr
    result = result_of(done)
    assert result["success"] is True and result["status"] == "completed"
    assert result["summary"].startswith("2 TODOs")
    assert sorted(Path(a["path"]).name for a in result["artifacts"]) == [
        "README.md",
        "inventory.py",
    ]
    assert [s["path"] for s in result["skipped"]] == ["CHANGELOG.md"]
    turns = json.loads((REPO / "examples" / "explorer.json").read_text())["turns"]
    assert result["iterationCount"] == len(turns)
    assert "tether-child" in done.stderr
    events = [ln for ln in done.stderr.splitlines() if ln.startswith("event run-1 ")]
    assert [int(ln.split()[2].lstrip("#")) for ln in events] == list(range(len(events)))
    assert events[0].split()[3] == "started"
    assert any(" tool_call complete " in ln for ln in events)


def test_the_node_driver_exits_1_with_the_failure_when_the_run_fails(
    node: str, tmp_path: Path
) -> None:
    script = tmp_path / "chat.json"
    script.write_text('[{"text": "one"}, {"text": "two"}]')
    done = drive(
        node,
        "--script",
        str(script),
        "--workspace",
        str(tmp_path),
        "--max-iterations",
        "2",
        "Chat.",
    )
    assert done.returncode == 1, done.stderr
    result = result_of(done)
    assert result["success"] is False
    assert result["failure"]["kind"] == "budget_exhausted"
    assert result["summary"] == "two"


def test_the_node_driver_cancels_a_run_at_its_timeout_and_the_child_answers_aborted(
    node: str, tmp_path: Path
) -> None:
    script = tmp_path / "slow.json"
    script.write_text('[{"text": "thinking", "delay": 30}]')
    done = drive(
        node, "--script", str(script), "--workspace", str(tmp_path), "--timeout", "0.5", "Think."
    )
    assert done.returncode == 1, done.stderr
    result = result_of(done)
    assert result["status"] == "aborted"
    assert result["failure"]["kind"] == "cancelled"
    assert result["message"] == "the run was cancelled: the driver's 0.5s timeout passed"


def test_the_node_driver_reports_a_python_that_cannot_start(node: str, tmp_path: Path) -> None:
    script = tmp_path / "any.json"
    script.write_text("[]")
    done = drive(node, "--script", str(script), "Hi.", python=str(tmp_path / "no-python"))
    assert done.returncode == 1
    result = result_of(done)
    assert result["failure"]["kind"] == "spawn_failed"
    assert "cannot start" in result["message"]
