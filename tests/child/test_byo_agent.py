"""Bring your own agent: the child hosts a user's agent with the same context as its own loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from child_harness import ChildProcess, assistant, run_params

AGENT_FILE = Path(__file__).parent / "agents" / "byo_agent.py"


def _argv(spec: str) -> list[str]:
    return [sys.executable, "-I", "-m", "tether.child", "--agent", spec]


def test_a_custom_agent_talks_to_the_model_runs_tools_emits_events_and_returns_a_result(
    tmp_path: Path,
) -> None:
    (tmp_path / "note.txt").write_text("hello from the workspace\n")
    with ChildProcess(_argv(f"{AGENT_FILE}:make")) as child:
        child.initialize()
        run = child.request("agent/run", run_params("byo", tmp_path, readOnly=True))
        turn = child.expect_request("model/complete")
        assert turn["params"]["messages"] == [
            {"role": "user", "content": "Write the report.", "toolCalls": [], "toolCallId": None}
        ]
        child.reply(turn["id"], assistant("note.txt"))
        result = child.response(run)["result"]
        assert result["success"] is True
        assert result["summary"] == "note.txt: hello from the workspace"
        assert result["message"] == "the custom agent finished"
        assert result["usage"] == {"inputTokens": 10, "outputTokens": 5}
        kinds = [e["kind"] for e in child.events("byo")]
        assert kinds == ["started", "report"]
        assert child.events("byo")[1]["data"] == {
            "read": "note.txt",
            "isError": False,
            "writeDenied": True,
        }
    assert not (tmp_path / "x.txt").exists()  # explore mode holds for custom agents too


def test_the_agent_can_be_named_by_the_tether_agent_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "note.txt").write_text("via env\n")
    monkeypatch.setenv("TETHER_AGENT", f"{AGENT_FILE}:make")
    with ChildProcess() as child:
        child.initialize()
        run = child.request("agent/run", run_params("env", tmp_path, readOnly=True))
        turn = child.expect_request("model/complete")
        child.reply(turn["id"], assistant("note.txt"))
        assert child.response(run)["result"]["summary"] == "note.txt: via env"


def test_a_custom_agent_observes_cancellation_and_the_run_is_aborted(tmp_path: Path) -> None:
    with ChildProcess(_argv(f"{AGENT_FILE}:waiter")) as child:
        child.initialize()
        run = child.request("agent/run", run_params("wait", tmp_path))
        child.read_until(lambda m: m.get("params", {}).get("kind") == "report")
        child.notify("agent/cancel", {"runId": "wait", "reason": "enough"})
        result = child.response(run)["result"]
        assert result["status"] == "aborted"
        assert result["failure"]["kind"] == "cancelled"
        assert "enough" in result["message"]
    assert (tmp_path / "saw-cancel.txt").read_text() == "cancelled"


def test_an_agent_returning_something_else_fails_the_run_as_agent_error(tmp_path: Path) -> None:
    with ChildProcess(_argv(f"{AGENT_FILE}:returns_nonsense")) as child:
        child.initialize()
        result = child.call("agent/run", run_params("bad", tmp_path))["result"]
        assert result["failure"]["kind"] == "agent_error"
        assert "not a Finished or Failed outcome" in result["message"]


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("no_colon", "bad agent spec"),
        ("not_a_module_anywhere:make", "cannot import 'not_a_module_anywhere'"),
        (f"{AGENT_FILE}:missing", "has no attribute 'missing'"),
        ("/nonexistent/agent.py:make", "does not exist"),
    ],
)
def test_an_agent_spec_that_cannot_be_loaded_ends_the_child_with_status_3(
    spec: str, reason: str
) -> None:
    with ChildProcess(_argv(spec)) as child:
        assert child.wait_exit() == 3
        child.kill()
        assert reason in child.stderr
