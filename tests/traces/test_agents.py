"""A continuable agent's follow-ups append to its trace: warm ones as further activations of
its run, a cold resume as a new run of the same file naming the agent."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tether.parent.supervisor import Supervisor
from tether.parent.trace.format import AgentBound, FollowUp, Header, Outcome, Turn, decode
from tether.parent.trace.reader import read_trace
from tether.protocol.messages import (
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
    Usage,
)

pytestmark = pytest.mark.anyio


class Answering:
    """Completes every turn at once, numbering its answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.calls += 1
        summary = f"answer {self.calls}"
        call = ToolCall(id=f"c{self.calls}", name="complete", arguments={"summary": summary})
        return ModelCompleteResult(
            message=ChatMessage(role="assistant", content="", tool_calls=[call]),
            usage=Usage(input_tokens=10, output_tokens=2),
        )


async def test_warm_and_cold_follow_ups_of_an_agent_append_to_its_trace(
    workspace: Path, traces: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(120):
        async with Supervisor(state_dir=tmp_path / "state", trace=traces) as sup:
            agent = await sup.spawn_agent(
                "Survey.", agent="explorer", workspace=workspace, model=Answering()
            )
            first = await agent.result()
            warm = await sup.send_message(agent.id, "More?")
            await sup.agents.dispose(agent.id)
            cold = await sup.send_message(agent.id, "Anything else?")
    assert [r.summary for r in (first, warm, cold)] == ["answer 1", "answer 2", "answer 3"]
    paths = {r.trace.path for r in (first, warm, cold) if r.trace is not None}
    assert len(paths) == 1
    [path] = paths
    assert list(traces.iterdir()) == [Path(path)]
    kinds = []
    for raw in Path(path).read_bytes().splitlines():
        line = decode(raw)
        if isinstance(line, Header | AgentBound | FollowUp | Outcome):
            kinds.append((type(line).__name__, line.run_id))
        elif isinstance(line, Turn):
            kinds.append((f"Turn@{line.activation}", line.run_id))
    one, two = first.run_id, cold.run_id
    assert warm.run_id == one and two != one
    assert kinds == [
        ("Header", one),
        ("AgentBound", one),  # the first turn waits until the agent exists
        ("Turn@0", one),
        ("Outcome", one),
        ("FollowUp", one),
        ("Turn@1", one),
        ("Outcome", one),
        ("Header", two),
        ("Turn@0", two),
        ("Outcome", two),
    ]
    runs = read_trace(path).runs
    assert [r.agent_id for r in runs] == [agent.id, agent.id]
    assert runs[1].header.labels["agentId"] == agent.id
    assert [o.result.summary for r in runs for o in r.outcomes] == [
        "answer 1",
        "answer 2",
        "answer 3",
    ]
    # The cold resume starts from the stored transcript: its first request holds the first two.
    history = [m.content for m in runs[1].turns[0].request.messages if m.role == "user"]
    assert history[-3:] == ["Survey.", "More?", "Anything else?"]
