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

CHILDREN = Path(__file__).resolve().parent.parent / "children"

pytestmark = pytest.mark.anyio

SCRIPT = json.dumps(
    [
        {"toolCalls": [{"name": "task", "arguments": {"prompt": "look"}, "id": "call-1"}]},
        {"toolCalls": [{"name": "complete", "arguments": {"summary": "used the parent"}}]},
    ]
)


async def test_a_parent_tool_is_called_by_the_childs_model_and_answered_by_the_parent(
    tmp_path: Path,
) -> None:
    seen: list[ToolCallParams] = []

    async def task(params: ToolCallParams) -> ToolCallResult:
        seen.append(params)
        return ToolCallResult(content="the sub-agent found 3 things")

    spec = ToolSpec(name="task", description="Delegate.", input_schema={"type": "object"})
    async with Supervisor() as sup:
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
