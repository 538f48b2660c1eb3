"""The JavaScript child in examples/node-child: the conformance kit passes it, and tether's
Supervisor drives it like its own child, through success, cancel and crashes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tether.parent.conformance import CHECK_NAMES, run_suite
from tether.parent.models.scripted import ScriptedModel
from tether.parent.process.limits import Limits
from tether.parent.run.events import ChildEvent, Event
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import (
    AgentDefinition,
    ChatMessage,
    ModelCompleteParams,
    ModelCompleteResult,
    ToolCall,
)

pytestmark = pytest.mark.anyio

NODE_CHILD = Path(__file__).resolve().parents[2] / "examples" / "node-child" / "child.js"

EXPLORE = """{"turns": [
  {"text": "Looking around.", "toolCalls": [{"name": "list_dir", "arguments": {}}]},
  {"toolCalls": [{"name": "read_file", "arguments": {"path": "notes/todo.txt"}},
                 {"name": "read_file", "arguments": {"path": "../secret.txt"}}]},
  {"text": "One TODO.", "toolCalls": [{"name": "complete", "arguments": {
    "summary": "one TODO in notes/todo.txt", "paths": ["notes/todo.txt", "nope.txt"]}}]}
]}"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "todo.txt").write_text("TODO: ship it\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return ws


async def test_the_node_child_passes_every_conformance_check(node: str) -> None:
    report = await run_suite([node, str(NODE_CHILD)])
    assert report.failures() == {}
    assert report.passed == len(CHECK_NAMES)


async def test_the_supervisor_runs_the_node_child_to_completion_with_a_scripted_model(
    node: str, workspace: Path
) -> None:
    events: list[ChildEvent] = []

    def keep(ev: Event) -> None:
        if isinstance(ev, ChildEvent):
            events.append(ev)

    # Process isolation: this test checks the node child's own workspace check, which a
    # sandbox would pre-empt (the outside file is not even visible in it).
    async with Supervisor(ChildConfig(isolation="process")) as sup:
        result = await sup.run(
            "Find the TODOs.",
            agent="explorer",
            workspace=workspace,
            model=ScriptedModel.from_json(EXPLORE),
            command=[node, str(NODE_CHILD)],
            limits=Limits(wall="20s"),
            on_event=keep,
        )
    assert result.success, result
    assert result.status == "completed"
    assert result.summary == "one TODO in notes/todo.txt"
    assert [(a.path, a.fs_type, a.size) for a in result.artifacts] == [
        (str(workspace / "notes" / "todo.txt"), "file", len("TODO: ship it\n"))
    ]
    assert [(s.path, s.reason) for s in result.skipped] == [("nope.txt", "does not exist")]
    assert result.iteration_count == 3
    assert result.usage.output_tokens > 0
    assert [e.seq for e in events] == list(range(len(events)))
    results = {e.data["id"]: e.data for e in events if e.kind == "tool_result"}
    listing, inside, outside = (results[f"call_{i}"] for i in (1, 2, 3))
    assert listing["content"] == "notes/" and not listing["isError"]
    assert inside["content"] == "TODO: ship it\n" and not inside["isError"]
    assert outside["isError"] and "outside the workspace" in outside["content"]


async def test_cancelling_a_node_child_run_gets_the_childs_aborted_answer(
    node: str, workspace: Path
) -> None:
    steps: list[ChildEvent] = []
    async with Supervisor() as sup:
        handle = await sup.start(
            "Think for a long time.",
            workspace=workspace,
            model=ScriptedModel.from_json('[{"text": "hmm", "delay": 30}]'),
            command=[node, str(NODE_CHILD)],
            on_event=lambda ev: (
                steps.append(ev) if isinstance(ev, ChildEvent) and ev.kind == "step" else None
            ),
        )
        with anyio.fail_after(10):
            while not steps:
                await anyio.sleep(0.01)
        result = await handle.cancel("the test cancelled it")
    assert not result.success
    assert result.status == "aborted"
    assert result.failure is not None and result.failure.kind == "cancelled"
    # The child answered the run itself (the supervisor's own cut-off says something else).
    assert result.message == "the run was cancelled: the test cancelled it"


@pytest.mark.parametrize(
    ("prompt", "kind", "exit_code", "signal"),
    [("CRASH:exit", "exit_nonzero", 3, None), ("CRASH:abort", "crashed", None, "SIGABRT")],
)
async def test_a_node_child_that_dies_mid_run_is_a_failed_result(
    node: str, workspace: Path, prompt: str, kind: str, exit_code: int | None, signal: str | None
) -> None:
    async with Supervisor() as sup:
        result = await sup.run(
            prompt,
            workspace=workspace,
            model=ScriptedModel.from_json(EXPLORE),
            command=[node, str(NODE_CHILD)],
            limits=Limits(wall="20s"),
        )
    assert not result.success
    assert result.status == "error"
    assert result.failure is not None
    assert (result.failure.kind, result.failure.exit_code, result.failure.signal) == (
        kind,
        exit_code,
        signal,
    )


async def test_a_node_child_run_that_never_completes_runs_out_of_iterations(
    node: str, workspace: Path
) -> None:
    async with Supervisor() as sup:
        result = await sup.run(
            "Chat.",
            workspace=workspace,
            agent=AgentDefinition(type="general", max_iterations=2),
            model=ScriptedModel.from_json('[{"text": "one"}, {"text": "two"}, {"text": "x"}]'),
            command=[node, str(NODE_CHILD)],
        )
    assert not result.success
    assert result.failure is not None and result.failure.kind == "budget_exhausted"
    assert result.summary == "two"


class _Recalls:
    """Completes every turn with the user messages it was shown, so a test sees the history."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        self.calls += 1
        said = " | ".join(m.content for m in params.messages if m.role == "user")
        call = ToolCall(id=f"n{self.calls}", name="complete", arguments={"summary": said})
        return ModelCompleteResult(message=ChatMessage(role="assistant", tool_calls=[call]))


async def test_the_supervisor_continues_a_node_child_warm_and_resumes_it_cold(
    node: str, workspace: Path, tmp_path: Path
) -> None:
    from tether.parent import ChildConfig

    async with Supervisor(state_dir=tmp_path / "state") as sup:
        agent = await sup.spawn_agent(
            "Find the TODOs.",
            workspace=workspace,
            model=_Recalls(),
            config=ChildConfig(command=(node, str(NODE_CHILD))),
            keep_alive=30,
        )
        first = await agent.result()
        warm = await sup.send_message(agent.id, "And the FIXMEs?")
        assert warm.run_id == first.run_id  # agent/message on the same node process
        await sup.agents.dispose(agent.id)
        cold = await sup.send_message(agent.id, "Anything else?")
    assert first.summary == "Find the TODOs."
    assert warm.summary == "Find the TODOs. | And the FIXMEs?"
    assert cold.success and cold.run_id != first.run_id
    assert cold.summary == "Find the TODOs. | And the FIXMEs? | Anything else?"
