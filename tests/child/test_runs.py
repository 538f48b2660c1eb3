"""agent/run end to end: the test plays the parent, answering the child's model/complete."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from child_harness import ChildProcess, assistant, run_params

RUN_BUSY = -32004
SHUTTING_DOWN = -32005
UNKNOWN_RUN = -32003
MODEL_ERROR = -32009
MESSAGE_TOO_LARGE = -32006


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events]


def _assert_seq_counts_up_from_zero(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(len(events)))


def test_a_run_that_calls_complete_returns_its_result_artifacts_and_ordered_events(
    tmp_path: Path,
) -> None:
    (tmp_path / "report.md").write_text("# findings\n")
    (tmp_path.parent / "outside.txt").write_text("not yours")
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r1", tmp_path))

        turn = child.expect_request("model/complete")
        params = turn["params"]
        assert params["runId"] == "r1"
        assert params["model"] == "scripted:test"
        assert params["messages"][0]["role"] == "system"
        assert params["messages"][0]["content"] == "Be brief."
        assert params["messages"][1]["role"] == "user"
        assert params["messages"][1]["content"] == "Write the report."
        spec = next(t for t in params["tools"] if t["name"] == "complete")
        assert "summary" in spec["inputSchema"]["properties"]

        paths = ["report.md", "missing.txt", "../outside.txt"]
        child.reply(
            turn["id"],
            assistant("Done.", ("c1", "complete", {"summary": "Wrote it.", "paths": paths})),
        )
        result = child.response(run)["result"]

        assert result["success"] is True
        assert result["status"] == "completed"
        assert result["summary"] == "Wrote it."
        assert result["runId"] == "r1"
        assert result["turnCount"] == 1
        assert result["iterationCount"] == 1
        assert result["usage"] == {"inputTokens": 10, "outputTokens": 5}
        [artifact] = result["artifacts"]
        assert artifact["path"] == str(tmp_path / "report.md")
        assert artifact["size"] == len("# findings\n")
        assert artifact["fsType"] == "file"
        assert artifact["modifiedAt"]
        skipped = {s["path"]: s["reason"] for s in result["skipped"]}
        assert skipped == {
            "missing.txt": "does not exist",
            "../outside.txt": "outside the workspace",
        }
        assert "failure" not in result or result["failure"] is None

        events = child.events("r1")
        assert _kinds(events) == ["started", "step", "text", "tool_call", "tool_result"]
        _assert_seq_counts_up_from_zero(events)
        assert events[2]["data"]["text"] == "Done."
        assert events[3]["data"]["name"] == "complete"


def test_an_unknown_tool_is_an_error_result_for_the_model_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r2", tmp_path))
        first = child.expect_request("model/complete")
        child.reply(first["id"], assistant("", ("c1", "teleport", {"to": "mars"})))

        second = child.expect_request("model/complete")
        last = second["params"]["messages"][-1]
        assert last["role"] == "tool"
        assert last["toolCallId"] == "c1"
        assert "unknown tool 'teleport'" in last["content"]
        child.reply(second["id"], assistant("", ("c2", "complete", {"summary": "gave up"})))

        result = child.response(run)["result"]
        assert result["success"] is True
        assert result["iterationCount"] == 2
        assert result["usage"] == {"inputTokens": 20, "outputTokens": 10}
        results = [e for e in child.events("r2") if e["kind"] == "tool_result"]
        assert results[0]["data"]["isError"] is True
        _assert_seq_counts_up_from_zero(child.events("r2"))


def test_bad_arguments_to_a_tool_are_an_error_result_not_a_crash(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r3", tmp_path))
        first = child.expect_request("model/complete")
        child.reply(first["id"], assistant("", ("c1", "complete", {"paths": "not-a-list"})))
        second = child.expect_request("model/complete")
        assert "invalid arguments" in second["params"]["messages"][-1]["content"]
        child.reply(second["id"], assistant("", ("c2", "complete", {"summary": "ok"})))
        assert child.response(run)["result"]["status"] == "completed"


def test_a_run_that_never_completes_exhausts_its_budget_and_keeps_its_last_text(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r4", tmp_path, maxIterations=2))
        for text in ("thinking...", "still thinking"):
            turn = child.expect_request("model/complete")
            child.reply(turn["id"], assistant(text))
        result = child.response(run)["result"]
        assert result["success"] is False
        assert result["status"] == "error"
        assert result["failure"]["kind"] == "budget_exhausted"
        assert result["summary"] == "still thinking"
        assert result["iterationCount"] == 2


def test_the_no_tool_calls_stop_condition_ends_a_run_with_its_text(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        params = run_params("r5", tmp_path, stopConditions=["no_tool_calls"])
        run = child.request("agent/run", params)
        turn = child.expect_request("model/complete")
        child.reply(turn["id"], assistant("The answer is 42."))
        result = child.response(run)["result"]
        assert result["success"] is True
        assert result["status"] == "completed"
        assert result["summary"] == "The answer is 42."
        assert result["artifacts"] == []


def test_a_model_error_from_the_parent_fails_the_run_as_agent_error(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r6", tmp_path))
        turn = child.expect_request("model/complete")
        child.reply_error(turn["id"], MODEL_ERROR, "provider is down")
        result = child.response(run)["result"]
        assert result["success"] is False
        assert result["status"] == "error"
        assert result["failure"]["kind"] == "agent_error"
        assert "provider is down" in result["message"]


def test_cancel_aborts_a_run_waiting_on_its_model_turn(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r7", tmp_path))
        turn = child.expect_request("model/complete")
        child.notify("agent/cancel", {"runId": "r7", "reason": "user pressed stop"})
        result = child.response(run)["result"]
        assert result["success"] is False
        assert result["status"] == "aborted"
        assert result["failure"]["kind"] == "cancelled"
        assert "user pressed stop" in result["message"]
        # The late reply to the abandoned turn is dropped; the child keeps serving.
        child.reply(turn["id"], assistant("too late"))
        assert child.call("ping")["result"] == {}


def test_the_same_run_id_twice_at_once_is_run_busy(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r8", tmp_path))
        turn = child.expect_request("model/complete")
        busy = child.call("agent/run", run_params("r8", tmp_path))
        assert busy["error"]["code"] == RUN_BUSY
        child.reply(turn["id"], assistant("", ("c1", "complete", {"summary": "one"})))
        assert child.response(run)["result"]["summary"] == "one"


def test_two_runs_proceed_concurrently_and_number_their_events_separately(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        run_a = child.request("agent/run", run_params("a", tmp_path))
        turn_a = child.expect_request("model/complete")
        run_b = child.request("agent/run", run_params("b", tmp_path))
        turn_b = child.expect_request("model/complete")
        assert {turn_a["params"]["runId"], turn_b["params"]["runId"]} == {"a", "b"}
        child.reply(turn_b["id"], assistant("", ("c", "complete", {"summary": "b done"})))
        assert child.response(run_b)["result"]["summary"] == "b done"
        child.reply(turn_a["id"], assistant("", ("c", "complete", {"summary": "a done"})))
        assert child.response(run_a)["result"]["summary"] == "a done"
        _assert_seq_counts_up_from_zero(child.events("a"))
        _assert_seq_counts_up_from_zero(child.events("b"))


def test_a_workspace_that_does_not_exist_fails_the_run_with_a_clear_message(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        result = child.call("agent/run", run_params("r9", tmp_path / "nope"))["result"]
        assert result["success"] is False
        assert result["failure"]["kind"] == "agent_error"
        assert "workspace" in result["message"]


def test_shutdown_aborts_live_runs_answers_null_and_refuses_new_runs(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r10", tmp_path))
        child.expect_request("model/complete")
        shutdown = child.request("shutdown")
        aborted = child.response(run)["result"]
        assert aborted["status"] == "aborted"
        assert aborted["failure"]["kind"] == "cancelled"
        assert child.response(shutdown)["result"] is None
        refused = child.call("agent/run", run_params("r11", tmp_path))
        assert refused["error"]["code"] == SHUTTING_DOWN
        child.notify("exit")
        assert child.wait_exit() == 0


def test_agent_message_for_a_run_it_never_kept_gets_a_clear_error(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        response = child.call("agent/message", {"runId": "r1", "message": "and then?"})
        assert response["error"]["code"] == UNKNOWN_RUN
        assert "continuable: true" in response["error"]["message"]
        assert child.call("ping")["result"] == {}


def test_a_result_over_the_parents_cap_is_answered_with_message_too_large(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize(maxMessageBytes=4000)
        run = child.request("agent/run", run_params("r12", tmp_path))
        turn = child.expect_request("model/complete")
        child.reply(turn["id"], assistant("", ("c1", "complete", {"summary": "x" * 5000})))
        error = child.response(run)
        assert error["error"]["code"] == MESSAGE_TOO_LARGE
        assert child.call("ping")["result"] == {}


def test_a_slow_model_turn_gets_heartbeat_events(tmp_path: Path) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r13", tmp_path))
        turn = child.expect_request("model/complete")
        started = time.monotonic()
        beat = child.read_until(lambda m: m.get("params", {}).get("kind") == "heartbeat")
        assert time.monotonic() - started < 4
        assert beat["params"]["data"]["waitingFor"] == "model"
        child.notifications.append(beat)
        child.reply(turn["id"], assistant("", ("c1", "complete", {"summary": "ok"})))
        child.response(run)
        _assert_seq_counts_up_from_zero(child.events("r13"))


def test_a_model_reply_that_does_not_fit_the_protocol_fails_the_run_as_agent_error(
    tmp_path: Path,
) -> None:
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("r14", tmp_path))
        turn = child.expect_request("model/complete")
        child.reply(turn["id"], {"message": "not a message object"})
        result = child.response(run)["result"]
        assert result["status"] == "error"
        assert result["failure"]["kind"] == "agent_error"
        assert "model/complete" in result["message"]
        assert child.call("ping")["result"] == {}
