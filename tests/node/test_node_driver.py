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


SCRIPT = """{"turns": [
  {"text": "Listing.", "toolCalls": [{"name": "list_dir", "arguments": {"path": "."}}]},
  {"text": "Reading.", "toolCalls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
  {"text": "Done.", "toolCalls": [{"name": "complete", "arguments": {
    "summary": "one TODO in notes.txt", "paths": ["notes.txt", "CHANGELOG.md"]}}]}
]}"""


def test_the_node_driver_runs_the_python_child_and_prints_its_run_result(
    node: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("TODO: ship it\n")
    script = tmp_path / "explore.json"
    script.write_text(SCRIPT)
    done = drive(
        node, "--script", str(script), "--workspace", str(ws), "--agent", "explorer", "Look."
    )
    assert done.returncode == 0, done.stderr
    result = result_of(done)
    assert result["success"] is True and result["status"] == "completed"
    assert result["summary"] == "one TODO in notes.txt"
    assert [Path(a["path"]).name for a in result["artifacts"]] == ["notes.txt"]
    assert [s["path"] for s in result["skipped"]] == ["CHANGELOG.md"]
    assert result["iterationCount"] == 3
    assert result["failure"] is None
    assert "tether-child" in done.stderr
    events = [ln for ln in done.stderr.splitlines() if ln.startswith("event run-1 ")]
    assert [int(ln.split()[2].lstrip("#")) for ln in events] == list(range(len(events)))
    assert events[0].split()[3] == "started"
    calls = [ln.split()[4] for ln in events if ln.split()[3] == "tool_call"]
    assert calls == ["list_dir", "read_file", "complete"]
    assert any(" tool_result read_file: " in ln and "TODO: ship it" in ln for ln in events)


def test_the_node_driver_runs_the_explorer_example_to_completion(node: str) -> None:
    example = REPO / "examples" / "explorer.json"
    done = drive(
        node,
        "--script",
        str(example),
        "--workspace",
        str(REPO / "examples" / "workspace"),
        "--agent",
        "explorer",
        "What needs doing?",
    )
    assert done.returncode == 0, done.stderr
    result = result_of(done)
    assert result["success"] is True
    assert result["iterationCount"] == len(json.loads(example.read_text())["turns"])


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
