"""A turn's tool calls: consecutive parent-tool calls overlap, the child's own tools never do,
and results keep the call order whatever order the calls finish in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from child_harness import ChildProcess, assistant, run_params

TASK = {
    "name": "task",
    "description": "Delegate.",
    "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}},
}


def _start(child: ChildProcess, workspace: Path) -> Any:
    child.initialize()
    params = {**run_params("o", workspace, readOnly=True), "parentTools": [TASK]}
    return child.request("agent/run", params)


def test_two_parent_tool_calls_of_one_turn_overlap_and_their_results_keep_call_order(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with ChildProcess() as child:
        run = _start(child, tmp_path)
        turn = child.expect_request("model/complete")
        child.reply(
            turn["id"],
            assistant(
                "fan out",
                ("c1", "task", {"prompt": "first"}),
                ("c2", "task", {"prompt": "second"}),
                ("c3", "list_dir", {"path": "."}),
                ("c4", "task", {"prompt": "third"}),
            ),
        )
        # Both calls of the group reach the parent before either is answered: they overlap.
        first = child.expect_request("tool/call")
        second = child.expect_request("tool/call")
        assert [first["params"]["callId"], second["params"]["callId"]] == ["c1", "c2"]
        # Answered in reverse order: the transcript still follows the call order.
        child.reply(second["id"], {"content": "answer two", "isError": False})
        child.reply(first["id"], {"content": "answer one", "isError": False})
        # The child's own tool ran after the group, alone; the last task call after it.
        third = child.expect_request("tool/call")
        assert third["params"]["callId"] == "c4"
        child.reply(third["id"], {"content": "answer three", "isError": False})
        turn = child.expect_request("model/complete")
        tools = [
            (m["toolCallId"], m["content"])
            for m in turn["params"]["messages"]
            if m["role"] == "tool"
        ]
        child.reply(turn["id"], assistant("", ("cx", "complete", {"summary": "fanned out"})))
        assert child.response(run)["result"]["summary"] == "fanned out"
    assert [call_id for call_id, _ in tools] == ["c1", "c2", "c3", "c4"]
    assert tools[0][1] == "answer one" and tools[1][1] == "answer two"
    assert "notes.txt" in tools[2][1]
    events = [(e["kind"], e["data"].get("id")) for e in child.events("o")]
    tool_events = [e for e in events if e[0] in ("tool_call", "tool_result")]
    assert tool_events == [
        ("tool_call", "c1"),
        ("tool_call", "c2"),
        ("tool_result", "c1"),
        ("tool_result", "c2"),
        ("tool_call", "c3"),
        ("tool_result", "c3"),
        ("tool_call", "c4"),
        ("tool_result", "c4"),
        ("tool_call", "cx"),
        ("tool_result", "cx"),
    ]


def test_parent_tool_calls_after_complete_in_the_same_turn_are_not_run(tmp_path: Path) -> None:
    with ChildProcess() as child:
        run = _start(child, tmp_path)
        turn = child.expect_request("model/complete")
        child.reply(
            turn["id"],
            assistant(
                "",
                ("c1", "complete", {"summary": "done early"}),
                ("c2", "task", {"prompt": "late"}),
                ("c3", "task", {"prompt": "later"}),
            ),
        )
        result = child.response(run)["result"]
    assert result["success"] and result["summary"] == "done early"
    results = [e["data"] for e in child.events("o") if e["kind"] == "tool_result"]
    assert [(r["id"], r["isError"]) for r in results] == [
        ("c1", False),
        ("c2", True),
        ("c3", True),
    ]
    assert all(r["content"].startswith("not run") for r in results[1:])
