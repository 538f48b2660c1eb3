"""A run replayed from its own trace, in a copy of the workspace it started from, reproduces
its result — the same summary, artifacts, tool calls and usage — for tether's built-in loop, an
orchestration with sub-agents and a bring-your-own agent; a replay that leaves the recorded
requests fails, naming the first divergence."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from tether.parent.models.replay import TraceModel
from tether.parent.models.scripted import ScriptedModel
from tether.parent.supervisor import Supervisor
from tether.parent.trace.compare import differences
from tether.parent.trace.format import ChildReport, Turn
from tether.parent.trace.reader import Trace, linked, read_trace
from tether.protocol.messages import RunResult

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
EXPLORER = ROOT / "examples" / "explorer.json"
ORCHESTRATE = ROOT / "examples" / "orchestrate.json"
NOTES = Path(__file__).with_name("agents") / "notes_agent.py"
NOTES_SCRIPT = [
    {
        "text": "Writing the note.",
        "toolCalls": [
            {"name": "write_file", "arguments": {"path": "NOTE.md", "content": "two files\n"}}
        ],
        "usage": {"inputTokens": 40, "outputTokens": 9},
    },
    {"text": "Wrote NOTE.md: the workspace holds two files.", "usage": {"inputTokens": 55}},
]


def tree(path: str) -> list[Trace]:
    trace = read_trace(path)
    return [trace, *linked(trace)]


def relative(result: RunResult, workspace: Path) -> list[tuple[str, int, str]]:
    return [(os.path.relpath(a.path, workspace), a.size, a.fs_type) for a in result.artifacts]


def reported_calls(path: str) -> list[tuple[object, object]]:
    run = read_trace(path).runs[0]
    return [(c.data["name"], c.data["arguments"]) for c in run.tool_calls]


async def record_and_replay(
    workspace: Path, again: Path, traces: Path, **run: object
) -> tuple[RunResult, RunResult]:
    with anyio.fail_after(120):
        async with Supervisor(trace=traces / "recorded") as sup:
            first = await sup.run(workspace=workspace, **run)  # type: ignore[arg-type]
        assert first.success, first
        assert first.trace is not None and first.trace.stopped is None
        replay = {**run, "model": f"scripted:trace:{first.trace.path}"}
        async with Supervisor(trace=traces / "replayed") as sup:
            second = await sup.run(workspace=again, **replay)  # type: ignore[arg-type]
    assert second.trace is not None
    return first, second


def assert_reproduced(first: RunResult, ws: Path, second: RunResult, again: Path) -> None:
    assert second.success, second
    assert second.summary == first.summary
    assert relative(second, again) == relative(first, ws)
    assert second.usage == first.usage and second.iteration_count == first.iteration_count
    assert first.trace is not None and second.trace is not None
    assert reported_calls(second.trace.path) == reported_calls(first.trace.path)
    assert differences(tree(first.trace.path), tree(second.trace.path)) == []


async def test_a_built_in_loop_run_replayed_from_its_trace_reproduces_its_result(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    first, second = await record_and_replay(
        workspace,
        replay_workspace,
        traces,
        prompt="Report the TODO notes.",
        agent="tester",
        model=f"scripted:{EXPLORER}",
    )
    assert_reproduced(first, workspace, second, replay_workspace)
    assert relative(second, replay_workspace)[0][0] == "TODO-REPORT.md"
    assert (replay_workspace / "TODO-REPORT.md").read_bytes() == (
        workspace / "TODO-REPORT.md"
    ).read_bytes()
    # Every answer the replayed run got is the recorded one, byte for byte.
    assert first.trace is not None and second.trace is not None
    recorded = [t.response for t in read_trace(first.trace.path).runs[0].turns]
    replayed = [t.response for t in read_trace(second.trace.path).runs[0].turns]
    assert replayed == recorded and len(recorded) == 5


async def test_a_replay_that_leaves_the_recorded_requests_fails_naming_the_first_divergence(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    async with Supervisor(trace=traces) as sup:
        first = await sup.run(
            "Report the TODO notes.",
            agent="tester",
            workspace=workspace,
            model=f"scripted:{EXPLORER}",
        )
    assert first.trace is not None
    with (replay_workspace / "README.md").open("a") as f:
        f.write("One more line.\n")  # the listing the model reads now shows another size
    model = await anyio.to_thread.run_sync(TraceModel.from_file, first.trace.path)
    async with Supervisor() as sup:
        second = await sup.run(
            "Report the TODO notes.", agent="tester", workspace=replay_workspace, model=model
        )
    assert not second.success and second.failure is not None
    assert "left the recorded run" in second.message
    assert "at model call 2" in second.message
    assert "messages[3].content, character 14" in second.message
    assert "recorded 'README.md  (103 bytes)" in second.message
    assert "now 'README.md  (118 bytes)" in second.message
    assert model.divergences and model.divergences[0] in second.message


async def test_a_run_with_another_task_matches_no_recorded_run_and_says_where_it_differs(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    async with Supervisor(trace=traces) as sup:
        first = await sup.run(
            "Report the TODO notes.",
            agent="tester",
            workspace=workspace,
            model=f"scripted:{EXPLORER}",
        )
    assert first.trace is not None
    async with Supervisor() as sup:
        second = await sup.run(
            "Report the FIXME notes.",
            agent="tester",
            workspace=replay_workspace,
            model=f"scripted:trace:{first.trace.path}",
        )
    assert not second.success
    assert "no recorded run starts with this request" in second.message
    assert "messages[1].content, character 12" in second.message


async def test_an_orchestration_with_sub_agents_replayed_from_its_trace_reproduces_every_run(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    with anyio.fail_after(180):
        async with Supervisor() as sup:
            first = await sup.orchestrate(
                "Fix it.",
                model=f"scripted:{ORCHESTRATE}",
                workspace=workspace,
                trace=traces / "recorded",
            )
            assert first.success, first.result
            assert first.result.trace is not None
            root = first.result.trace.path
            second = await sup.orchestrate(
                "Fix it.",
                model=f"scripted:trace:{root}",
                workspace=replay_workspace,
                trace=traces / "replayed",
            )
    assert second.success, second.result
    recorded = tree(root)
    assert second.result.trace is not None
    assert differences(recorded, tree(second.result.trace.path)) == []
    assert second.result.summary == first.result.summary
    assert second.totals() == first.totals()
    assert sorted((r.definition, r.role, r.status, r.steps) for r in second.ledger.records) == (
        sorted((r.definition, r.role, r.status, r.steps) for r in first.ledger.records)
    )
    # Parallel task calls finish in either order: compared by call.
    assert sorted((t.tool_call_id, t.output.summary) for t in second.tasks) == sorted(
        (t.tool_call_id, t.output.summary) for t in first.tasks
    )
    # The recording: the orchestrator, and one trace per sub-agent run naming it as parent.
    subs = [r for t in recorded[1:] for r in t.runs]
    assert len(subs) == len(first.ledger.records) == 6
    orchestrator = recorded[0].runs[0]
    assert orchestrator.header.orchestration is not None
    assert {r.header.parent_run_id for r in subs} == {orchestrator.run_id}
    assert {r.header.labels["toolCallId"] for r in subs} >= {"call-todos", "call-tests", "call-fix"}
    assert sorted(r.run_id for r in subs) == sorted(r.run_id for r in first.ledger.records)


async def test_a_bring_your_own_agent_replayed_from_its_trace_reproduces_its_result(
    workspace: Path, replay_workspace: Path, traces: Path
) -> None:
    first, second = await record_and_replay(
        workspace,
        replay_workspace,
        traces,
        prompt="Note what is here.",
        agent=f"{NOTES}:make",
        model=ScriptedModel.from_json(json.dumps(NOTES_SCRIPT)),
    )
    assert_reproduced(first, workspace, second, replay_workspace)
    assert relative(second, replay_workspace) == [("NOTE.md", 10, "file")]
    assert first.trace is not None
    run = read_trace(first.trace.path).runs[0]
    assert run.header.agent == f"{NOTES}:make"
    assert [c.data["name"] for c in run.tool_calls] == ["list_dir", "write_file"]
    assert all(isinstance(c, ChildReport) and c.source == "child" for c in run.tool_calls)
    assert [t.index for t in run.turns] == [1, 2] and all(isinstance(t, Turn) for t in run.turns)
