"""A continuable agent's answer is checked again when `Agents` hands it back (`spawn_agent`'s
result, `send_message`, `tether agents send`), after its session has stored it: an artifact that
changed since the run's own check is delivered under `skipped`, never as it was first seen. The
change is made from inside the store's settle, the one step between the check and the delivery;
the gate's delivery has its own test (tests/delegation/test_delivery.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.parent import Supervisor
from tether.parent.agents.recorder import Recorder
from tether.parent.process.config import ChildConfig
from tether.parent.run.evidence import CHANGED
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    RunResult,
    ToolCall,
    Usage,
)

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")


class Delivers:
    """Completes at once, naming `path` as its artifact."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        done = ToolCall(id="c1", name="complete", arguments={"summary": "ok", "paths": [self.path]})
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="", tool_calls=[done]),
            usage=Usage(input_tokens=10, output_tokens=5),
            stop_reason="tool_use",
        )


@pytest.mark.in_memory
async def test_an_artifact_changed_after_its_check_is_delivered_as_skipped(
    state: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = workspace / "notes.txt"
    settle = Recorder.settle
    seen: list[RunResult] = []

    async def changed_meanwhile(self: Recorder, result: RunResult) -> None:
        seen.append(result)  # as the run checked it
        notes.write_text("rewritten after the check, longer than before\n")
        await settle(self, result)

    monkeypatch.setattr(Recorder, "settle", changed_meanwhile)
    async with Supervisor(IN_MEMORY, state_dir=state) as sup:
        agent = await sup.spawn_agent(
            "look", agent="explorer", workspace=workspace, model=Delivers(str(notes)), keep_alive=0
        )
        result = await agent.result()
    [checked] = seen
    assert [a.path for a in checked.artifacts] == [str(notes)]
    assert result.success and result.artifacts == []
    assert [(s.path, s.reason) for s in result.skipped] == [(str(notes), CHANGED)]
