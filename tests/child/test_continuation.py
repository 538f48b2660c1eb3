"""Continuable runs in the child: `agent/message` on the kept transcript, the report channel,
a question for the orchestrator, and parent tools called through `tool/call`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from child_harness import ChildProcess, assistant, run_params

RUN_BUSY = -32004
UNKNOWN_RUN = -32003
METHOD_NOT_FOUND = -32601


def continuable(run_id: str, workspace: Path, **agent: Any) -> dict[str, Any]:
    return {**run_params(run_id, workspace, **agent), "continuable": True}


def complete(summary: str) -> dict[str, Any]:
    return assistant("", ("c-done", "complete", {"summary": summary}))


def test_the_child_announces_continuation_and_parent_tools() -> None:
    with ChildProcess() as child:
        caps = child.initialize()["result"]["capabilities"]
    assert caps["agentMessage"] is True and caps["parentTools"] is True
    assert {"report", "ask_orchestrator"} <= set(caps["tools"])


def test_a_message_continues_a_finished_run_on_its_own_transcript(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", continuable("r1", tmp_path))
        turn = child.expect_request("model/complete")
        child.reply(turn["id"], complete("first answer"))
        first = child.response(run)["result"]
        assert first["success"] and first["summary"] == "first answer"

        follow = child.request("agent/message", {"runId": "r1", "message": "and the second?"})
        turn = child.expect_request("model/complete")
        contents = [(m["role"], m["content"]) for m in turn["params"]["messages"]]
        assert contents[1] == ("user", "Write the report.")
        assert contents[-1] == ("user", "and the second?")
        # The completed first activation is on the transcript: its complete call and result.
        assert any(m["toolCallId"] == "c-done" for m in turn["params"]["messages"])
        child.reply(turn["id"], complete("second answer"))
        second = child.response(follow)["result"]
    assert second["success"] and second["summary"] == "second answer"
    assert (second["turnCount"], second["iterationCount"]) == (1, 1)
    seqs = [e["seq"] for e in child.events("r1")]
    assert seqs == list(range(len(seqs)))  # one numbering across activations


def test_messages_are_refused_for_live_unknown_and_non_continuable_runs(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        busy_run = child.request("agent/run", continuable("busy", tmp_path))
        turn = child.expect_request("model/complete")
        busy = child.call("agent/message", {"runId": "busy", "message": "hurry"})
        assert busy["error"]["code"] == RUN_BUSY
        child.reply(turn["id"], complete("done"))
        child.response(busy_run)

        plain = child.request("agent/run", run_params("plain", tmp_path))
        turn = child.expect_request("model/complete")
        child.reply(turn["id"], complete("done"))
        child.response(plain)
        for run_id in ("plain", "never-started"):
            got = child.call("agent/message", {"runId": run_id, "message": "more"})
            assert got["error"]["code"] == UNKNOWN_RUN, got


def test_a_continuable_run_can_ask_its_orchestrator_and_continue_with_the_answer(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", continuable("q", tmp_path))
        turn = child.expect_request("model/complete")
        tools = {t["name"] for t in turn["params"]["tools"]}
        assert {"report", "ask_orchestrator"} <= tools
        child.reply(
            turn["id"],
            assistant(
                "I need a decision.",
                ("c1", "report", {"text": "found 3 candidates"}),
                ("c2", "ask_orchestrator", {"question": "Which of the 3 should I keep?"}),
            ),
        )
        paused = child.response(run)["result"]
        assert paused["status"] == "needs_input" and paused["success"] is True
        assert paused["question"] == "Which of the 3 should I keep?"
        reports = [e for e in child.events("q") if e["kind"] == "report"]
        assert reports and reports[0]["data"]["text"] == "found 3 candidates"

        answer = child.request("agent/message", {"runId": "q", "message": "Keep the second."})
        turn = child.expect_request("model/complete")
        assert turn["params"]["messages"][-1]["content"] == "Keep the second."
        child.reply(turn["id"], complete("kept the second"))
        done = child.response(answer)["result"]
    assert done["status"] == "completed" and done["summary"] == "kept the second"


def test_only_continuable_runs_have_report_and_ask(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        child.request("agent/run", run_params("plain", tmp_path))
        turn = child.expect_request("model/complete")
    tools = {t["name"] for t in turn["params"]["tools"]}
    assert not {"report", "ask_orchestrator"} & tools


def test_parent_tools_are_offered_to_the_model_and_called_through_the_parent(
    tmp_path: Path,
) -> None:
    task = {
        "name": "task",
        "description": "Delegate a task.",
        "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}},
    }
    with ChildProcess() as child:
        child.initialize()
        params = {**run_params("o", tmp_path, readOnly=True), "parentTools": [task]}
        run = child.request("agent/run", params)
        turn = child.expect_request("model/complete")
        assert "task" in {t["name"] for t in turn["params"]["tools"]}
        child.reply(turn["id"], assistant("delegating", ("call-9", "task", {"prompt": "go"})))
        call = child.expect_request("tool/call")
        assert call["params"] == {
            "runId": "o",
            "name": "task",
            "arguments": {"prompt": "go"},
            "callId": "call-9",
        }
        child.reply(call["id"], {"content": '{"status": "completed"}', "isError": False})
        turn = child.expect_request("model/complete")
        tool_msg = turn["params"]["messages"][-1]
        assert tool_msg["role"] == "tool" and tool_msg["content"] == '{"status": "completed"}'
        child.reply(turn["id"], complete("delegated"))
        assert child.response(run)["result"]["summary"] == "delegated"


def test_a_parent_tool_the_parent_refuses_is_an_error_the_model_reads(tmp_path: Path) -> None:
    task = {"name": "task", "description": "Delegate.", "inputSchema": {"type": "object"}}
    with ChildProcess() as child:
        child.initialize()
        params = {**run_params("o", tmp_path), "parentTools": [task]}
        run = child.request("agent/run", params)
        turn = child.expect_request("model/complete")
        child.reply(turn["id"], assistant("", ("c1", "task", {})))
        call = child.expect_request("tool/call")
        child.reply_error(call["id"], METHOD_NOT_FOUND, "no parent tool 'task' for this run")
        turn = child.expect_request("model/complete")
        tool_msg = turn["params"]["messages"][-1]
        assert tool_msg["content"].startswith("error: the parent refused task")
        child.reply(turn["id"], complete("gave up"))
        child.response(run)
