"""Bring your own agent: the child hosts a user's agent under the same supervision."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.parent.models.scripted import ScriptedModel
from tether.parent.supervisor import Supervisor

AGENT = Path(__file__).resolve().parents[2] / "examples" / "agents" / "summarizer.py"
SCRIPT = '[{"text": "Two files about inventory."}]'


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.txt").write_text("b\n")
    return tmp_path


@pytest.mark.anyio
async def test_a_custom_agent_named_by_file_and_callable_runs_in_the_child(
    workspace: Path,
) -> None:
    events = []
    async with Supervisor() as sup:
        result = await sup.run(
            "What is here?",
            agent=f"{AGENT}:make",
            workspace=workspace,
            model=ScriptedModel.from_json(SCRIPT),
            on_event=events.append,
        )
    assert result.success, result
    assert result.summary == "Two files about inventory."
    texts = [e.data.get("text") for e in events if getattr(e, "kind", None) == "text"]
    assert "2 entries" in texts


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("no/such/file.py:make", "no such file"),
        ("pkg.mod:not an identifier", "expected module:callable"),
        ("9bad.module:make", "not a module name"),
    ],
)
async def test_a_bad_custom_agent_spec_is_refused_before_spawning(
    workspace: Path, spec: str, complaint: str
) -> None:
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match=complaint):
            await sup.start("x", agent=spec, workspace=workspace)


def test_the_cli_hosts_a_custom_agent_with_agent_module_callable(workspace: Path) -> None:
    script = workspace / "script.json"
    script.write_text(SCRIPT)
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.parent.cli",
            "run",
            "What is here?",
            "--json",
            "--agent",
            f"{AGENT}:make",
            "--model",
            f"scripted:{script}",
            "--workspace",
            str(workspace),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["summary"] == "Two files about inventory."
