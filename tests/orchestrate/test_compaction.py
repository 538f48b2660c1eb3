"""Compaction keeps delivery: when the orchestrator's transcript is compacted, each task result
keeps its compact form (summary, status, and each artifact's path, size and type), so the
orchestrator can still find and re-read every delivered file. Real children; the sub-agents'
model is scripted, the orchestrator's is written in Python because it must act on what it is
shown after compaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from book import Recorder, call, complete, script, turn

from tether.parent import Supervisor
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    Usage,
)

pytestmark = pytest.mark.anyio

THRESHOLD = 300
"""Estimated tokens: the orchestrator's system prompt alone passes it, so every turn that has
an older turn behind it compacts."""
SUMMARY = "(a summary that names no file)"


def writer(name: str, text: str) -> dict[str, Any]:
    return script(
        f"Role: tester(?s:.*)Write {name}",
        turn(call("write_file", path=name, content=text)),
        turn(complete(f"wrote {name}", name)),
    )


def kept_forms(messages: list[ChatMessage]) -> dict[str, dict[str, Any]]:
    """The task results kept through compaction, by call id (`[task ID] {...}` lines)."""
    found: dict[str, dict[str, Any]] = {}
    for m in messages:
        for line in m.content.splitlines() if m.role == "user" else ():
            if line.startswith("[task "):
                call_id, _, form = line.removeprefix("[task ").partition("] ")
                found[call_id] = json.loads(form)
    return found


class Orchestrator:
    """Delegates A.md, then B.md, looks around once, then reads every file it finds in what
    was kept through compaction, forks an explorer, then completes. Compaction requests get a
    summary that names no file: whatever the orchestrator knows of the deliveries afterwards,
    compaction kept."""

    def __init__(self, sub: Recorder) -> None:
        self.sub = sub
        self.turns: list[ModelCompleteParams] = []
        self.compactions = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        if not params.run_id.startswith("orch-"):
            return await self.sub.complete(params)
        if params.purpose == "compaction":
            self.compactions += 1
            return ModelCompleteResult(message=ChatMessage(role="assistant", content=SUMMARY))
        self.turns.append(params)
        n = len(self.turns)
        task = {"subagent_type": "tester", "description": "write a file"}
        if n == 1:
            calls = [ToolCall(id="c1", name="task", arguments={**task, "prompt": "Write A.md."})]
        elif n == 2:
            calls = [ToolCall(id="c2", name="task", arguments={**task, "prompt": "Write B.md."})]
        elif n == 3:
            calls = [ToolCall(id="l1", name="list_dir", arguments={"path": "."})]
        elif n == 4:
            kept = kept_forms(params.messages).values()
            paths = [a["path"] for form in kept for a in form["artifacts"]]
            calls = [
                ToolCall(id=f"r{i}", name="read_file", arguments={"path": p})
                for i, p in enumerate(paths)
            ]
        elif n == 5:
            fork = {"subagent_type": "explorer", "description": "go on", "prompt": "Go on."}
            calls = [ToolCall(id="c3", name="task", arguments={**fork, "agentType": "fork"})]
        else:
            calls = [ToolCall(id="done", name="complete", arguments={"summary": "read them"})]
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="", tool_calls=calls),
            usage=Usage(input_tokens=10, output_tokens=1),
        )


async def test_after_compaction_the_orchestrator_still_sees_and_rereads_every_delivery(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    texts = {"A.md": "alpha: the first delivery\n", "B.md": "beta, a longer second delivery\n"}
    sub = Recorder(
        writer("A.md", texts["A.md"]),
        writer("B.md", texts["B.md"]),
        script("Role: explorer", turn(complete("forked"))),
    )
    model = Orchestrator(sub)
    async with Supervisor() as sup:
        got = await sup.orchestrate(
            "Write the notes.", model=model, workspace=ws, compaction_threshold=THRESHOLD
        )
    assert got.success, got.result
    assert model.compactions >= 2
    after = model.turns[3].messages  # the turn after both task results were compacted
    # The task results themselves are gone from the transcript, and the summary names no file.
    assert not [m for m in after if m.role == "tool" and m.tool_call_id in ("c1", "c2")]
    assert any(SUMMARY in m.content for m in after)
    kept = kept_forms(after)
    assert sorted(kept) == ["c1", "c2"]
    for call_id, name in (("c1", "A.md"), ("c2", "B.md")):
        form = kept[call_id]
        assert form["status"] == "completed" and form["summary"] == f"wrote {name}"
        [artifact] = form["artifacts"]
        assert Path(ws, artifact["path"]).resolve() == (ws / name).resolve()
        assert artifact["size"] == len(texts[name].encode())
        assert artifact["fsType"] == "file"
    # The orchestrator resolved each kept path and read the file again.
    read = [m.content for m in model.turns[4].messages if m.role == "tool"]
    assert all(any(text.strip() in r for r in read) for text in texts.values())
    # A fork after compaction starts from the compacted transcript, deliveries kept.
    [fork] = sub.runs("Role: explorer")
    assert sorted(kept_forms(fork[0].messages)) == ["c1", "c2"]
