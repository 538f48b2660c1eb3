"""A task's result is checked again when the gate delivers it to the orchestrator's model (or an
MCP client): an artifact that changed after the run's own check — rewritten, or swapped for a
link out by a process the sub-agent left behind — is delivered under `skipped`, never as it
was first seen. Runner doubles; `tests/e2e/test_delivery_recheck.py` holds the rule itself."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from delegation_runners import Recorder, ok

from tether.parent.delegation import Delegator, RunRequest, TaskOutput, builtin_registry
from tether.parent.run.evidence import CHANGED, check_artifacts
from tether.protocol.messages import Artifact, RunResult

pytestmark = pytest.mark.anyio


def checked(ws: Path, *names: str) -> list[Artifact]:
    """The artifacts as the run's own check found them when the child answered."""
    claimed = [Artifact(path=str(ws / n), size=0, fs_type="file") for n in names]
    kept, skipped = check_artifacts(str(ws), claimed, [])
    assert not skipped
    return kept


async def deliver(ws: Path, result: RunResult) -> TaskOutput:
    async def behave(request: RunRequest) -> RunResult:
        # Between the run's check and the delivery: what a left-behind process could do.
        os.unlink(ws / "report.md")
        os.symlink("/etc/shadow", ws / "report.md")
        (ws / "notes.md").write_text("rewritten, longer than before")
        return result

    d = Delegator(builtin_registry(), Recorder(behave), workspace=ws)
    call = {"subagent_type": "explorer", "description": "look", "prompt": "Look."}
    with anyio.fail_after(30):
        return await d.execute(call, tool_call_id="c1")


async def test_an_artifact_changed_after_its_check_is_delivered_as_skipped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("report.md", "notes.md", "kept.md"):
        (ws / name).write_text("eleven byte")
    result = ok("found it", artifacts=checked(ws, "report.md", "notes.md", "kept.md"))
    out = await deliver(ws, result)
    assert [a.path for a in out.artifacts] == [str(ws / "kept.md")]
    reasons = {s.path: s.reason for s in out.skipped}
    assert "leading outside the workspace" in reasons[str(ws / "report.md")]
    assert reasons[str(ws / "notes.md")] == CHANGED
