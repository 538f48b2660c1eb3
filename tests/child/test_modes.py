"""Explore and build mode: who may mutate the workspace, and who is asked first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from child_harness import ChildProcess, assistant, run_params

from tether.parent.models.scripted import ScriptedModel
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import AgentDefinition, ToolApproveParams, ToolApproveResult

MUTATIONS = [
    ("w", "write_file", {"path": "made.txt", "content": "x"}),
    ("e", "edit_file", {"path": "keep.txt", "oldString": "keep", "newString": "lost"}),
    ("b", "bash", {"command": "touch bashed.txt"}),
]


def _tool_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["toolCallId"]: m["content"] for m in messages if m["role"] == "tool"}


def test_a_read_only_run_hard_denies_mutating_tools_even_when_its_definition_lists_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "keep.txt").write_text("keep")
    with ChildProcess() as child:
        child.initialize()
        params = run_params(
            "ro", tmp_path, readOnly=True, tools=["read_file", "write_file", "edit_file", "bash"]
        )
        run = child.request("agent/run", params)
        first = child.expect_request("model/complete")
        offered = {t["name"] for t in first["params"]["tools"]}
        assert offered == {"read_file", "complete"}
        child.reply(first["id"], assistant("", *MUTATIONS))
        # No tool/approve is asked: the next request is the model turn (read_until would fail
        # on any other request).
        second = child.expect_request("model/complete")
        results = _tool_results(second["params"]["messages"])
        for call_id, name, _ in MUTATIONS:
            assert "read-only (explore mode)" in results[call_id], name
        child.reply(second["id"], assistant("", ("c", "complete", {"summary": "looked"})))
        result = child.response(run)["result"]
        assert result["success"] is True
        started = child.events("ro")[0]
        assert started["data"]["readOnly"] is True
        assert "write_file" not in started["data"]["tools"]
    assert (tmp_path / "keep.txt").read_text() == "keep"
    assert not (tmp_path / "made.txt").exists()
    assert not (tmp_path / "bashed.txt").exists()


def test_a_build_run_asks_the_parent_before_each_mutating_tool_and_relays_a_denial(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("bd", tmp_path))
        first = child.expect_request("model/complete")
        child.reply(
            first["id"],
            assistant(
                "",
                ("r", "list_dir", {}),
                ("w", "write_file", {"path": "ok.txt", "content": "fine"}),
                ("b", "bash", {"command": "touch nope.txt"}),
            ),
        )
        ask_write = child.expect_request("tool/approve")
        assert ask_write["params"]["tool"] == "write_file"
        assert ask_write["params"]["arguments"] == {"path": "ok.txt", "content": "fine"}
        child.reply(ask_write["id"], {"allow": True})
        ask_bash = child.expect_request("tool/approve")
        assert ask_bash["params"]["tool"] == "bash"
        child.reply(ask_bash["id"], {"allow": False, "reason": "no shell today"})
        second = child.expect_request("model/complete")
        results = _tool_results(second["params"]["messages"])
        assert results["w"].startswith("created ok.txt")
        assert results["b"] == "error: denied by the parent: no shell today"
        child.reply(second["id"], assistant("", ("c", "complete", {"summary": "ok"})))
        assert child.response(run)["result"]["success"] is True
    assert (tmp_path / "ok.txt").read_text() == "fine"
    assert not (tmp_path / "nope.txt").exists()


def _script(*turns: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel.from_json(json.dumps({"turns": list(turns)}))


@pytest.mark.in_memory
@pytest.mark.anyio
async def test_with_the_real_supervisor_a_denied_bash_reaches_the_model_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    def policy(params: ToolApproveParams) -> ToolApproveResult:
        asked.append(params.tool)
        if params.tool == "bash":
            return ToolApproveResult(allow=False, reason="bash is not allowed here")
        return ToolApproveResult(allow=True)

    model = _script(
        {"toolCalls": [{"id": "b1", "name": "bash", "arguments": {"command": "touch x"}}]},
        {
            "toolCalls": [
                {"id": "w1", "name": "write_file", "arguments": {"path": "y", "content": "1"}}
            ]
        },
        {"toolCalls": [{"name": "complete", "arguments": {"summary": "wrote y", "paths": ["y"]}}]},
    )
    async with Supervisor(ChildConfig(transport="memory")) as sup:
        events: list[Any] = []
        result = await sup.run(
            "go",
            agent=AgentDefinition(type="general"),
            workspace=tmp_path,
            model=model,
            approve=policy,
            on_event=events.append,
        )
    assert result.success, result
    assert asked == ["bash", "write_file"]
    assert [a.path for a in result.artifacts] == [str(tmp_path / "y")]
    denied = [e for e in events if getattr(e, "kind", "") == "tool_result" and e.data["id"] == "b1"]
    assert denied[0].data["isError"] is True
    assert "bash is not allowed here" in denied[0].data["content"]
    assert not (tmp_path / "x").exists()


@pytest.mark.in_memory
@pytest.mark.anyio
async def test_with_the_real_supervisor_explore_mode_denies_mutation_even_when_the_policy_allows(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    def allow_everything(params: ToolApproveParams) -> ToolApproveResult:
        asked.append(params.tool)
        return ToolApproveResult(allow=True)

    model = _script(
        {
            "toolCalls": [
                {"name": "write_file", "arguments": {"path": "w", "content": "1"}},
                {"name": "bash", "arguments": {"command": "touch b"}},
            ]
        },
        {"toolCalls": [{"name": "complete", "arguments": {"summary": "done"}}]},
    )
    definition = AgentDefinition(type="explorer", read_only=True, tools=["write_file", "bash"])
    async with Supervisor(ChildConfig(transport="memory")) as sup:
        result = await sup.run(
            "go", agent=definition, workspace=tmp_path, model=model, approve=allow_everything
        )
    assert result.success, result
    assert asked == []
    assert list(tmp_path.iterdir()) == []
