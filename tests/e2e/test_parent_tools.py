"""Tools the parent serves for a run (`tool/call`): offered only to the runs the parent chose,
and never to a child that merely asks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether.parent import (
    ParentTool,
    ScriptedModel,
    Supervisor,
    ToolCallParams,
    ToolCallResult,
    ToolSpec,
)
from tether.parent.process.config import ChildConfig

CHILDREN = Path(__file__).resolve().parent.parent / "children"

pytestmark = pytest.mark.anyio

IN_MEMORY = ChildConfig(transport="memory")
"""The in-memory tier's config: children of tether's runtime run without a process."""

SCRIPT = json.dumps(
    [
        {"toolCalls": [{"name": "task", "arguments": {"prompt": "look"}, "id": "call-1"}]},
        {"toolCalls": [{"name": "complete", "arguments": {"summary": "used the parent"}}]},
    ]
)


@pytest.mark.in_memory
async def test_a_parent_tool_is_called_by_the_childs_model_and_answered_by_the_parent(
    tmp_path: Path,
) -> None:
    seen: list[ToolCallParams] = []

    async def task(params: ToolCallParams) -> ToolCallResult:
        seen.append(params)
        return ToolCallResult(content="the sub-agent found 3 things")

    spec = ToolSpec(name="task", description="Delegate.", input_schema={"type": "object"})
    async with Supervisor(IN_MEMORY) as sup:
        result = await sup.run(
            "orchestrate",
            workspace=tmp_path,
            agent="explorer",
            model=ScriptedModel.from_json(SCRIPT),
            parent_tools=[ParentTool(spec, task)],
        )
    assert result.success and result.summary == "used the parent"
    [call] = seen
    assert (call.name, call.arguments, call.call_id) == ("task", {"prompt": "look"}, "call-1")
    assert call.run_id == result.run_id


async def test_a_run_offered_no_parent_tools_cannot_call_one(tmp_path: Path) -> None:
    # The same script in a run the parent gave no `task`: the model's call is an unknown tool
    # in the child, and a hostile child asking the parent directly is refused.
    async with Supervisor() as sup:
        plain = await sup.run(
            "orchestrate", workspace=tmp_path, model=ScriptedModel.from_json(SCRIPT)
        )
        hostile = await sup.run(
            "go",
            workspace=tmp_path,
            model=ScriptedModel.from_json("[]"),
            command=[sys.executable, "-I", str(CHILDREN / "calls_parent_tool.py")],
        )
    assert plain.success
    assert hostile.summary.startswith("error -32601 no parent tool 'task' is offered")


@pytest.mark.in_memory
async def test_the_broker_knows_the_runs_completed_turns_and_reports_each_turn(
    tmp_path: Path,
) -> None:
    recorded: list[tuple[int, str]] = []
    forked: list[list[tuple[str, str]]] = []
    handles = []

    async def on_turn(params: object, result: object) -> None:
        from tether.parent import ModelCompleteParams, ModelCompleteResult

        assert isinstance(params, ModelCompleteParams)
        assert isinstance(result, ModelCompleteResult)
        recorded.append((len(params.messages), result.message.tool_calls[0].name))

    async def task(params: ToolCallParams) -> ToolCallResult:
        turns = handles[0].broker.completed_turns()
        forked.append([(m.role, m.content) for m in turns])
        return ToolCallResult(content="done")

    spec = ToolSpec(name="task", description="Delegate.", input_schema={"type": "object"})
    async with Supervisor(IN_MEMORY) as sup:
        handle = await sup.start(
            "orchestrate",
            workspace=tmp_path,
            agent="explorer",
            model=ScriptedModel.from_json(SCRIPT),
            parent_tools=[ParentTool(spec, task)],
            on_turn=on_turn,
        )
        handles.append(handle)
        assert (await handle.result()).success
    # The fork sees the task prompt, never the system prompt or the turn in flight.
    assert forked == [[("user", "orchestrate")]]
    assert [name for _, name in recorded] == ["task", "complete"]
    assert recorded[1][0] > recorded[0][0]
