"""The token budget, compaction of old turns, and the fallback summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from child_harness import ChildProcess, assistant, run_params

from tether.child.loop import KEPT_PREFIX
from tether.parent.models.scripted import ScriptedModel
from tether.parent.supervisor import ChildConfig, Supervisor
from tether.protocol.messages import AgentDefinition


def test_a_run_past_its_token_budget_ends_budget_exhausted_with_its_last_text(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("tb", tmp_path, tokenBudget=25))
        for text in ("first look", "second look"):
            turn = child.expect_request("model/complete")
            child.reply(turn["id"], assistant(text, ("l", "list_dir", {})))
        # 2 turns x 15 tokens = 30 > 25: no third turn is asked for.
        result = child.response(run)["result"]
        assert result["success"] is False
        assert result["failure"]["kind"] == "budget_exhausted"
        assert "token budget of 25" in result["message"]
        assert result["summary"] == "second look"
        assert result["usage"] == {"inputTokens": 20, "outputTokens": 10}


def test_a_run_that_never_calls_complete_falls_back_to_its_last_text(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("fb", tmp_path, maxIterations=2))
        for text in ("Found three TODOs.", ""):
            turn = child.expect_request("model/complete")
            child.reply(turn["id"], assistant(text, ("l", "list_dir", {})))
        result = child.response(run)["result"]
        assert result["failure"]["kind"] == "budget_exhausted"
        assert result["summary"] == "Found three TODOs."


def _reply_turn(child: ChildProcess, text: str, *calls: tuple[str, str, dict[str, Any]]) -> Any:
    turn = child.expect_request("model/complete")
    assert turn["params"]["purpose"] == "turn"
    child.reply(turn["id"], assistant(text, *calls))
    return turn


def test_old_turns_are_compacted_through_the_compaction_model_keeping_system_and_task(
    tmp_path: Path,
) -> None:
    (tmp_path / "big.txt").write_text("word " * 400)  # ~500 tokens once read
    with ChildProcess() as child:
        child.initialize()
        params = run_params(
            "cp", tmp_path, compactionThreshold=300, compactionModel="scripted:cheap"
        )
        run = child.request("agent/run", params)
        _reply_turn(child, "reading", ("r1", "read_file", {"path": "big.txt"}))
        # Turn 2: the transcript is big, but the only old part is the latest turn itself.
        _reply_turn(child, "reading again", ("r2", "read_file", {"path": "big.txt"}))
        compaction = child.expect_request("model/complete")
        cp = compaction["params"]
        assert cp["purpose"] == "compaction"
        assert cp["model"] == "scripted:cheap"
        assert cp["tools"] == []
        assert "[assistant calls read_file]" in cp["messages"][1]["content"]
        child.reply(
            compaction["id"],
            {"message": {"role": "assistant", "content": "read big.txt once"}, "usage": {}},
        )
        turn3 = child.expect_request("model/complete")
        messages = turn3["params"]["messages"]
        assert turn3["params"]["purpose"] == "turn"
        assert [m["role"] for m in messages] == ["system", "user", "user", "assistant", "tool"]
        assert messages[0]["content"] == "Be brief."
        assert messages[1]["content"] == "Write the report."
        assert messages[2]["content"].endswith("read big.txt once")
        assert messages[3]["content"] == "reading again"
        assert messages[4]["toolCallId"] == "r2"
        child.reply(turn3["id"], assistant("", ("c", "complete", {"summary": "done"})))
        result = child.response(run)["result"]
        assert result["success"] is True
        [event] = [e for e in child.events("cp") if e["kind"] == "compaction"]
        data = event["data"]
        assert data["beforeTokens"] > 300
        assert data["afterTokens"] < data["beforeTokens"]
        assert data["summarizedMessages"] == 2
        assert data["model"] == "scripted:cheap"


def test_a_failed_compaction_is_skipped_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("word " * 400)
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("cf", tmp_path, compactionThreshold=300))
        _reply_turn(child, "", ("r1", "read_file", {"path": "big.txt"}))
        _reply_turn(child, "", ("r2", "read_file", {"path": "big.txt"}))
        compaction = child.expect_request("model/complete")
        assert compaction["params"]["purpose"] == "compaction"
        child.reply_error(compaction["id"], -32009, "compaction model is down")
        turn3 = child.expect_request("model/complete")
        assert len(turn3["params"]["messages"]) == 6
        child.reply(turn3["id"], assistant("", ("c", "complete", {"summary": "done"})))
        assert child.response(run)["result"]["success"] is True


@pytest.mark.in_memory
@pytest.mark.anyio
async def test_compaction_with_the_real_supervisor_and_scripted_model(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("word " * 400)
    read = {"name": "read_file", "arguments": {"path": "big.txt"}}
    script = {
        "turns": [
            {"toolCalls": [read]},
            {"toolCalls": [read]},
            {"toolCalls": [{"name": "complete", "arguments": {"summary": "ok"}}]},
        ]
    }
    events: list[Any] = []
    async with Supervisor(ChildConfig(transport="memory")) as sup:
        result = await sup.run(
            "go",
            agent=AgentDefinition(compaction_threshold=300),
            workspace=tmp_path,
            model=ScriptedModel.from_json(json.dumps(script)),
            on_event=events.append,
        )
    assert result.success, result
    kinds = [getattr(e, "kind", None) for e in events]
    assert kinds.count("compaction") == 1


# --- what compaction keeps ----------------------------------------------------------------------

TASK = {
    "name": "task",
    "description": "Delegate.",
    "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}},
}
DELIVERED = '{"summary":"wrote A.md","status":"completed","artifacts":[{"path":"A.md","size":3,"fsType":"file"}]}'  # noqa: E501


def _compact(child: ChildProcess, summary: str = "the summary names no file") -> Any:
    compaction = child.expect_request("model/complete")
    assert compaction["params"]["purpose"] == "compaction"
    child.reply(compaction["id"], {"message": {"role": "assistant", "content": summary}})
    return compaction


def _kept(messages: list[dict[str, Any]]) -> list[str]:
    """The lines of the message holding what compaction kept (none: no such message)."""
    kept = [m["content"] for m in messages if m["content"].startswith(KEPT_PREFIX)]
    assert len(kept) <= 1
    return kept[0].splitlines()[1:] if kept else []


def test_a_parent_tools_delivery_is_kept_verbatim_through_every_compaction(
    tmp_path: Path,
) -> None:
    """The parent marks a result with its compact form: the summary may drop the path, the
    kept form does not, and a later compaction keeps it again (once)."""
    (tmp_path / "big.txt").write_text("word " * 400)
    with ChildProcess() as child:
        child.initialize()
        params = {**run_params("kd", tmp_path, compactionThreshold=300), "parentTools": [TASK]}
        run = child.request("agent/run", params)
        _reply_turn(child, "delegating", ("t1", "task", {"prompt": "Write A.md."}))
        call = child.expect_request("tool/call")
        long_form = DELIVERED[:-1] + ',"steps":4,"changedFiles":["A.md"],"note":"' + "x" * 2000
        child.reply(call["id"], {"content": long_form + '"}', "compact": DELIVERED})
        _reply_turn(child, "reading", ("r1", "read_file", {"path": "big.txt"}))
        first = _compact(child)
        # The task result is what was compacted; the compaction model saw it in full.
        assert "wrote A.md" in first["params"]["messages"][1]["content"]
        turn3 = _reply_turn(child, "reading more", ("r2", "read_file", {"path": "big.txt"}))
        messages = turn3["params"]["messages"]
        roles = [m["role"] for m in messages]
        assert roles == ["system", "user", "user", "user", "assistant", "tool"]
        assert not any(m["toolCallId"] == "t1" for m in messages)
        assert _kept(messages) == [f"[task t1] {DELIVERED}"]
        second = _compact(child)
        # The kept form is not handed to the compaction model again: it is kept, not summarised.
        assert DELIVERED not in second["params"]["messages"][1]["content"]
        turn4 = child.expect_request("model/complete")
        assert _kept(turn4["params"]["messages"]) == [f"[task t1] {DELIVERED}"]
        child.reply(turn4["id"], assistant("", ("c", "complete", {"summary": "done"})))
        assert child.response(run)["result"]["success"] is True
        compactions = [e["data"] for e in child.events("kd") if e["kind"] == "compaction"]
    assert [c["keptResults"] for c in compactions] == [1, 1]


def test_a_delivery_is_kept_by_the_compaction_after_one_that_failed(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("word " * 400)
    with ChildProcess() as child:
        child.initialize()
        params = {**run_params("kf", tmp_path, compactionThreshold=300), "parentTools": [TASK]}
        run = child.request("agent/run", params)
        _reply_turn(child, "", ("t1", "task", {"prompt": "Write A.md."}))
        call = child.expect_request("tool/call")
        child.reply(call["id"], {"content": DELIVERED, "compact": DELIVERED})
        _reply_turn(child, "", ("r1", "read_file", {"path": "big.txt"}))
        failed = child.expect_request("model/complete")
        assert failed["params"]["purpose"] == "compaction"
        child.reply_error(failed["id"], -32009, "compaction model is down")
        _reply_turn(child, "", ("r2", "read_file", {"path": "big.txt"}))
        _compact(child)
        turn4 = child.expect_request("model/complete")
        assert _kept(turn4["params"]["messages"]) == [f"[task t1] {DELIVERED}"]
        child.reply(turn4["id"], assistant("", ("c", "complete", {"summary": "done"})))
        assert child.response(run)["result"]["success"] is True


def test_a_result_without_a_compact_form_is_left_to_the_summary(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("word " * 400)
    with ChildProcess() as child:
        child.initialize()
        params = {**run_params("ks", tmp_path, compactionThreshold=300), "parentTools": [TASK]}
        run = child.request("agent/run", params)
        _reply_turn(child, "", ("t1", "task", {"prompt": "Write A.md."}))
        call = child.expect_request("tool/call")
        child.reply(call["id"], {"content": DELIVERED})
        _reply_turn(child, "", ("r1", "read_file", {"path": "big.txt"}))
        _compact(child)
        turn3 = child.expect_request("model/complete")
        messages = turn3["params"]["messages"]
        assert _kept(messages) == [] and DELIVERED not in json.dumps(messages)
        child.reply(turn3["id"], assistant("", ("c", "complete", {"summary": "done"})))
        assert child.response(run)["result"]["success"] is True
