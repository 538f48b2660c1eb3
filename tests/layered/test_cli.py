"""The command line of layered workspaces: `tether run --workspace-mode layered --json` keeps
its change set, `tether apply RESULT.json` applies it later (exit 1 on a conflict, nothing
applied), `--discard` throws the layer away, `tether doctor` says which layer this host gives,
a definitions file's `workspaceMode` is read, and `tether orchestrate --workspace-mode layered
--apply never` hands back its sub-agents' change sets for `tether apply` to apply later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.parent.delegation.files import load_definitions

TETHER = [sys.executable, "-m", "tether.parent.cli"]


def _turns(tmp: Path, command: str) -> str:
    path = tmp / "turns.json"
    path.write_text(
        json.dumps(
            {
                "turns": [
                    {"toolCalls": [{"name": "bash", "arguments": {"command": command}}]},
                    {"toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]},
                ]
            }
        )
    )
    return f"scripted:{path}"


def _layered_run(tmp: Path, ws: Path, command: str) -> Path:
    got = subprocess.run(
        [
            *TETHER,
            "run",
            "x",
            "--agent",
            "tester",
            "--workspace",
            str(ws),
            "--model",
            _turns(tmp, command),
            "--workspace-mode",
            "layered",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    out = tmp / "result.json"
    out.write_text(got.stdout)
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("base\n")
    return ws


def test_tether_apply_applies_a_kept_change_set_and_refuses_a_conflict(
    tmp_path: Path, ws: Path
) -> None:
    result = _layered_run(tmp_path, ws, "echo mine > f.txt")
    assert (ws / "f.txt").read_text() == "base\n"
    layer = json.loads(result.read_text())["changes"]["layer"]
    assert os.path.isdir(layer)
    (ws / "f.txt").write_text("someone else's\n")
    refused = subprocess.run([*TETHER, "apply", str(result)], capture_output=True, text=True)
    assert refused.returncode == 1, refused.stderr
    assert "conflict at f.txt" in refused.stdout and "someone else's" in refused.stdout
    assert (ws / "f.txt").read_text() == "someone else's\n" and os.path.isdir(layer)
    (ws / "f.txt").write_text("base\n")
    applied = subprocess.run([*TETHER, "apply", str(result)], capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.startswith("applied: f.txt")
    assert (ws / "f.txt").read_text() == "mine\n" and not os.path.exists(layer)


def test_tether_apply_discard_throws_the_layer_away_and_refuses_a_forged_path(
    tmp_path: Path, ws: Path
) -> None:
    result = _layered_run(tmp_path, ws, "echo mine > f.txt")
    data = json.loads(result.read_text())
    layer = data["changes"]["layer"]
    forged = tmp_path / "forged.json"
    data["changes"]["layer"] = str(tmp_path)  # not a layer: never removed
    forged.write_text(json.dumps(data))
    bad = subprocess.run(
        [*TETHER, "apply", "--discard", str(forged)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and tmp_path.exists()
    gone = subprocess.run(
        [*TETHER, "apply", "--discard", str(result)], capture_output=True, text=True
    )
    assert gone.returncode == 0, gone.stderr
    assert not os.path.exists(layer) and (ws / "f.txt").read_text() == "base\n"


def test_tether_doctor_says_which_layer_this_host_gives() -> None:
    got = subprocess.run([*TETHER, "doctor", "--json"], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    layers = json.loads(got.stdout)["layers"]
    assert layers["method"] in ("overlay", "overlay-userns", "reflink", "copy")
    assert layers["otherwise"] in ("reflink", "copy")
    text = subprocess.run([*TETHER, "doctor"], capture_output=True, text=True, timeout=120).stdout
    assert "layered workspaces: a sandboxed run gets" in text


def test_a_definitions_file_names_a_workspace_mode(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(
        '[[agent]]\ntype = "coder"\ndescription = "Writes code."\nreadOnly = false\n'
        'workspaceMode = "layered"\n'
    )
    [coder] = load_definitions(path)
    assert coder.workspace_mode == "layered"
    path.write_text('[[agent]]\ntype = "coder"\ndescription = "x"\nworkspaceMode = "both"\n')
    with pytest.raises(ValueError, match="workspaceMode"):
        load_definitions(path)


def test_tether_apply_takes_a_task_output_or_a_bare_change_set(tmp_path: Path, ws: Path) -> None:
    result = _layered_run(tmp_path, ws, "echo mine > f.txt")
    changes = json.loads(result.read_text())["changes"]
    as_output = tmp_path / "output.json"
    as_output.write_text(json.dumps({"summary": "x", "status": "completed", "changes": changes}))
    got = subprocess.run([*TETHER, "apply", str(as_output)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert (ws / "f.txt").read_text() == "mine\n"
    nothing = tmp_path / "nothing.json"
    nothing.write_text('{"summary": "x"}')
    bad = subprocess.run([*TETHER, "apply", str(nothing)], capture_output=True, text=True)
    assert bad.returncode == 2 and "no change set" in bad.stderr


def test_tether_orchestrate_layered_with_apply_never_leaves_the_workspace_and_apply_applies_later(
    tmp_path: Path, ws: Path
) -> None:
    """`--workspace-mode` and `--apply` on `tether orchestrate`: a build sub-agent's change set
    comes back in its task's output, the workspace untouched, and `tether apply` on that
    output applies it after the orchestration has ended."""
    script = tmp_path / "model.json"
    orchestrator = {
        "when": "You are an orchestrator",
        "turns": [
            {
                "toolCalls": [
                    {
                        "name": "task",
                        "id": "c1",
                        "arguments": {
                            "subagent_type": "tester",
                            "description": "edit f",
                            "prompt": "MARK-F: write mine into f.txt",
                        },
                    }
                ]
            },
            {"toolCalls": [{"name": "complete", "arguments": {"summary": "delegated"}}]},
        ],
    }
    tester = {
        "when": "MARK-F",
        "turns": [
            {"toolCalls": [{"name": "bash", "arguments": {"command": "echo mine > f.txt"}}]},
            {"toolCalls": [{"name": "complete", "arguments": {"summary": "wrote f.txt"}}]},
        ],
    }
    script.write_text(json.dumps({"scripts": [orchestrator, tester]}))
    got = subprocess.run(
        [
            *TETHER,
            "orchestrate",
            "Edit f.txt.",
            "--workspace",
            str(ws),
            "--model",
            f"scripted:{script}",
            "--workspace-mode",
            "layered",
            "--apply",
            "never",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert got.returncode == 0, got.stderr[-4000:]
    [task] = json.loads(got.stdout)["tasks"]
    output = task["output"]
    assert output["workspaceMode"] == "layered" and output["applied"]["state"] == "not_applied"
    assert [c["path"] for c in output["changes"]["changes"]] == ["f.txt"]
    assert (ws / "f.txt").read_text() == "base\n"  # nothing applied yet
    saved = tmp_path / "output.json"
    saved.write_text(json.dumps(output))
    applied = subprocess.run([*TETHER, "apply", str(saved)], capture_output=True, text=True)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (ws / "f.txt").read_text() == "mine\n"
    assert not os.path.exists(output["changes"]["layer"])  # applied, then removed
